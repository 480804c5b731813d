"""One full save of the tracked objects through the write job (``machines/write_job.toml``:
the ``save`` machine, then retention), on the rank that writes, and its :class:`SaveReport`.

The trainer state is captured first (it refuses values ``torch.load(weights_only=True)`` could
not read back, before anything is written), then the plan model's payloads are handed to the
write job, whose save step runs the save machine's ``recover`` (it observes the iteration on
disk and writes, completes or refuses) and whose retention step runs only once the save is
durable. Synchronously, the job runs on the calling thread; asynchronously, the payloads are
first copied into reused staging buffers and the job runs on the role's background slot
(:mod:`statecraft.checkpoint.save.async_saving`).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from statecraft._version import __version__
from statecraft.checkpoint.archive.destination import ArchiveDestination
from statecraft.checkpoint.archive.upload_bindings import UploadReport
from statecraft.checkpoint.async_writes.staging import StagingBuffers
from statecraft.checkpoint.async_writes.write_slot import PendingSave, WriteSlot
from statecraft.checkpoint.fencing.lease import WriterLease
from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.checkpoint.kernel.machines import shipped_machine
from statecraft.checkpoint.kernel.manifest import SavePlan
from statecraft.checkpoint.kernel.plan import CHECKPOINT_PLAN, plan_for, saved_copies
from statecraft.checkpoint.kernel.validation_records import ValidationState
from statecraft.checkpoint.retention.run import RetentionPlan, RetentionReport
from statecraft.checkpoint.save.async_saving import stage_async
from statecraft.checkpoint.save.bindings import SaveContext
from statecraft.checkpoint.save.write_job_bindings import (
    WriteJobContext,
    found_committed,
    run_write_job,
)
from statecraft.checkpoint.state import DataState
from statecraft.checkpoint.state.capture import capture_trainer
from statecraft.engine import RunResult
from statecraft.storage.base import Store
from statecraft.writers.base import Writer
from statecraft.writers.consolidated import ConsolidatedWriter

__all__ = [
    "SaveMachines",
    "SaveReport",
    "SaveTarget",
    "run_write",
    "save_checkpoint",
    "save_full_checkpoint",
]

log = logging.getLogger("statecraft")


@attrs.frozen
class SaveReport:
    """One completed save: where, how big, how long, and the effects' trace.

    Attributes:
        iteration: the saved iteration.
        location: ``<checkpoints>/iter_<9 digits>``.
        bytes_written: the size of every file the save wrote.
        seconds: the write job's time (save machine and retention; for an asynchronous save,
            on the background slot).
        retried_commit: the iteration was found committed and only its pointer completed.
        effects: the save machine's effects and their durations, in order.
        blocking_seconds: the training thread's time in the save call (for a synchronous
            save, everything; for an asynchronous one, producing, copying and proving the
            snapshot).
        retention: what the retention pass after the save did (``None``: no pass ran).
        asynchronous: the save was written on the background slot.
        upload: what the archive upload after the save did (``None``: none planned, or it
            failed: then ``upload_error`` holds why; best effort, the save stands).
    """

    iteration: int
    location: str
    bytes_written: int
    seconds: float
    retried_commit: bool
    effects: tuple[tuple[str, float], ...]
    blocking_seconds: float = 0.0
    retention: RetentionReport | None = None
    asynchronous: bool = False
    upload: UploadReport | None = None
    upload_error: Exception | None = None


@attrs.define
class SaveMachines:
    """The loaded tables a full save runs: ``save`` inside ``write_job``, then ``retention``.

    ``of(machine)`` loads the write job and retention tables once per process.
    """

    save: Any
    write_job: Any
    retention: Any

    @classmethod
    def of(cls, save: Any, load: Callable[[str], Any] | None = None) -> SaveMachines:
        """The machines around the loaded ``save`` machine (``load``: a machine loader;
        default: the shipped tables, loaded once per process)."""
        loader = load or shipped_machine
        return cls(save=save, write_job=loader("write_job"), retention=loader("retention"))


@attrs.frozen
class SaveTarget:
    """Where one full save writes and what runs it, built once by the caller (the facade builds
    it from its open attempt) instead of handed on as loose keywords.

    Attributes:
        store: the attempt's checkpoints store.
        lease: this process's writer lease, checked before every publication.
        machines: the loaded ``save``, ``write_job`` and ``retention`` tables.
        location: the checkpoints directory, for the report and the log line.
        retention: the retention plan run after the save is durable (``None``: none).
        destination: where the durable save is archived (``None``: no upload).
        writer: makes the save's writer (one per save; ``None``: the consolidated format);
            its ``format_name`` picks the plan table the manifest records.
        collect: the collection of unreferenced blobs, run in the write job after retention
            (``checkpoint_format=incremental``; ``None``: none).
    """

    store: Store
    lease: WriterLease | None
    machines: SaveMachines
    location: str
    retention: RetentionPlan | None = None
    destination: ArchiveDestination | None = None
    writer: Callable[[], Writer] | None = None
    collect: Callable[[Store], Any] | None = None


def save_full_checkpoint(
    tracked: Any,
    store: Store,
    *,
    rng: Any,
    data: DataState | None,
    step: int,
    lease: WriterLease | None,
    machine: Any,
    location: str,
    validation: ValidationState | None = None,
    retention: RetentionPlan | None = None,
    staging: StagingBuffers | None = None,
    slot: WriteSlot | None = None,
    machines: Callable[[str], Any] | None = None,
    destination: ArchiveDestination | None = None,
) -> SaveReport | PendingSave:
    """:func:`save_checkpoint` with its :class:`SaveTarget` given as keywords (tools, proofs
    and tests): ``machine`` is the loaded ``save`` machine, ``machines`` a loader of the
    other tables (default: the shipped tables, loaded once per process).

    Raises:
        what :func:`save_checkpoint` raises.
    """
    target = SaveTarget(
        store=store,
        lease=lease,
        machines=SaveMachines.of(machine, machines),
        location=location,
        retention=retention,
        destination=destination,
    )
    return save_checkpoint(
        tracked,
        target,
        rng=rng,
        data=data,
        step=step,
        validation=validation,
        staging=staging,
        slot=slot,
    )


def save_checkpoint(
    tracked: Any,
    target: SaveTarget,
    *,
    rng: Any,
    data: DataState | None,
    step: int,
    validation: ValidationState | None = None,
    staging: StagingBuffers | None = None,
    slot: WriteSlot | None = None,
) -> SaveReport | PendingSave:
    """Capture the trainer state and run the write job (``machines/write_job.toml``: the save
    machine, then retention) for iteration ``step``.

    With ``staging`` and ``slot`` the save is asynchronous when it can be: the payloads are
    copied into the staging buffers, proven isolated, and the write job is handed to the slot
    (:mod:`statecraft.checkpoint.save.async_saving`); the call returns a
    :class:`~statecraft.checkpoint.async_writes.write_slot.PendingSave` whose ``wait()`` gives the
    :class:`SaveReport`. Otherwise (no slot, or the snapshot refused, logged at INFO) the
    write job runs here and the report is returned.

    Args:
        tracked: the tracked objects (``Tracked``).
        target: where the save writes, under which lease, through which tables.
        rng: every rank's RNG streams (gathered by the caller).
        data: every rank's data state, or ``None`` (no data source tracked).
        validation: the run's validation identity and the stage ``trainer.pt`` records
            (``EVALUATION_PENDING`` for the save of a durable validation); ``None`` records
            ``ValidationState()`` (disabled, stage ``NONE``).
        staging: the role's reused staging buffers (asynchronous saves only).
        slot: the role's background slot, already joined (asynchronous saves only).

    Raises:
        UnsafeStateError: a value to save could not be loaded back (nothing written).
        StoreError / PlanDriftError / CheckpointCorruptError / WriterLeaseError: the save
            failed; the previous checkpoint is intact and ``latest`` still names it (for an
            asynchronous save: raised by ``wait()`` / the next join).
        RetentionError: the save is committed and durable; retention could not finish.
    """
    started = time.perf_counter()
    trainer = capture_trainer(tracked, rng=rng, data=data, validation=validation)
    writer = target.writer() if target.writer is not None else ConsolidatedWriter()
    plan = plan_for(writer.format_name).save_plan(
        step, with_data=tracked.data is not None, copies=saved_copies(tracked)
    )
    producers = CHECKPOINT_PLAN.payloads(tracked, trainer, data=data)
    producers = {name: producers[name] for name in plan.files}
    where = f"{target.location}/{iter_dirname(plan.iteration)}"

    def write(payloads: Mapping[str, Callable[[], Any]], pending: PendingSave | None) -> SaveReport:
        return run_write(
            target.store,
            plan,
            payloads=payloads,
            lease=target.lease,
            machines=target.machines,
            retention=target.retention,
            location=where,
            pending=pending,
            started=started,
            destination=target.destination,
            writer=writer,
            collect=target.collect,
        )

    if staging is not None and slot is not None:
        outcome = stage_async(
            producers,
            tracked=tracked,
            step=step,
            location=where,
            staging=staging,
            slot=slot,
            job=lambda staged, pending: write(_given(staged), pending),
            started=started,
        )
        if isinstance(outcome, PendingSave):
            return outcome
        return write(_given(outcome.produced), None)
    return write(producers, None)


def _given(payloads: Mapping[str, Any]) -> dict[str, Callable[[], Any]]:
    """Producers of already-produced (or staged) payloads, for the save's ``stage`` step."""
    return {name: functools.partial(_same, value) for name, value in payloads.items()}


def _same(value: Any) -> Any:
    return value


def run_write(
    store: Store,
    plan: SavePlan,
    *,
    payloads: Mapping[str, Callable[[], Any]],
    lease: WriterLease | None,
    machines: SaveMachines,
    retention: RetentionPlan | None,
    location: str,
    pending: PendingSave | None,
    started: float,
    destination: ArchiveDestination | None = None,
    writer: Writer | None = None,
    collect: Callable[[Store], Any] | None = None,
) -> SaveReport:
    """Run the write job for ``plan`` here (the training thread, or the slot's thread for a
    ``pending`` save) and build its :class:`SaveReport`; log the ``saved iter`` line.

    Raises:
        what :func:`save_full_checkpoint` raises.
    """
    ctx = SaveContext(
        store=store,
        plan=plan,
        payloads=payloads,
        writer=writer if writer is not None else ConsolidatedWriter(),
        writer_info={"statecraft": __version__},
        lease=lease,
    )
    begun = time.perf_counter()
    job = WriteJobContext(
        save=ctx,
        retention=retention,
        save_machine=machines.save,
        retention_machine=machines.retention,
        lease=lease,
        on_durable=functools.partial(_say_saved, ctx, location, begun, pending),
        destination=destination,
        collect=collect,
    )
    done = run_write_job(job, machines.write_job)
    seconds = time.perf_counter() - begun
    result: RunResult = done.save
    blocking = seconds + begun - started if pending is None else pending.blocking_seconds
    report = SaveReport(
        iteration=plan.iteration,
        location=location,
        bytes_written=_written(ctx),
        seconds=seconds,
        retried_commit=found_committed(result),
        effects=tuple((e.effect, e.duration_s) for e in result.trace),
        blocking_seconds=blocking,
        retention=done.retention,
        asynchronous=pending is not None,
        upload=done.upload,
        upload_error=done.upload_error,
    )
    return report


def _written(ctx: SaveContext) -> int:
    """The bytes the save wrote: its files, plus the new blobs of an incremental writer."""
    blobs = getattr(ctx.writer, "blobs", None)
    return sum(r.size for r in ctx.records.values()) + (blobs.bytes_written if blobs else 0)


def _say_saved(ctx: SaveContext, location: str, begun: float, pending: PendingSave | None) -> None:
    """The write job's ``on_durable`` hook: log the ``saved iter`` line the moment ``iter_N``
    is durable (so it comes before the upload's and retention's lines), then release a
    ``pending`` save's waiters."""
    try:
        mib = _written(ctx) / 2**20
        log.info(
            "saved iter %d: %s MiB in %.3f s%s -> %s",
            ctx.plan.iteration,
            f"{mib:.1f}" if mib >= 1 else f"{mib:.3f}",
            time.perf_counter() - begun,
            ""
            if pending is None
            else f" (in the background; training blocked {pending.blocking_seconds:.3f} s)",
            location,
        )
    finally:
        if pending is not None:
            pending.durable.set()
