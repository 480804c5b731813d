"""One full DCP save (``checkpoint_format=dcp``, local store) on every rank, and its report.

Every rank runs the ``dcp_save`` machine (``machines/dcp_save.toml``): each captures and writes
its own shards of ``model/`` and ``optim/`` (no gather of the model or optimizer to rank 0, no
host-RAM spike there); rank 0 writes ``.metadata``, ``trainer.pt`` / ``data.pt``, the manifest
and ``latest``. Once the machine reached ``committed`` rank 0 runs the rest of the write job
(``machines/write_job.toml``: the archive upload when planned, then retention) with the
committed save as its save step; its outcome reaches every rank.

With ``save_async=true`` a cadence save is asynchronous
(:mod:`statecraft.checkpoint.save.dcp_async`): every rank stages its payloads on the training
thread, then this same machine runs on a background thread over a dedicated gloo group, and
the next save, ``wait()``, ``finalize()`` or ``close()`` joins it on every rank. The emergency
save is always synchronous.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import attrs

from statecraft._version import __version__
from statecraft.checkpoint.archive.destination import ArchiveDestination
from statecraft.checkpoint.fencing.lease import WriterLease
from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.checkpoint.kernel.loading import dcp_optimizer_payload
from statecraft.checkpoint.kernel.machines import shipped_machine
from statecraft.checkpoint.kernel.plan import DCP_PLAN, Phase
from statecraft.checkpoint.kernel.validation_records import ValidationState
from statecraft.checkpoint.retention.run import RetentionPlan
from statecraft.checkpoint.save.bindings import SaveContext
from statecraft.checkpoint.save.dcp_bindings import DcpSaveContext, dcp_save_plan
from statecraft.checkpoint.save.saving import SaveReport
from statecraft.checkpoint.save.write_job_bindings import WriteJobContext, run_write_job
from statecraft.checkpoint.state import DataState
from statecraft.checkpoint.state.capture import capture_trainer
from statecraft.engine import RunResult
from statecraft.parallel.collectives import Collective
from statecraft.parallel.coordinated import rank_zero_effects
from statecraft.parallel.rank0 import on_rank_zero
from statecraft.storage.base import Store

__all__ = ["dcp_payloads", "save_dcp_checkpoint"]

log = logging.getLogger("statecraft")


def dcp_payloads(
    tracked: Any,
    *,
    coordinator: bool,
    rng: Any,
    data: DataState | None,
    validation: ValidationState | None,
) -> dict[str, Callable[[], Any]]:
    """The producers of one rank's payloads of a DCP save: on every rank its shard of the
    model and optimizer state (:mod:`statecraft.checkpoint.state.dcp_state`: DTensor shards
    under FSDP2, the replicated tensors otherwise; a pristine optimizer saves no state, only
    its param-group options, :func:`~statecraft.checkpoint.kernel.loading.dcp_optimizer_payload`);
    on the coordinator also ``trainer.pt`` (captured when staged, after the optimizer state,
    so it records the pristine marker) and ``data.pt``.

    Raises:
        CheckpointError: a data source is tracked without its gathered ``data`` state.
    """
    from statecraft.checkpoint.state import dcp_state

    model, optimizer = tracked.model, tracked.optimizer
    out: dict[str, Callable[[], Any]] = {
        "model": lambda: dcp_state.model_state_for_save(model),
        "optim": lambda: dcp_optimizer_payload(
            dcp_state.optimizer_state_for_save(model, optimizer)
        ),
    }
    if coordinator:
        control = DCP_PLAN.payloads(
            tracked, _LazyTrainer(tracked, rng, data, validation), data=data
        )
        out.update(
            {e.name: control[e.name] for e in DCP_PLAN.in_phase(Phase.CONTROL) if e.name in control}
        )
    return out


@attrs.define
class _LazyTrainer:
    """The trainer state captured when its payload is produced (in the stage step, after the
    optimizer's shard state was taken), not when the producers are built."""

    tracked: Any
    rng: Any
    data: DataState | None
    validation: ValidationState | None

    @property
    def optimizer_step(self) -> int:
        return int(self.tracked.clocks.optimizer_step)

    def to_payload(self) -> Any:
        trainer = capture_trainer(
            self.tracked, rng=self.rng, data=self.data, validation=self.validation
        )
        return trainer.to_payload()


@attrs.define
class _CommittedSave:
    """The write job's save step for a DCP save that already ran on every rank: its
    ``recover`` returns that run (``committed``), its ``observe`` says so."""

    result: RunResult

    def recover(self, ctx: Any) -> RunResult:
        return self.result

    def observe(self, ctx: Any) -> str:
        return "committed"


def save_dcp_checkpoint(
    tracked: Any,
    store: Store,
    *,
    collective: Collective,
    rng: Any,
    data: DataState | None,
    step: int,
    lease: WriterLease | None,
    location: str,
    validation: ValidationState | None = None,
    retention: RetentionPlan | None = None,
    machines: Callable[[str], Any] | None = None,
    destination: ArchiveDestination | None = None,
    files_per_rank: int = 1,
    staged: dict[str, Any] | None = None,
    on_durable: Callable[[], None] | None = None,
    blocking_seconds: float | None = None,
) -> SaveReport:
    """Run the ``dcp_save`` machine for iteration ``step`` on every rank (every rank calls
    this, with its own ``store`` over the same directory), then, on rank 0, the upload and
    retention of the write job. Returns the same report on every rank.

    Args:
        rng: every rank's RNG streams (gathered); data: every rank's data state or ``None``.
        lease: rank 0's writer lease (``None`` on the other ranks).
        location: the checkpoints directory, for the report.
        staged: the payloads an asynchronous save staged on the training thread (entry ->
            object; this rank's entries); ``None``: produced now, from the live objects.
        on_durable: called once the machine reached ``committed`` (before the write job).
        blocking_seconds: the training thread's share of an asynchronous save, for the
            report (``None``: synchronous, the whole save blocked).

    Raises:
        UnsafeStateError / StoreError / DiskFullError / PlanDriftError /
            CheckpointCorruptError / WriterLeaseError: the save failed on some rank; on every
            rank; the previous checkpoint is intact and ``latest`` still names it.
        RetentionError: the save is committed and durable; retention could not finish.
    """
    started = time.perf_counter()
    load = machines or shipped_machine
    machine = load("dcp_save")
    plan = dcp_save_plan(step, with_data=tracked.data is not None)
    coordinator = collective.rank == 0
    ctx = DcpSaveContext(
        store=store,
        plan=plan,
        payloads=(
            dcp_payloads(
                tracked, coordinator=coordinator, rng=rng, data=data, validation=validation
            )
            if staged is None
            else {name: _const(value) for name, value in staged.items()}
        ),
        collective=collective,
        writer_info={"statecraft": __version__},
        files_per_rank=files_per_rank,
        lease=lease,
    )
    result: RunResult = machine.recover(
        ctx, call=rank_zero_effects(collective, machine.bindings.roles)
    ).raise_for_failure()
    if on_durable is not None:
        on_durable()
    saved = time.perf_counter() - started
    where = f"{location}/{iter_dirname(plan.iteration)}"

    def rest_of_job() -> tuple[Any, Any, Exception | None]:
        job = WriteJobContext(
            save=SaveContext(
                store=store,
                plan=plan,
                payloads={name: _nothing for name in plan.files},
                records=dict(ctx.records),
                lease=lease,
            ),
            retention=retention,
            save_machine=_CommittedSave(result),
            retention_machine=load("retention") if retention is not None else None,
            lease=lease,
            destination=destination,
        )
        done = run_write_job(job, load("write_job"))
        return done.retention, done.upload, done.upload_error

    retained, upload, upload_error = on_rank_zero(collective, rest_of_job)
    seconds = time.perf_counter() - started
    report = SaveReport(
        iteration=plan.iteration,
        location=where,
        bytes_written=sum(r.size for r in ctx.records.values()),
        seconds=seconds,
        retried_commit=result.observed in ("manifest_committed", "committed"),
        effects=tuple((e.effect, e.duration_s) for e in result.trace),
        blocking_seconds=seconds if blocking_seconds is None else blocking_seconds,
        retention=retained,
        asynchronous=blocking_seconds is not None,
        upload=upload,
        upload_error=upload_error,
    )
    if coordinator:
        mib = report.bytes_written / 2**20
        log.info(
            "saved iter %d (dcp%s, %d ranks): %.1f MiB in %.3f s (shards and commit %.3f s) -> %s",
            report.iteration,
            ", asynchronous" if report.asynchronous else "",
            collective.world_size,
            mib,
            seconds,
            saved,
            where,
        )
    return report


def _nothing() -> None:
    return None


def _const(value: Any) -> Callable[[], Any]:
    return lambda: value
