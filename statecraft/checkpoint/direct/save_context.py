"""What one direct save of an iteration is: its plan (:class:`DirectPlan`, which a retry must
repeat), its context (:class:`DirectSaveContext`, what the ``direct_save`` machine's effects
read and set), the shard writer and pointer writer it is given, and the manifest it commits
(:func:`planned_manifest`). The effects are in :mod:`statecraft.checkpoint.direct.bindings`.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Protocol

import attrs

from statecraft.checkpoint.direct.manifest import DirectManifest, generation_dir
from statecraft.checkpoint.kernel.layout import MANIFEST_NAME, iter_dirname
from statecraft.errors import DirectSaveError
from statecraft.storage.base import FileRecord, Store

__all__ = [
    "CONTROL_ORDER",
    "GENERATIONS_DIR",
    "DirectPlan",
    "DirectSaveContext",
    "PointerWriter",
    "ShardWriter",
    "generation_path",
    "planned_manifest",
]

#: control files of a generation, in write order
CONTROL_ORDER = ("trainer.pt", "data.pt")
GENERATIONS_DIR = ".posttrain/generations"
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
