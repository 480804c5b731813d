"""One step boundary of a ``Checkpointer``: what is due (:func:`due_boundary`) and running it
and recording what it did (:func:`execute`, through
:class:`~statecraft.checkpoint.facade.boundary_run.BoundaryRunner`).

``Checkpointer.step_end()``, ``finalize()`` and ``save()`` are each one :func:`execute` call.
"""

from __future__ import annotations

from statecraft.checkpoint.facade.attempt_open import artifacts_store, ensure_attempt
from statecraft.checkpoint.facade.boundary import (
    Boundary,
    BoundaryKind,
    decide_boundary,
    regular_save_due,
    validation_due,
)
from statecraft.checkpoint.facade.boundary_run import WRITING, BoundaryRunner
from statecraft.checkpoint.facade.run_context import OpenAttempt, RunContext
from statecraft.checkpoint.facade.run_state import RunState
from statecraft.checkpoint.facade.step import StepEnd
from statecraft.checkpoint.save.saving import SaveReport
from statecraft.checkpoint.triggers import TriggerFacts
from statecraft.errors import TrackingError, ValidationFailedError

__all__ = ["before_writing", "check_epoch", "due_boundary", "execute"]


def check_epoch(epoch: object) -> None:
    """Refuse a ``step_end(epoch=...)`` that is not ``None`` or an int >= 1.

    Raises:
        TrackingError: naming the value and the fix.
    """
    if epoch is None or (type(epoch) is int and epoch >= 1):
        return
    raise TrackingError(
        f"step_end(epoch={epoch!r}): epoch is the number of epochs completed (an int >= 1, "
        "the same on every rank), passed at the step that completes an epoch; pass nothing "
        "at the other steps"
    )


def _triggered(context: RunContext, state: RunState, epoch: int | None) -> bool:
    """The run's save triggers, asked on rank 0 and broadcast (no collective without any)."""
    facts = TriggerFacts(step=state.step, epoch=epoch, since=state.last_saved_at)
    return context.triggers.decide(facts, context.collective)


def due_boundary(
    context: RunContext,
    state: RunState,
    *,
    final: bool,
    triggers: bool = False,
    epoch: int | None = None,
) -> Boundary:
    """What is due at the run's current step (a step boundary, or ``finalize()`` with
    ``final``): the regular save and the validation, each only at a quiescent boundary after
    at least one applied update, unioned by :func:`decide_boundary`. A validation of a step
    this run already saved (the final validation of a step the cadence saved) is ephemeral:
    the committed checkpoint is not saved again. With ``triggers`` (``step_end``, not
    ``final``; never the emergency path) a save trigger may make the regular save due too
    (:mod:`statecraft.checkpoint.triggers`: asked only where a save could happen and
    ``save_every`` does not already make one; ``epoch`` is ``step_end``'s)."""
    clocks, step = state.tracked.clocks, state.step
    ready = clocks.quiescent and step > 0
    regular = ready and regular_save_due(
        context.config,
        step=step,
        quiescent=clocks.quiescent,
        last_saved_step=state.last_saved_step,
        final=final,
    )
    if triggers and ready and not regular and not final and step != state.last_saved_step:
        regular = _triggered(context, state, epoch)
    due = ready and validation_due(
        context.config,
        step=step,
        registered=state.evaluation is not None,
        last_validated_step=state.last_validated_step,
        final=final,
    )
    if due and not regular and step == state.last_saved_step:
        # The step is committed already (a cadence save, then the final validation at
        # finalize()): committed files are never rewritten, so the evaluation is ephemeral.
        return Boundary(BoundaryKind.EVALUATE, None, regular_due=False, validation_due=True)
    return decide_boundary(context.config, regular_due=regular, validation_due=due)


def before_writing(context: RunContext, state: RunState, opened: OpenAttempt, what: str) -> None:
    """The checks every rank runs before a boundary writes (``what``: for the error): no save
    without a resume into an attempt holding commits, and a closed accumulation window.

    Raises:
        ResumeRequiredError: the attempt holds committed checkpoints or artifacts and this
            process did not resume into it (nothing written).
        TrainerStateError: the accumulation window is open.
    """
    existing = state.artifacts_store or artifacts_store(opened.attempt, context.filesystem)
    state.lifecycle.before_save(
        context.collective, opened.attempt, opened.store, artifacts=existing
    )
    state.tracked.clocks.require_quiescent(what)


def execute(
    context: RunContext, state: RunState, runner: BoundaryRunner, boundary: Boundary, step: int
) -> StepEnd:
    """Run ``boundary`` at ``step`` and record it (``state.saves``, ``state.artifacts``,
    ``last_saved_step``, ``last_validated_step``).

    Raises:
        ResumeRequiredError: a writing boundary in an attempt that holds committed checkpoints
            or artifacts, by a process that did not resume (nothing written).
        TrainerStateError: a writing boundary while the accumulation window is open.
        ValidationFailedError: the evaluation failed; a checkpoint or artifact committed
            before it stays committed and counts as this step's save.
    """
    if state.direct_lease is not None:  # backend=object_store, rank 0: renew past half the ttl
        state.direct_lease.renew_if_due()
    if boundary.kind is BoundaryKind.NOTHING:
        return StepEnd()
    state.require_tracked("save")
    # Join first: only a full save may be asynchronous, and it reuses the staging buffers.
    state.writes.join(state.saves)
    opened = ensure_attempt(context, state)
    if boundary.kind in WRITING:
        before_writing(context, state, opened, "save a checkpoint")
    try:
        out = runner.run(boundary, opened, step)
    except ValidationFailedError:  # what committed before the evaluation stays committed
        if boundary.kind in (BoundaryKind.DURABLE_VALIDATION, BoundaryKind.ARTIFACT_THEN_EVALUATE):
            state.mark_saved(step)
        raise
    if isinstance(out.saved, SaveReport):  # a pending save's report is added at its join
        state.saves.append(out.saved)
    if out.artifact is not None:
        state.artifacts.append(out.artifact)
    if out.wrote:
        state.mark_saved(step)
    if out.validated:
        state.last_validated_step = step
    return StepEnd(
        saved=out.saved,
        artifact=out.artifact,
        metrics=out.metrics,
        validated=out.validated,
        validation=out.validation,
    )
