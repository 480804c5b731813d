"""A durable model validation through the ``validation`` machine (``machines/validation.toml``),
on the rank that writes, and its :class:`ValidationReport`.

Two entry points, one table:

- :func:`run_durable_validation`, at a step where a full-plan validation save is due: save a
  complete ``iter_N`` whose ``trainer.pt`` records stage ``EVALUATION_PENDING`` (the ``save``
  machine, through :func:`~statecraft.checkpoint.save.saving.save_checkpoint`), evaluate,
  record the evaluation, publish;
- :func:`finish_pending_validation`, after ``resume=auto`` adopted a checkpoint whose stage is
  not ``NONE``: retry exactly the pending stage (evaluate only if no valid evaluated record is
  durable; a published one is only made durable).

The evaluation runs on this rank only (rank 0 under ``torch.distributed``: a documented
limitation).

Example::

    target = SaveTarget(store, lease, SaveMachines.of(load_machine("save")), where)
    report = run_durable_validation(tracked, target, evaluation=Evaluation.of(evaluate),
                                    identity=identity, rng=rng, data=None, step=100,
                                    machine=load_machine("validation"))
    report.stage       # ValidationStage.PUBLISHED
    report.metrics     # {'val_loss': 0.41}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from statecraft.checkpoint.fencing.lease import WriterLease
from statecraft.checkpoint.kernel.evaluation import Evaluation
from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.checkpoint.kernel.validation_records import (
    ValidationIdentity,
    ValidationStage,
    ValidationState,
)
from statecraft.checkpoint.save.saving import SaveReport, SaveTarget, save_checkpoint
from statecraft.checkpoint.state import DataState
from statecraft.checkpoint.validation.bindings import PublicationStep, ValidationContext
from statecraft.errors import TrackingError
from statecraft.storage.base import Store

__all__ = ["ValidationReport", "finish_pending_validation", "run_durable_validation"]


@attrs.frozen
class ValidationReport:
    """One completed durable validation.

    Attributes:
        iteration: the validated checkpoint.
        stage: ``PUBLISHED`` (a failure raises instead).
        metrics: what the evaluation returned (or, when this run continued after the
            evaluation, what the durable evaluated record holds).
        evaluated: the evaluation was called in this run.
        save: the save's report (``None`` when this run did not save: a resumed run, or a
            checkpoint already committed evaluation-pending).
        location: ``<checkpoints>/iter_<9 digits>``.
        effects: the validation machine's effects and their durations, in order.
    """

    iteration: int
    stage: ValidationStage
    metrics: dict[str, float] | None
    evaluated: bool
    save: SaveReport | None
    location: str
    effects: tuple[tuple[str, float], ...]


def _check_inputs(evaluation: Any, identity: Any, step: Any) -> None:
    if not isinstance(evaluation, Evaluation):
        raise TrackingError(
            f"a durable validation needs an Evaluation (Evaluation.of(evaluate)); got "
            f"{type(evaluation).__name__}"
        )
    if not isinstance(identity, ValidationIdentity) or not identity.enabled:
        raise TrackingError(
            f"a durable validation needs this run's enabled ValidationIdentity; got {identity!r}"
        )
    if type(step) is not int or step < 0:
        raise TrackingError(f"the validated step must be an int >= 0; got {step!r}")


def _run(machine: Any, ctx: ValidationContext, location: str) -> ValidationReport:
    result = machine.recover(ctx)
    result.raise_for_failure()
    report = ctx.save_report if isinstance(ctx.save_report, SaveReport) else None
    return ValidationReport(
        iteration=ctx.iteration,
        stage=ValidationStage(result.final_state),
        metrics=None if ctx.metrics is None else dict(ctx.metrics),
        evaluated=ctx.evaluated,
        save=report,
        location=f"{location}/{iter_dirname(ctx.iteration)}",
        effects=tuple((e.effect, e.duration_s) for e in result.trace),
    )


def run_durable_validation(
    tracked: Any,
    target: SaveTarget,
    *,
    evaluation: Evaluation,
    identity: ValidationIdentity,
    rng: Any,
    data: DataState | None,
    step: int,
    machine: Any,
    publication_steps: Sequence[PublicationStep] = (),
) -> ValidationReport:
    """Save ``iter_<step>`` evaluation-pending, evaluate it, record and publish it.

    The save captures the trainer state with ``validation=ValidationState(identity,
    EVALUATION_PENDING)`` and runs ``save_machine`` (its ``recover``: a committed pending
    checkpoint whose pointer lags only has its pointer completed) before the evaluation
    reads any held-out data. Each later stage is an exclusive create beside the manifest.

    Args:
        tracked: the tracked objects (``Tracked``).
        target: the attempt's checkpoints store, this process's writer lease (checked before
            every publication), the save tables and the checkpoints directory (for the
            report); its retention and destination are not used (the pending save runs
            neither: ``publication_steps`` do).
        evaluation: the loop's registered evaluation (called with ``step``).
        identity: this run's validation identity (enabled).
        rng: every rank's RNG streams (gathered by the caller).
        data: every rank's data state, or ``None``.
        machine: the loaded ``validation`` machine.
        publication_steps: the shared publication's steps (retention, upload), run before
            the published record.

    Returns:
        the report (stage ``PUBLISHED``).

    Raises:
        TrackingError: bad arguments (nothing written).
        UnsafeStateError / StoreError / WriterLeaseError / ...: the save failed; the
            previous checkpoint is intact.
        ValidationFailedError: the evaluation failed; ``iter_<step>`` stays committed and
            evaluation-pending (a resumed run evaluates it again).
        IterationCommittedError: ``iter_<step>`` is already committed by a regular save
            (stage none): it is never rewritten.
        ValidationIdentityError: ``iter_<step>`` was saved under another validation identity.
        CheckpointCorruptError: ``iter_<step>`` or one of its records is damaged (untouched).
    """
    _check_inputs(evaluation, identity, step)
    pending = ValidationState(identity, ValidationStage.EVALUATION_PENDING)
    bare = attrs.evolve(target, retention=None, destination=None)

    def save() -> Any:  # a SaveReport: no slot is given, so the save is synchronous
        return save_checkpoint(tracked, bare, rng=rng, data=data, step=step, validation=pending)

    ctx = ValidationContext(
        store=target.store,
        iteration=step,
        evaluation=evaluation,
        identity=identity,
        lease=target.lease,
        save=save,
        publication_steps=tuple(publication_steps),
    )
    return _run(machine, ctx, target.location)


def finish_pending_validation(
    store: Store,
    iteration: int,
    *,
    evaluation: Evaluation,
    identity: ValidationIdentity,
    lease: WriterLease | None,
    machine: Any,
    location: str,
    publication_steps: Sequence[PublicationStep] = (),
) -> ValidationReport:
    """Continue the validation of committed ``iter_<iteration>`` (the checkpoint a resumed run
    adopted) at exactly its pending stage: evaluation-pending evaluates, records and
    publishes; publication-pending publishes without evaluating (a completed evaluation is
    never re-run: its metrics come from the record); published is only made durable.

    Raises:
        TrackingError: bad arguments.
        CheckpointError: ``iter_<iteration>`` is not committed (there is nothing to save with).
        ValidationFailedError: the evaluation failed again; the checkpoint stays
            evaluation-pending.
        IterationCommittedError / ValidationIdentityError / CheckpointCorruptError: as for
            :func:`run_durable_validation` (nothing is touched).
    """
    _check_inputs(evaluation, identity, iteration)
    ctx = ValidationContext(
        store=store,
        iteration=iteration,
        evaluation=evaluation,
        identity=identity,
        lease=lease,
        publication_steps=tuple(publication_steps),
    )
    return _run(machine, ctx, location)
