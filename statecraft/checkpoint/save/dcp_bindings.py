"""The effect bindings of the ``dcp_save`` machine (``machines/dcp_save.toml``).

The table is the order: stage (every rank captures its own shard state) -> prepare ``iter_N``
(coordinator) -> every rank writes its DCP shards of ``model/`` and ``optim/``, the coordinator
their ``.metadata`` (:func:`~statecraft.writers.dcp.save_dcp_state`; one every-rank effect whose
end holds every rank's file records) -> control state -> manifest (exclusive create, the commit)
-> ``latest_checkpoint.txt`` (coordinator), each durable before the next. The manifest records
every file under ``iter_N`` (``model/__1_0.distcp``, ``model/.metadata``, ``trainer.pt``) with
its size and digest. See ``specs/dcp_save.toml`` for the guarantees.

Ranks: effects tagged ``Role.EVERY_RANK`` run on every rank and agree on failure (every rank
raises when one did, so every rank takes the same ``on_error`` transition); coordinator effects
run on rank 0 and their outcome and :attr:`DcpSaveContext.coordinated` fields reach every rank
(:func:`~statecraft.parallel.coordinated.rank_zero_effects`). Every rank must see the same
checkpoints directory (a shared filesystem); the observation is rank 0's, broadcast.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import attrs

from statecraft.checkpoint.fencing.fenced_store import FencedStore
from statecraft.checkpoint.fencing.lease import WriterLease
from statecraft.checkpoint.kernel.commit import (
    prepare_unit,
    require_written,
    settle_found_unit,
    write_durably,
)
from statecraft.checkpoint.kernel.commit_rules import (
    fence_save,
    observe_iteration,
    publish_manifest,
    refuse_plan_drift,
    verify_found_commit,
)
from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.checkpoint.kernel.manifest import SavePlan
from statecraft.checkpoint.kernel.plan import DCP_PLAN, Phase
from statecraft.checkpoint.kernel.verify import read_manifest
from statecraft.checkpoint.save.commit_effects import (
    advance_latest,
    discard_partial,
    refuse_corrupt,
)
from statecraft.engine import Bindings
from statecraft.engine.tagging import Role, collect_bindings, effect, observer
from statecraft.errors import (
    CheckpointError,
)
from statecraft.parallel.collectives import Collective, SingleProcess
from statecraft.parallel.rank0 import portable_error, restore_error
from statecraft.storage.base import FileRecord, Store
from statecraft.writers.dcp import DcpWriter, save_dcp_state

# advance_latest, discard_partial, refuse_corrupt: defined once in commit_effects (the save
# table binds them too); collected from this module like its own.
__all__ = [
    "DcpSaveContext",
    "advance_latest",
    "dcp_save_bindings",
    "dcp_save_plan",
    "discard_partial",
    "refuse_corrupt",
]

log = logging.getLogger("statecraft.save")


def dcp_save_plan(iteration: int, *, with_data: bool) -> SavePlan:
    """The full plan of a DCP save (:data:`~statecraft.checkpoint.kernel.plan.DCP_PLAN`)."""
    return DCP_PLAN.save_plan(iteration, with_data=with_data)


@attrs.define
class DcpSaveContext:
    """One DCP save transaction, one instance per rank.

    Attributes:
        store: the checkpoints root as this rank sees it (the same directory on every rank).
        plan: what this save writes (format ``dcp``; ``files`` are entries: ``model``,
            ``optim``, ``trainer.pt``, ``data.pt``).
        collective: the ranks of the save (``SingleProcess`` for a world of one).
        payloads: entry -> zero-argument producer. On every rank the DCP entries (``model``,
            ``optim``: this rank's state dict, DTensor shards or replicated tensors); on the
            coordinator also the control entries. Each is called once, by ``stage_shards``.
        writer: the DCP writer (control files; ``.metadata`` parsing on verification).
        writer_info: extra ``writer`` fields for the manifest.
        files_per_rank: DCP shard files each rank writes per component.
        staged: the captured payloads (entry -> object), filled by ``stage_shards``.
        records: path relative to ``iter_N`` -> size and digest of each file written; after
            ``write_shards`` every rank's shard records on every rank.
        commit_conflict: the manifest's exclusive create found another commit, or the fence
            refused a write (another writer owns the attempt or the iteration).
        lease: this process's writer lease (rank 0's; ``None`` elsewhere and in the harness).
        found_level: how a retry verifies a committed iteration (``"digest"``).
    """

    coordinated: ClassVar[tuple[str, ...]] = ("records", "commit_conflict")

    store: Store
    plan: SavePlan
    payloads: Mapping[str, Callable[[], Any]]
    collective: Collective = attrs.field(factory=SingleProcess)
    writer: DcpWriter = attrs.field(factory=DcpWriter)
    writer_info: dict[str, str] = attrs.field(factory=dict)
    files_per_rank: int = 1
    staged: dict[str, Any] = attrs.field(factory=dict)
    records: dict[str, FileRecord] = attrs.field(factory=dict)
    commit_conflict: bool = False
    lease: WriterLease | None = None
    found_level: str = "digest"

    def __attrs_post_init__(self) -> None:
        if self.plan.format != DcpWriter.format_name:
            raise CheckpointError(
                f"a DCP save needs a plan of format 'dcp', got {self.plan.format!r}; use the "
                "save machine for consolidated checkpoints"
            )
        unknown = sorted(set(self.plan.files) - set(DCP_PLAN.names))
        if unknown:
            raise CheckpointError(
                f"DCP save plan names {unknown}, which the DCP plan does not describe "
                f"(entries: {list(DCP_PLAN.names)})"
            )
        needed = self.bulk_entries + (self.control_entries if self.coordinator else ())
        missing = sorted(set(needed) - set(self.payloads))
        if missing:
            raise CheckpointError(
                f"DCP save on rank {self.collective.rank} needs payloads for {missing}; got "
                f"{sorted(self.payloads)}"
            )

    @property
    def coordinator(self) -> bool:
        return self.collective.rank == 0

    @property
    def bulk_entries(self) -> tuple[str, ...]:
        return tuple(e.name for e in DCP_PLAN.in_phase(Phase.BULK) if e.name in self.plan.files)

    @property
    def control_entries(self) -> tuple[str, ...]:
        return tuple(e.name for e in DCP_PLAN.in_phase(Phase.CONTROL) if e.name in self.plan.files)

    @property
    def iter_dir(self) -> str:
        return iter_dirname(self.plan.iteration)

    def path(self, name: str) -> str:
        return f"{self.iter_dir}/{name}"

    @property
    def fenced(self) -> FencedStore:
        """The store every write effect acts through (:func:`fence` before each publication)."""
        return FencedStore(self.store, lambda path: fence(self, path))


def fence(ctx: DcpSaveContext, path: str) -> None:
    """Refuse a publication or removal of ``path`` that would touch another writer's work
    (:func:`~statecraft.checkpoint.kernel.commit_rules.fence_save`: the lease, where
    this rank holds it, must still be ours; nothing but the manifest is written into an
    iteration that holds a manifest).

    Raises:
        WriterLeaseError: the lease was taken over (or is gone).
        IterationCommittedError: the iteration holds a manifest (someone committed it).
    """
    fence_save(ctx, path)


def _every_rank(ctx: DcpSaveContext, step: Callable[[], None]) -> None:
    """Run ``step`` here, then agree with the other ranks: when any rank failed, every rank
    raises (its own error, or the lowest failing rank's), so all take the same transition."""
    error: BaseException | None = None
    try:
        step()
    except Exception as exc:  # shared below, then re-raised
        error = exc
    if ctx.collective.world_size == 1:
        if error is not None:
            raise error
        return
    sent = ctx.collective.all_gather(None if error is None else portable_error(error))
    if error is not None:
        raise error
    for other in sent:
        if other is not None:
            raise restore_error(other)


# ----------------------------------------------------------------------------- observe
@observer()
def observe_dcp_save(ctx: DcpSaveContext) -> str:
    """Classify durable storage for this plan's iteration (the ``[recover]`` keys) from the
    catalog at level ``"manifest"``, on rank 0, broadcast: every rank starts from the same
    state. Never writes."""
    label = observe_iteration(ctx.store, ctx.plan.iteration) if ctx.coordinator else None
    observed: str = ctx.collective.broadcast(label)
    return observed


# ----------------------------------------------------------------------------- effects
@effect(role=Role.EVERY_RANK)
def stage_shards(ctx: DcpSaveContext) -> None:
    """Every rank captures its payloads (its shard of the model and optimizer state; rank 0
    also the control payloads), each producer called once, before any write. No store
    operation: a failure aborts the save on every rank with nothing touched."""

    def stage() -> None:
        names = ctx.bulk_entries + (ctx.control_entries if ctx.coordinator else ())
        ctx.staged = {name: ctx.payloads[name]() for name in names}

    _every_rank(ctx, stage)


@effect(role=Role.COORDINATOR)
def prepare_iteration(ctx: DcpSaveContext) -> None:
    """Clear uncommitted leftovers of this iteration (never adopted; shards of every rank
    included), create ``iter_N/`` and its DCP directories, prepare the writer."""
    store = ctx.fenced
    prepare_unit(ctx, store, label=ctx.iter_dir)  # settled by the first .metadata write
    for name in ctx.bulk_entries:
        store.make_dirs(ctx.path(name), defer_sync=True)
    ctx.writer.prepare(ctx.plan, store)


@effect(role=Role.EVERY_RANK)
def write_shards(ctx: DcpSaveContext) -> None:
    """Every rank writes its DCP shards of each bulk entry, durable before the coordinator
    writes that entry's ``.metadata`` (:func:`~statecraft.writers.dcp.save_dcp_state`); the
    effect ends with every rank's file records on every rank (``records``)."""

    def write() -> None:
        if not ctx.staged:
            raise CheckpointError(
                f"{ctx.iter_dir}: write_shards ran before stage_shards captured the payloads"
            )
        prefix = ctx.iter_dir + "/"
        for name in ctx.bulk_entries:
            records = save_dcp_state(
                ctx.fenced,
                ctx.path(name),
                ctx.staged[name],
                collective=ctx.collective,
                files_per_rank=ctx.files_per_rank,
            )
            ctx.records.update({p[len(prefix) :]: r for p, r in records.items()})

    _every_rank(ctx, write)


@effect(role=Role.COORDINATOR)
def write_control(ctx: DcpSaveContext) -> None:
    """Write the control entries (``trainer.pt``, ``data.pt``), each durable once the
    manifest's exclusive create returns (it settles them before its link)."""
    write_durably(ctx.writer, ctx.fenced, ctx, ctx.control_entries, ctx.staged, ctx.records)


@effect(role=Role.COORDINATOR)
def commit_manifest(ctx: DcpSaveContext) -> None:
    """Publish the manifest (every file of every rank with its size and digest) by exclusive
    create: the iteration is now an immutable commit.

    Raises:
        CheckpointCorruptError: an entry of the plan has no written file (nothing published).
        StoreConflictError: another commit holds the name (it is untouched).
    """
    written = {name.split("/", 1)[0] for name in ctx.records} | set(ctx.records)
    expected = [*sorted(ctx.plan.files), *(f"{name}/.metadata" for name in ctx.bulk_entries)]
    require_written(expected, written, where=ctx.iter_dir, retry="Retry the save.")
    publish_manifest(
        ctx, ctx.fenced, ctx.plan, ctx.records, {**ctx.writer.finish(), **ctx.writer_info}
    )


@effect(role=Role.COORDINATOR)
def reconcile_committed(ctx: DcpSaveContext) -> None:
    """A retry at a committed iteration: the plan must match, every recorded file (every
    shard of every rank) must be there and verify at ``found_level``; leftover temporaries are
    removed and the iteration made durable before the pointer moves.

    Raises:
        PlanDriftError: the committed plan differs (nothing is touched).
        CheckpointCorruptError: a committed file is missing or differs (nothing is touched).
    """
    manifest = read_manifest(ctx.store, ctx.plan.iteration)
    refuse_plan_drift(ctx.store, ctx.iter_dir, ctx.plan, manifest.plan)
    verify_found_commit(ctx.store, ctx.plan.iteration, level=ctx.found_level, writer=ctx.writer)
    settle_found_unit(ctx.store, [*(ctx.path(name) for name in ctx.bulk_entries), ctx.iter_dir])
    log.info(
        "%s is already committed with this plan: only the latest pointer is completed", ctx.iter_dir
    )


def dcp_save_bindings() -> Bindings:
    """The bindings of this module's table, collected from the tags above."""
    return collect_bindings(sys.modules[__name__])
