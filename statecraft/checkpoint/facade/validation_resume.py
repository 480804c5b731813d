"""What ``Checkpointer.resume()`` does around the resume machine for model validation: the
run's validation identity (checked against ``trainer.pt``), finishing the pending stage of an
adopted checkpoint (``finish_pending_validation``: the evaluation only if it had not
succeeded, then publication), and the fresh-start ``validation.before_training`` pass
(checkpoint-free).
"""

from __future__ import annotations

import logging

import attrs

from statecraft.checkpoint.config import CheckpointConfig
from statecraft.checkpoint.facade.boundary import BoundaryKind, before_training_due, decide_boundary
from statecraft.checkpoint.facade.boundary_run import BoundaryRunner
from statecraft.checkpoint.facade.run_context import RunContext
from statecraft.checkpoint.facade.run_state import RunState
from statecraft.checkpoint.kernel.evaluation import Evaluation, Evaluator
from statecraft.checkpoint.kernel.validation_records import ValidationIdentity, ValidationStage
from statecraft.checkpoint.resume.bindings import ResumeResult
from statecraft.checkpoint.validation.saving import ValidationReport, finish_pending_validation
from statecraft.errors import TrackingError, ValidationIdentityError
from statecraft.parallel.rank0 import on_rank_zero
from statecraft.storage.base import Store

__all__ = ["after_resume", "identity_hint", "register_evaluation", "validation_identity"]

log = logging.getLogger("statecraft")

PENDING = (ValidationStage.EVALUATION_PENDING, ValidationStage.PUBLICATION_PENDING)


def validation_identity(
    config: CheckpointConfig, evaluation: Evaluation | None
) -> ValidationIdentity:
    """The run's validation identity (recorded in every ``trainer.pt``, checked on resume):
    enabled when an evaluation is registered and ``validation.every > 0``; disabled
    (``ValidationIdentity()``) otherwise."""
    knobs = config.validation
    if evaluation is None or knobs.every <= 0:
        return ValidationIdentity()
    return ValidationIdentity(
        enabled=True,
        source=evaluation.source,
        config=ValidationIdentity.config_digest(
            {
                "every": knobs.every,
                "save_checkpoint": knobs.save_checkpoint,
                "checkpoint_components": list(knobs.checkpoint_components),
                "before_training": knobs.before_training,
            }
        ),
    )


def register_evaluation(
    config: CheckpointConfig, state: RunState, evaluate: Evaluator, *, source: str | None
) -> None:
    """The body of :meth:`Checkpointer.validate_with`, which documents it.

    Raises:
        TrackingError: called after ``resume()`` or a save, or a bad ``evaluate`` / ``source``.
    """
    lifecycle = state.lifecycle
    if lifecycle.resumed or lifecycle.saved is not None:
        raise TrackingError(
            "validate_with() after resume() or a save: the validation identity was "
            "already checked against the checkpoint; call ckpt.validate_with(evaluate) "
            "before ckpt.resume()"
        )
    evaluation = Evaluation.of(evaluate, source=source)
    state.evaluation = evaluation
    state.identity = validation_identity(config, evaluation)


def identity_hint(evaluation: Evaluation | None, error: ValidationIdentityError) -> None:
    """Raise ``error`` with the fix ``ckpt.validate_with`` when this process registered no
    ``evaluation`` (the likely cause of a changed identity); return otherwise."""
    if evaluation is not None:
        return
    raise ValidationIdentityError(
        f"{error}\nThis process registered no evaluation: when the run validates, call "
        "ckpt.validate_with(evaluate, source=...) before ckpt.resume()",
        source=getattr(error, "source", None),
        problems=getattr(error, "problems", None),
    ) from error


def after_resume(
    context: RunContext,
    state: RunState,
    runner: BoundaryRunner,
    result: ResumeResult,
    store: Store | None,
) -> tuple[ResumeResult, int | None]:
    """What ``resume()`` finishes after the load (every rank calls it; rank 0 runs):
    a pending validation of the adopted checkpoint is finished (``store``: the adopted
    attempt's checkpoints; ``None`` for an explicit source, which is never written, so its
    pending stage stays as it is, with a warning); a fresh start runs the
    ``validation.before_training`` pass.

    Returns:
        the result (``metrics`` set to the finished evaluation's or the before-training
        pass's) and the step validated at resume (``None``: none).

    Raises:
        TrackingError: the checkpoint is pending and no evaluation is registered.
        ValidationFailedError: the evaluation failed (the checkpoint stays pending).
    """
    stage = getattr(result, "validation_stage", ValidationStage.NONE)
    if result.resumed and stage in PENDING:
        return _finish(context, state, runner, result, stage, store)
    if result.resumed:
        return result, result.step if stage is ValidationStage.PUBLISHED else None
    evaluation = state.evaluation
    config = context.config
    # The facade does not know the loop's step count: a fresh start, before the loop, is
    # taken to have steps left (a loop with none does not call resume() to train).
    if evaluation is None or not before_training_due(
        config, registered=True, fresh=True, remaining_steps=1
    ):
        return result, None
    boundary = decide_boundary(config, regular_due=False, validation_due=True, before_training=True)
    if boundary.kind is not BoundaryKind.EVALUATE:  # pragma: no cover - decide_boundary's rule
        raise AssertionError(f"before-training pass decided as {boundary.kind}")
    metrics = on_rank_zero(context.collective, lambda: runner.evaluate(evaluation, result.step))
    return attrs.evolve(result, metrics=metrics), None


def _finish(
    context: RunContext,
    state: RunState,
    runner: BoundaryRunner,
    result: ResumeResult,
    stage: ValidationStage,
    store: Store | None,
) -> tuple[ResumeResult, int | None]:
    evaluation = state.evaluation
    if evaluation is None:
        raise TrackingError(
            f"resumed {result.source}, whose validation is {stage.value.replace('_', '-')}"
            ", but this process registered no evaluation to finish it with; call "
            "ckpt.validate_with(evaluate, source=...) before ckpt.resume() (nothing on "
            "disk was changed)"
        )
    if store is None:
        log.warning(
            "resumed the explicit source %s, whose validation is %s: it is not finished "
            "here (statecraft does not write into an explicit resume source)",
            result.source,
            stage.value,
        )
        return result, None

    opened = state.opened
    lease = None if opened is None else opened.lease
    saver = runner.saver

    def finish() -> ValidationReport:
        report = finish_pending_validation(
            store,
            result.step,
            evaluation=evaluation,
            identity=state.identity,
            lease=lease,
            machine=context.machines.load("validation"),
            location=store.describe(),
            publication_steps=saver.publication_steps(opened),
        )
        saver.retain(store, result.step, lease)  # retention after the publication
        return report

    report = on_rank_zero(context.collective, finish)
    return attrs.evolve(result, metrics=report.metrics), result.step
