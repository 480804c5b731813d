"""The effect bindings of the ``save`` machine (``machines/save.toml``).

The table is the order: stage (capture every payload) -> components -> control state ->
manifest (exclusive create, the commit) -> ``latest_checkpoint.txt``, each durable before the
next. The entries come from the plan model
(:data:`~statecraft.checkpoint.kernel.plan.CHECKPOINT_PLAN`), iterated by phase; the writer follows
the :class:`~statecraft.writers.base.Writer` call order. This module says *how* each step acts
on a store; it never decides the order. See ``specs/save.toml`` for the guarantees.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from statecraft.checkpoint.fencing.fenced_store import FencedStore
from statecraft.checkpoint.fencing.lease import WriterLease
from statecraft.checkpoint.kernel.commit import (
    prepare_unit,
    require_staged,
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
from statecraft.checkpoint.kernel.plan import (
    CHECKPOINT_PLAN,
    FULL_COMPONENTS,
    Phase,
    full_save_plan,
    plan_for,
)
from statecraft.checkpoint.kernel.verify import read_manifest
from statecraft.checkpoint.save.commit_effects import (
    advance_latest,
    discard_partial,
    refuse_corrupt,
)
from statecraft.engine import Bindings
from statecraft.engine.tagging import Role, collect_bindings, effect, observer
from statecraft.errors import (
    CheckpointCorruptError,
    CheckpointError,
    DiskFullError,
)
from statecraft.storage.base import FileRecord, Store
from statecraft.writers.base import Writer, tensor_bytes
from statecraft.writers.consolidated import ConsolidatedWriter

# advance_latest, discard_partial, refuse_corrupt: defined once in commit_effects (the
# dcp_save table binds them too); collected from this module like its own.
__all__ = [
    "FULL_COMPONENTS",
    "SaveContext",
    "advance_latest",
    "discard_partial",
    "full_save_plan",
    "read_manifest",
    "refuse_corrupt",
    "save_bindings",
]

log = logging.getLogger("statecraft.save")


@attrs.define
class SaveContext:
    """One save transaction.

    Attributes:
        store: the checkpoints root (``.../<RUN_TS>/checkpoints``).
        plan: what this save writes.
        payloads: file name -> zero-argument callable producing the object to serialize;
            each is called exactly once, by the ``stage_payloads`` effect, before any write.
        writer: serializes payloads into the store (a :class:`Writer`, one per save).
        writer_info: extra ``writer`` fields for the manifest (added to ``writer.finish()``).
        staged: the captured payloads (file name -> object), filled by ``stage_payloads``.
            For a synchronous save they are references (``state_dict()`` shares the live
            tensors); an asynchronous save copies them here before training continues.
        records: size and digest of each file written, filled in as files land.
        commit_conflict: the manifest's exclusive create found another commit in place, or
            the fence refused a write (another writer owns the attempt or the iteration).
        lease: this process's writer lease (:mod:`statecraft.checkpoint.fencing.lease`), checked
            before every publication and removal; ``None`` (the crash harness's single
            writer, tools) skips only the lease check, never the no-manifest check.
        found_level: how a retry verifies an iteration it finds committed before the pointer
            moves onto it (``reconcile_committed``): ``"digest"`` (a save) or ``"size"``
            (resume's pointer roll-forward, which adopted the iteration after verifying it at
            the configured ``verify`` level).
    """

    store: Store
    plan: SavePlan
    payloads: Mapping[str, Callable[[], Any]]
    writer: Writer = attrs.field(factory=ConsolidatedWriter)
    writer_info: dict[str, str] = attrs.field(factory=dict)
    staged: dict[str, Any] = attrs.field(factory=dict)
    records: dict[str, FileRecord] = attrs.field(factory=dict)
    commit_conflict: bool = False
    lease: WriterLease | None = None
    found_level: str = "digest"

    def __attrs_post_init__(self) -> None:
        missing = sorted(set(self.plan.files) - set(self.payloads))
        if missing:
            raise CheckpointError(
                f"save plan needs payloads for {missing}; got {sorted(self.payloads)}"
            )
        table = plan_for(self.plan.format)
        unknown = sorted(set(self.plan.files) - set(table.names))
        if unknown:
            raise CheckpointError(
                f"save plan names {unknown}, which the checkpoint plan does not describe "
                f"(entries: {list(table.names)}); add them to "
                "statecraft/checkpoint/kernel/plan.py"
            )
        if not isinstance(self.writer, Writer):
            raise CheckpointError(
                f"SaveContext.writer must implement statecraft.writers.Writer, got "
                f"{type(self.writer).__name__}; subclass Writer (prepare / write / finish / read)"
            )

    @property
    def iter_dir(self) -> str:
        return iter_dirname(self.plan.iteration)

    def path(self, name: str) -> str:
        return f"{self.iter_dir}/{name}"

    @property
    def fenced(self) -> FencedStore:
        """The store every write effect acts through: each publication or removal first
        passes :func:`fence`."""
        return FencedStore(self.store, lambda path: fence(self, path))


def fence(ctx: SaveContext, path: str) -> None:
    """Refuse a publication or removal of ``path`` that would touch another writer's work
    (:func:`~statecraft.checkpoint.kernel.commit_rules.fence_save`).

    Raises:
        WriterLeaseError: the lease was taken over (or is gone).
        IterationCommittedError: the iteration holds a manifest (someone committed it).
    """
    fence_save(ctx, path)


# ----------------------------------------------------------------------------- observe
@observer()
def observe_save(ctx: SaveContext) -> str:
    """Classify durable storage for this plan's iteration (the table's ``[recover]`` keys),
    from the catalog at level ``"manifest"`` (a retry at a committed iteration then checks
    the committed files itself, in ``reconcile_committed``). An iteration retention marked
    (weights-only or invalidated) is observed ``corrupt``: it is never rewritten and never
    named by ``latest``, and ``refuse_corrupt`` says why."""
    return observe_iteration(ctx.store, ctx.plan.iteration)


# ----------------------------------------------------------------------------- effects
@effect(role=Role.COORDINATOR)
def stage_payloads(ctx: SaveContext) -> None:
    """Capture every payload of the plan (call each producer once) before any write runs.

    No store operation: a crash here leaves storage as it was. A producer's error aborts the
    save before anything is touched.
    """
    ctx.staged = {name: ctx.payloads[name]() for name in ctx.plan.files}


@effect(role=Role.COORDINATOR)
def prepare_iteration(ctx: SaveContext) -> None:
    """Clear uncommitted leftovers of this iteration (never adopted), create its directory and
    prepare the writer (step 1 of the :class:`Writer` order)."""
    store = ctx.fenced
    prepare_unit(ctx, store, label=ctx.iter_dir)
    ctx.writer.prepare(ctx.plan, store)


def _write_phase(ctx: SaveContext, phase: Phase) -> None:
    require_staged(ctx.staged, ctx.plan.files, iter_dir=ctx.iter_dir, table="save")
    names = [e.name for e in CHECKPOINT_PLAN.in_phase(phase) if e.name in ctx.plan.files]
    try:
        write_durably(ctx.writer, ctx.fenced, ctx, names, ctx.staged, ctx.records)
    except DiskFullError as full:
        raise _with_checkpoint_bytes(ctx, full) from None


def _with_checkpoint_bytes(ctx: SaveContext, full: DiskFullError) -> DiskFullError:
    """The same disk-full error, also saying what the whole checkpoint needs: the files
    already written plus at least the tensor bytes of every file not yet written."""
    written = sum(r.size for r in ctx.records.values())
    remaining = sum(
        tensor_bytes(payload) for name, payload in ctx.staged.items() if name not in ctx.records
    )
    return DiskFullError(
        full.path,
        bytes_needed=full.bytes_needed,
        bytes_free=full.bytes_free,
        checkpoint_bytes=max(written + remaining, written + full.bytes_needed),
    )


@effect(role=Role.COORDINATOR)
def write_components(ctx: SaveContext) -> None:
    """Write the plan's bulk entries (``model.pt``, ``optim.pt``), each durable."""
    _write_phase(ctx, Phase.BULK)


@effect(role=Role.COORDINATOR)
def write_control(ctx: SaveContext) -> None:
    """Write the plan's control entries (``trainer.pt``, ``data.pt``), each durable."""
    _write_phase(ctx, Phase.CONTROL)


@effect(role=Role.COORDINATOR)
def commit_manifest(ctx: SaveContext) -> None:
    """Publish the manifest by exclusive create: the iteration is now an immutable commit.
    The lease is re-read first (after the bytes are written, before the link): a save whose
    lease was taken over refuses with ``WriterLeaseError`` and publishes nothing."""
    require_written(
        sorted(ctx.plan.files), ctx.records, where=ctx.iter_dir, retry="Retry the save."
    )
    publish_manifest(
        ctx, ctx.fenced, ctx.plan, ctx.records, {**ctx.writer.finish(), **ctx.writer_info}
    )


@effect(role=Role.COORDINATOR)
def reconcile_committed(ctx: SaveContext) -> None:
    """A retry at a committed iteration: the plan must match and the files must be there and
    verify at ``found_level`` (a damaged commit is refused, ``latest`` is not moved onto it);
    leftover writer temporaries (never part of the commit) are removed, and the iteration is
    made durable (it may have been found unsynced after a process kill) before the pointer
    moves.

    Raises:
        PlanDriftError: the committed plan differs (nothing is touched).
        CheckpointCorruptError: a committed file is missing, has another size or other bytes
            than its manifest records (nothing is touched).
    """
    manifest = read_manifest(ctx.store, ctx.plan.iteration)
    refuse_plan_drift(ctx.store, ctx.iter_dir, ctx.plan, manifest.plan)
    for name, entry in manifest.files.items():
        stat = ctx.store.stat(ctx.path(name))
        if stat is None or stat.size != entry.size:
            found = "missing" if stat is None else f"{stat.size} bytes"
            raise CheckpointCorruptError(
                f"{ctx.store.describe()}/{ctx.path(name)}",
                f"committed file is {found}, manifest says {entry.size} bytes",
                "The committed checkpoint was damaged; move it aside and resume from an older one.",
            )
    # Sizes can match while bytes do not (a damaged commit): the pointer never moves onto
    # an iteration this process did not write unless it verifies (at level digest for a save).
    verify_found_commit(ctx.store, ctx.plan.iteration, level=ctx.found_level, writer=ctx.writer)
    settle_found_unit(ctx.store, [ctx.iter_dir])
    log.info(
        "%s is already committed with this plan: only the latest pointer is completed", ctx.iter_dir
    )


def save_bindings() -> Bindings:
    """The bindings of this module's table, collected from the tags above."""
    return collect_bindings(sys.modules[__name__])
