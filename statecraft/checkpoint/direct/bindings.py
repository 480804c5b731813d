"""The effect bindings of the ``direct_save`` machine (``machines/direct_save.toml``): the
direct object-store primary save of one iteration (``checkpoint_store.backend=object_store``).

The table is the order: stage (plan + control payloads in memory; latest must not name a
newer iteration) -> check the writer lease -> DCP components (every rank PUTs its own shards,
the coordinator each component's ``.metadata`` after them) -> a fresh control generation
``iter_N/.posttrain/generations/<id>/{trainer.pt,data.pt}`` -> lease check, the manifest
``iter_N/.posttrain-manifest.json`` by If-None-Match (the commit) -> lease check,
``latest_checkpoint.txt`` through the fenced pointer write. A retry that observes a manifest
validates the plan and every object the manifest names and only completes or confirms
latest. This module says *how* each step acts on the bucket; it never decides the order. See
``specs/direct_save.toml`` for the guarantees, proven by
``statecraft crashcheck --machine direct_save``.

Layout under the root (every path relative, every object written by one atomic PUT)::

    latest_checkpoint.txt                                   # "iter_000000100\\n"
    iter_000000100/model/__<rank>_0.distcp, .metadata       # DCP, every rank's shards
    iter_000000100/optim/__<rank>_0.distcp, .metadata
    iter_000000100/.posttrain/generations/00000001/trainer.pt (+ data.pt)
    iter_000000100/.posttrain-manifest.json                 # the commit

Control generation ids are an increasing counter (8 digits, one past the highest id already
under ``iter_N/.posttrain/generations/``): deterministic (the crash explorer replays runs),
append-only (a crashed save's generation is never reused nor deleted), and ordered for a
reader. Only the generation the manifest names is active.

Failure modes (every one is fatal: the transaction ends ``failed`` and the caller raises):
``WriterLeaseError`` (the lease was taken over: nothing more is written), ``PlanDriftError``
(a retry of a committed iteration with another plan), ``CheckpointCorruptError`` (a
committed manifest names an object that is missing or of another size/digest),
``IterationCommittedError`` (another writer created the manifest first), ``DirectSaveError``
(latest names a newer iteration), ``ObjectRequestError`` (a request failed; its outcome may
be unknown: the retry observes).
"""

from __future__ import annotations

import logging
import socket
import sys
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Protocol

import attrs

from statecraft.checkpoint.direct.manifest import (
    DirectManifest,
    decode_direct_manifest,
    generation_dir,
)
from statecraft.checkpoint.kernel.layout import (
    LATEST_POINTER,
    MANIFEST_NAME,
    format_latest,
    iter_dirname,
    parse_latest,
)
from statecraft.engine import Bindings
from statecraft.engine.tagging import Role, collect_bindings, effect, observer
from statecraft.errors import (
    CheckpointCorruptError,
    DirectSaveError,
    IterationCommittedError,
    PlanDriftError,
    StoreConflictError,
)
from statecraft.storage.base import FileRecord, Store
from statecraft.storage.digest import Digest

__all__ = [
    "CONTROL_ORDER",
    "DirectPlan",
    "DirectSaveContext",
    "ShardWriter",
    "direct_save_bindings",
    "generation_path",
    "planned_manifest",
    "read_latest",
    "validate_found",
]

log = logging.getLogger("statecraft.direct_save")

#: control files of a generation, in write order
CONTROL_ORDER = ("trainer.pt", "data.pt")
_GENERATIONS = ".posttrain/generations"
#: DCP component -> the logical plan entry it saves (the manifest's ``plan``)
_LOGICAL = {"model": "model", "optim": "optimizer", "old": "model", "ref": "model"}


class _LeaseLike(Protocol):
    """What the save needs of a writer lease (``ObjectStoreLease`` satisfies it)."""

    def check(self) -> None: ...


#: writes the latest pointer under the lease: ``(store, lease, path, data)``
PointerWriter = Callable[[Store, Any, str, bytes], None]


class ShardWriter(Protocol):
    """Writes this rank's DCP shards (and on the coordinator each component's ``.metadata``,
    after every rank's shards) of ``ctx.iter_dir``; returns EVERY rank's records (gathered),
    keyed by path relative to the root (``iter_N/model/__1_0.distcp``)."""

    def __call__(self, ctx: DirectSaveContext) -> Mapping[str, FileRecord]: ...


@attrs.frozen
class DirectPlan:
    """What a save of one iteration writes; a same-iteration retry must plan the same.

    Attributes:
        iteration: the step saved.
        world_size: ranks that write shards.
        components: the DCP directories (``("model", "optim")``).
        control: the control files of the generation (``("trainer.pt", "data.pt")``).
        layout: per component (same order), a digest of its state's keys, shapes and
            dtypes (empty: not recorded): the same iteration saved from another model is plan
            drift. The world size is not: a committed iteration reshards on load, so a retry
            at another world size only confirms it.
    """

    iteration: int
    world_size: int
    components: tuple[str, ...] = ("model", "optim")
    control: tuple[str, ...] = ("trainer.pt",)
    layout: tuple[str, ...] = ()

    @property
    def logical(self) -> tuple[str, ...]:
        """The manifest's logical plan (``model``, ``optimizer``, ``training_state``)."""
        names = {_LOGICAL[c] for c in self.components} | {"training_state"}
        return tuple(n for n in ("model", "optimizer", "training_state") if n in names)


def generation_path(iteration: int, generation: str) -> str:
    """``iter_N/.posttrain/generations/<id>`` (:func:`generation_dir`)."""
    return generation_dir(iteration, generation)


def _no_pointer_fence(store: Store, lease: Any, path: str, data: bytes) -> None:
    """Without a lease (tools, the harness's single writer): a plain atomic PUT."""
    store.write_atomic(path, data)


@attrs.define
class DirectSaveContext:
    """One direct save of ``plan.iteration`` into the object-store root ``store``.

    Attributes:
        store: the root (``s3://<bucket>/<prefix>``), an ``ObjectStore``; every path is
            relative to it.
        plan: what this save writes (compared with a found manifest's plan on a retry).
        control: the control payloads by name (``trainer.pt``, ``data.pt``), the coordinator's.
        write_shards: writes the DCP components (see :class:`ShardWriter`).
        lease: this writer's lease, checked before the components, the manifest and latest
            (``None``: the harness's single writer, tools).
        write_pointer: writes latest under the lease (production: the fenced If-Match write).
        writer: who writes (host, pid; recorded in the manifest).
        lease_generation: the lease's generation (recorded in the manifest).
        generation: the control generation id (set by ``stage``).
        records: every DCP file's record, every rank's (set by ``write_components``).
        control_records: the control files' records (set by ``write_control``).
        manifest: the manifest document written or found.
        latest_before: the iteration latest named when staged (``None``: absent).
        wrote_latest: this run PUT latest (``False`` when it was confirmed only).
    """

    coordinated: ClassVar[tuple[str, ...]] = (
        "generation",
        "records",
        "control_records",
        "manifest",
        "latest_before",
        "wrote_latest",
    )

    store: Store
    plan: DirectPlan
    control: dict[str, bytes]
    write_shards: ShardWriter
    lease: _LeaseLike | None = None
    write_pointer: PointerWriter = _no_pointer_fence
    writer: dict[str, Any] = attrs.field(factory=lambda: {"host": socket.gethostname()})
    lease_generation: int | None = None
    generation: str | None = None
    records: dict[str, FileRecord] = attrs.field(factory=dict)
    control_records: dict[str, FileRecord] = attrs.field(factory=dict)
    manifest: DirectManifest | None = None
    latest_before: int | None = None
    wrote_latest: bool = False

    @property
    def iteration(self) -> int:
        return self.plan.iteration

    @property
    def iter_dir(self) -> str:
        return iter_dirname(self.plan.iteration)

    @property
    def manifest_path(self) -> str:
        return f"{self.iter_dir}/{MANIFEST_NAME}"

    @property
    def where(self) -> str:
        return f"{self.store.describe()}/{self.iter_dir}"


# ----------------------------------------------------------------------------- records
def read_latest(store: Store) -> int | None:
    """The iteration ``latest_checkpoint.txt`` names (``None`` when absent).

    Raises:
        CheckpointCorruptError: latest exists but does not name an iteration.
    """
    if store.stat(LATEST_POINTER) is None:
        return None
    raw = store.read_bytes(LATEST_POINTER)
    try:
        return parse_latest(raw)
    except ValueError as exc:
        raise CheckpointCorruptError(
            f"{store.describe()}/{LATEST_POINTER}",
            f"does not name an iteration ({exc})",
            "Point it at a committed iter_N (or remove it) after inspecting the root.",
        ) from None


def _next_generation(store: Store, iteration: int) -> str:
    base = f"{iter_dirname(iteration)}/{_GENERATIONS}"
    taken = [int(n) for n in store.list(base) if n.isdigit()]
    return f"{max(taken, default=0) + 1:08d}"


# ----------------------------------------------------------------------------- observe
@observer()
def observe_direct_save(ctx: DirectSaveContext) -> str:
    """``committed`` (the manifest exists and latest names iter_N), ``manifest_committed``
    (the manifest exists, latest does not name it), ``partial`` (objects under iter_N but no
    manifest), ``absent``. Reads only."""
    if ctx.store.stat(ctx.manifest_path) is not None:
        try:
            latest = read_latest(ctx.store)
        except CheckpointCorruptError:
            latest = None
        return "committed" if latest == ctx.iteration else "manifest_committed"
    if ctx.store.stat(ctx.iter_dir) is not None:
        return "partial"
    return "absent"


# ----------------------------------------------------------------------------- effects
def _refuse_newer(ctx: DirectSaveContext, latest: int | None) -> None:
    if latest is not None and latest > ctx.iteration:
        raise DirectSaveError(
            f"{ctx.store.describe()}/{LATEST_POINTER}",
            f"names {iter_dirname(latest)}, newer than {ctx.iter_dir} being saved; latest "
            "never moves backwards, so this save was refused before anything was written",
            "Resume from the newest checkpoint (or save under a fresh root) instead of saving "
            "an older iteration into this one.",
        )


@effect(role=Role.COORDINATOR)
def stage(ctx: DirectSaveContext) -> None:
    """Check the plan against the payloads, refuse when latest names a newer iteration, and
    pick the next control generation id (reads only)."""
    missing = [n for n in ctx.plan.control if n not in ctx.control]
    extra = [n for n in ctx.control if n not in ctx.plan.control]
    if missing or extra or not ctx.plan.components:
        raise DirectSaveError(
            ctx.where,
            f"the save's payloads do not match its plan (missing {missing}, extra {extra}, "
            f"components {list(ctx.plan.components)})",
            "This is a bug in the caller: build the plan from the payloads it saves.",
        )
    ctx.latest_before = read_latest(ctx.store)
    _refuse_newer(ctx, ctx.latest_before)
    ctx.generation = _next_generation(ctx.store, ctx.iteration)


def _check_lease(ctx: DirectSaveContext) -> None:
    if ctx.lease is not None:
        ctx.lease.check()


@effect(role=Role.COORDINATOR)
def check_lease(ctx: DirectSaveContext) -> None:
    """Renew the lease when more than half its ttl passed, then check it is ours.

    Raises:
        WriterLeaseError: another writer owns the root now (named); nothing was written.
    """
    if ctx.lease is None:
        return
    renew = getattr(ctx.lease, "renew_if_due", None)
    if callable(renew):
        renew()
    ctx.lease.check()


@effect(role=Role.EVERY_RANK)
def write_components(ctx: DirectSaveContext) -> None:
    """Every rank writes its own shards (DCP), the coordinator each ``.metadata`` after them;
    every rank's records are gathered.

    Raises:
        DirectSaveError: a component has no ``.metadata`` record, or a record lies outside
            ``iter_N/<component>/``.
    """
    records = dict(ctx.write_shards(ctx))
    for component in ctx.plan.components:
        metadata = f"{ctx.iter_dir}/{component}/.metadata"
        if metadata not in records:
            raise DirectSaveError(
                f"{ctx.store.describe()}/{metadata}",
                "was not written by the DCP save (no record of it)",
                "This is a bug in the storage writer: the coordinator writes each .metadata.",
            )
    outside = [
        p
        for p in records
        if not any(p.startswith(f"{ctx.iter_dir}/{c}/") for c in ctx.plan.components)
    ]
    if outside:
        raise DirectSaveError(ctx.where, f"the DCP save recorded files outside it: {outside}")
    ctx.records = records


@effect(role=Role.COORDINATOR)
def write_control(ctx: DirectSaveContext) -> None:
    """Check the lease, then PUT the control files of the fresh generation (never one a
    manifest names: the id is past every existing one)."""
    if ctx.generation is None:
        raise DirectSaveError(ctx.where, "write_control ran before stage picked a generation")
    _check_lease(ctx)
    base = generation_path(ctx.iteration, ctx.generation)
    records = {}
    for name in CONTROL_ORDER:
        if name in ctx.control:
            records[name] = ctx.store.write_atomic(f"{base}/{name}", ctx.control[name])
    ctx.control_records = records


def planned_manifest(ctx: DirectSaveContext) -> DirectManifest:
    """The manifest this save commits (after its components and control generation)."""
    if ctx.generation is None:
        raise DirectSaveError(ctx.where, "the manifest was built before stage picked a generation")
    prefix = f"{ctx.iter_dir}/"
    writer = {k: str(v) for k, v in ctx.writer.items()}
    writer["world_size"] = str(ctx.plan.world_size)
    return DirectManifest.build(
        ctx.iteration,
        control_generation=ctx.generation,
        control=ctx.control_records,
        plan=ctx.plan.logical,
        writer=writer,
        lease_generation=ctx.lease_generation or 1,
        components={c: c for c in ctx.plan.components},
        files={p[len(prefix) :]: r for p, r in ctx.records.items()},
        layout=dict(zip(ctx.plan.components, ctx.plan.layout, strict=False)),
    )


@effect(role=Role.COORDINATOR)
def commit_manifest(ctx: DirectSaveContext) -> None:
    """Check the lease, then create the manifest by If-None-Match: the commit.

    Raises:
        WriterLeaseError: the lease was taken over; no manifest was created.
        IterationCommittedError: another writer created iter_N's manifest first; it is kept.
    """
    if not ctx.records or not ctx.control_records or ctx.generation is None:
        raise DirectSaveError(ctx.where, "commit_manifest ran before the components/control")
    _check_lease(ctx)
    manifest = planned_manifest(ctx)
    try:
        ctx.store.create_exclusive(ctx.manifest_path, manifest.encode())
    except StoreConflictError:
        raise IterationCommittedError(
            f"{ctx.store.describe()}/{ctx.manifest_path} was created by another writer while "
            "this save ran; a committed iteration is never rewritten, so nothing was "
            "overwritten. Check which job writes this root (statecraft inspect).",
            path=f"{ctx.store.describe()}/{ctx.manifest_path}",
        ) from None
    ctx.manifest = manifest


def _publish(ctx: DirectSaveContext) -> None:
    _check_lease(ctx)
    latest = read_latest(ctx.store)
    if latest == ctx.iteration:
        return
    _refuse_newer(ctx, latest)
    ctx.write_pointer(ctx.store, ctx.lease, LATEST_POINTER, format_latest(ctx.iteration))
    ctx.wrote_latest = True


@effect(role=Role.COORDINATOR)
def publish_latest(ctx: DirectSaveContext) -> None:
    """Check the lease, then move latest to iter_N (fenced: If-Match on the etag this writer
    last saw). Latest never moves backwards.

    Raises:
        WriterLeaseError: the lease was taken over, or latest changed under us (412).
        DirectSaveError: latest names a newer iteration now.
    """
    _publish(ctx)


def _drift(ctx: DirectSaveContext, found: DirectManifest) -> list[str]:
    out = []
    if found.plan != ctx.plan.logical:
        out.append(f"plan: committed {list(found.plan)}, now {list(ctx.plan.logical)}")
    if sorted(found.components) != sorted(ctx.plan.components):
        out.append(
            f"components: committed {sorted(found.components)}, now {sorted(ctx.plan.components)}"
        )
    if sorted(found.control) != sorted(ctx.plan.control):
        out.append(f"control files: committed {sorted(found.control)}, now "
                   f"{sorted(ctx.plan.control)}")  # fmt: skip
    layout = dict(zip(ctx.plan.components, ctx.plan.layout, strict=False))
    if found.layout and layout and found.layout != layout:
        changed = sorted(c for c in layout if found.layout.get(c) != layout[c])
        out.append(f"state layout (keys, shapes, dtypes) of {changed}")
    return out


def validate_found(ctx: DirectSaveContext) -> DirectManifest:
    """The found manifest, after checking its plan is this save's and every object it names
    is in the bucket with its size (control files: and digest). Reads only.

    Raises:
        PlanDriftError: the committed plan differs (named, both sides).
        CheckpointCorruptError: the manifest is malformed or names a missing or different
            object (named).
    """
    where = f"{ctx.store.describe()}/{ctx.manifest_path}"
    found = decode_direct_manifest(
        ctx.store.read_bytes(ctx.manifest_path), source=where, iteration=ctx.iteration
    )
    drift = _drift(ctx, found)
    if drift:
        raise PlanDriftError(
            f"{where}: {ctx.iter_dir} is committed with another plan ({'; '.join(drift)}). A "
            "committed iteration is never rewritten, so nothing was written. Resume from it "
            "(or from latest) instead of saving the same iteration with another layout",
            path=where,
            differences=drift,
        )
    named = [(f"{ctx.iter_dir}/{p}", e) for p, e in found.files.items()]
    named += [(found.control_path(n), e) for n, e in found.control.items()]
    for component in found.components.values():
        if found.files and f"{component}/.metadata" not in found.files:
            raise CheckpointCorruptError(where, f"names no {component}/.metadata")
    for path, entry in named:
        stat = ctx.store.stat(path)
        if stat is None or stat.is_dir or stat.size != entry.size:
            shown = "absent" if stat is None else f"{stat.size} bytes"
            raise CheckpointCorruptError(
                f"{ctx.store.describe()}/{path}",
                f"is {shown}; the committed manifest names {entry.size} bytes",
                "The committed checkpoint is damaged: resume from an older one.",
            )
    for name, entry in found.control.items():
        data = ctx.store.read_bytes(found.control_path(name))
        if Digest.of(data, entry.digest.algorithm) != entry.digest:
            raise CheckpointCorruptError(
                f"{ctx.store.describe()}/{found.control_path(name)}",
                f"does not match the digest the manifest records ({entry.digest})",
                "The committed checkpoint is damaged: resume from an older one.",
            )
    return found


@effect(role=Role.COORDINATOR)
def validate_committed(ctx: DirectSaveContext) -> None:
    """A retry found iter_N's manifest: validate it (plan, referenced objects); nothing is
    written under iter_N."""
    ctx.manifest = validate_found(ctx)
    ctx.generation = ctx.manifest.control_generation


@effect(role=Role.COORDINATOR)
def confirm_committed(ctx: DirectSaveContext) -> None:
    """A retry found iter_N committed and named by latest (an ambiguous latest PUT that took
    effect): validate it; nothing is written."""
    validate_committed(ctx)


@effect(role=Role.COORDINATOR)
def complete_latest(ctx: DirectSaveContext) -> None:
    """After validation: move latest to iter_N (as ``publish_latest``)."""
    _publish(ctx)


def direct_save_bindings() -> Bindings:
    """The bindings of this module's table, collected from the tags above."""
    return collect_bindings(sys.modules[__name__])
