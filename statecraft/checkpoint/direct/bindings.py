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
import sys

from statecraft.checkpoint.direct.found_manifest import validate_found
from statecraft.checkpoint.direct.latest import read_latest
from statecraft.checkpoint.direct.save_context import (
    CONTROL_ORDER,
    GENERATIONS_DIR,
    DirectPlan,
    DirectSaveContext,
    ShardWriter,
    generation_path,
    planned_manifest,
)
from statecraft.checkpoint.kernel.commit import advance_pointer, create_manifest_last
from statecraft.checkpoint.kernel.layout import LATEST_POINTER, iter_dirname
from statecraft.engine import Bindings
from statecraft.engine.tagging import Role, collect_bindings, effect, observer
from statecraft.errors import (
    CheckpointCorruptError,
    DirectSaveError,
    IterationCommittedError,
    StoreConflictError,
)
from statecraft.storage.base import Store

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


def _next_generation(store: Store, iteration: int) -> str:
    base = f"{iter_dirname(iteration)}/{GENERATIONS_DIR}"
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
        create_manifest_last(ctx.store, ctx.manifest_path, manifest.encode())
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
    advance_pointer(
        ctx.store,
        ctx.iteration,
        write=lambda path, data: ctx.write_pointer(ctx.store, ctx.lease, path, data),
    )
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
