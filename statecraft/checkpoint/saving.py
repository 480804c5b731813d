"""One full save of the tracked objects through the ``save`` machine (``machines/save.toml``),
on the rank that writes, and its :class:`SaveReport`.

The trainer state is captured first (it refuses values ``torch.load(weights_only=True)`` could
not read back, before anything is written), then the plan model's payloads are handed to the
machine's ``recover`` run, which observes the iteration on disk and writes, completes or refuses.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import attrs

from statecraft.checkpoint.layout import iter_dirname
from statecraft.checkpoint.lease import WriterLease
from statecraft.checkpoint.plan import CHECKPOINT_PLAN
from statecraft.checkpoint.state import DataState, TrainerState
from statecraft.checkpoint.transactions.save import SaveContext
from statecraft.checkpoint.validation_records import ValidationState
from statecraft.engine import RunResult
from statecraft.parallel.collectives import Collective
from statecraft.storage.base import Store

__all__ = ["SaveReport", "capture_trainer", "gather_into", "save_full_checkpoint"]

log = logging.getLogger("statecraft")


@attrs.frozen
class SaveReport:
    """One completed save: where, how big, how long, and the effects' trace."""

    iteration: int
    location: str
    bytes_written: int
    seconds: float
    retried_commit: bool
    effects: tuple[tuple[str, float], ...]


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
) -> SaveReport:
    """Capture the trainer state and run the save machine for iteration ``step``.

    Args:
        tracked: the tracked objects (``Tracked``).
        store: the attempt's checkpoints store.
        rng: every rank's RNG streams (gathered by the caller).
        data: every rank's data state, or ``None`` (no data source tracked).
        lease: this process's writer lease, checked before every publication.
        machine: the loaded ``save`` machine.
        location: the checkpoints directory, for the report and the log line.
        validation: the run's validation identity and the stage ``trainer.pt`` records
            (``EVALUATION_PENDING`` for the save of a durable validation); ``None`` records
            ``ValidationState()`` (disabled, stage ``NONE``).

    Raises:
        UnsafeStateError: a value to save could not be loaded back (nothing written).
        StoreError / PlanDriftError / CheckpointCorruptError / WriterLeaseError: the save
            failed; the previous checkpoint is intact and ``latest`` still names it.
    """
    trainer = capture_trainer(tracked, rng=rng, data=data, validation=validation)
    plan = CHECKPOINT_PLAN.save_plan(step, with_data=tracked.data is not None)
    from statecraft import __version__

    ctx = SaveContext(
        store=store,
        plan=plan,
        payloads=CHECKPOINT_PLAN.payloads(tracked, trainer, data=data),
        writer_info={"statecraft": __version__},
        lease=lease,
    )
    started = time.perf_counter()
    result: RunResult = machine.recover(ctx)
    result.raise_for_failure()
    seconds = time.perf_counter() - started
    report = SaveReport(
        iteration=plan.iteration,
        location=f"{location}/{iter_dirname(plan.iteration)}",
        bytes_written=sum(r.size for r in ctx.records.values()),
        seconds=seconds,
        retried_commit=result.observed in ("manifest_committed", "committed"),
        effects=tuple((e.effect, e.duration_s) for e in result.trace),
    )
    mib = report.bytes_written / 2**20
    log.info(
        "saved iter %d: %s MiB in %.3f s -> %s",
        report.iteration,
        f"{mib:.1f}" if mib >= 1 else f"{mib:.3f}",
        seconds,
        report.location,
    )
    return report


def capture_trainer(
    tracked: Any, *, rng: Any, data: DataState | None, validation: ValidationState | None = None
) -> TrainerState:
    """The trainer state of the tracked objects at this step, for ``trainer.pt``.

    Raises:
        UnsafeStateError: a value (here or in ``data``) would not load back with
            ``torch.load(weights_only=True)``; nothing is written.
        TrainerStateError: the accumulation window is open.
    """
    return TrainerState.capture(
        tracked.clocks,
        rng=rng,
        scheduler=tracked.scheduler,
        scheduler_identity=tracked.scheduler_identity,
        optimizer=tracked.optimizer,
        extra=tracked.loop_state,
        stateful=tracked.stateful,
        unsafe_elsewhere=() if data is None else data.problems,
        validation=validation,
    )


def gather_into(collective: Collective) -> Callable[[list[Any], Any], None]:
    """An ``all_gather_object``-shaped function over ``collective`` (for the RNG inventory)."""

    def all_gather_object(out: list[Any], value: Any) -> None:
        out[:] = collective.all_gather(value)

    return all_gather_object
