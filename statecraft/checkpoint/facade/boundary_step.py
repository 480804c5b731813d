"""One step boundary of a ``Checkpointer``: what is due (:func:`due_boundary`) and running it
and recording what it did (:func:`execute`, through
:class:`~statecraft.checkpoint.facade.boundary_run.BoundaryRunner`).

``Checkpointer.step_end()``, ``finalize()`` and ``save()`` are each one :func:`execute` call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from statecraft.checkpoint.facade.attempt_open import artifacts_store
from statecraft.checkpoint.facade.boundary import (
    Boundary,
    BoundaryKind,
    decide_boundary,
    regular_save_due,
    validation_due,
)
from statecraft.checkpoint.facade.boundary_run import WRITING
from statecraft.checkpoint.facade.step import StepEnd
from statecraft.checkpoint.save.saving import SaveReport
from statecraft.errors import ValidationFailedError

if TYPE_CHECKING:  # the facade imports this module
    from statecraft.checkpoint.facade.checkpointer import Checkpointer

__all__ = ["due_boundary", "execute"]


def due_boundary(ckpt: Checkpointer, *, final: bool) -> Boundary:
    """What is due at ``ckpt``'s current step (a step boundary, or ``finalize()`` with
    ``final``): the regular save and the validation, each only at a quiescent boundary after
    at least one applied update, unioned by :func:`decide_boundary`. A validation of a step
    this run already saved (the final validation of a step the cadence saved) is ephemeral:
    the committed checkpoint is not saved again."""
    clocks, step = ckpt.tracked.clocks, ckpt.step
    ready = clocks.quiescent and step > 0
    regular = ready and regular_save_due(
        ckpt.config,
        step=step,
        quiescent=clocks.quiescent,
        last_saved_step=ckpt.last_saved_step,
        final=final,
    )
    due = ready and validation_due(
        ckpt.config,
        step=step,
        registered=ckpt._boundaries.evaluation is not None,
        last_validated_step=ckpt.last_validated_step,
        final=final,
    )
    if due and not regular and step == ckpt.last_saved_step:
        # The step is committed already (a cadence save, then the final validation at
        # finalize()): committed files are never rewritten, so the evaluation is ephemeral.
        return Boundary(BoundaryKind.EVALUATE, None, regular_due=False, validation_due=True)
    return decide_boundary(ckpt.config, regular_due=regular, validation_due=due)


def execute(ckpt: Checkpointer, boundary: Boundary, step: int) -> StepEnd:
    """Run ``boundary`` for ``ckpt`` at ``step`` and record it (``ckpt.saves``,
    ``ckpt.artifacts``, ``last_saved_step``, ``last_validated_step``).

    Raises:
        ResumeRequiredError: a writing boundary in an attempt that holds committed checkpoints
            or artifacts, by a process that did not resume (nothing written).
        TrainerStateError: a writing boundary while the accumulation window is open.
        ValidationFailedError: the evaluation failed; a checkpoint or artifact committed
            before it stays committed and counts as this step's save.
    """
    direct_lease = getattr(ckpt._boundaries, "direct_lease", None)
    if direct_lease is not None:  # backend=object_store, rank 0: renew past half the ttl
        direct_lease.renew_if_due()
    if boundary.kind is BoundaryKind.NOTHING:
        return StepEnd()
    ckpt._require_tracked("save")
    # Join first: only a full save may be asynchronous, and it reuses the staging buffers.
    ckpt._boundaries.writes.join(ckpt.saves)
    store = ckpt._ensure_attempt()
    attempt = ckpt.attempt
    assert attempt is not None
    if boundary.kind in WRITING:
        existing = ckpt._boundaries.artifacts or artifacts_store(attempt, ckpt.filesystem)
        ckpt._lifecycle.before_save(ckpt.collective, attempt, store, artifacts=existing)
        ckpt.tracked.clocks.require_quiescent("save a checkpoint")
    try:
        out = ckpt._boundaries.run(
            boundary,
            tracked=ckpt.tracked,
            attempt=attempt,
            store=store,
            lease=ckpt.lease,
            step=step,
        )
    except ValidationFailedError:  # what committed before the evaluation stays committed
        if boundary.kind in (BoundaryKind.DURABLE_VALIDATION, BoundaryKind.ARTIFACT_THEN_EVALUATE):
            ckpt.last_saved_step = ckpt._lifecycle.saved = step
        raise
    if isinstance(out.saved, SaveReport):  # a pending save's report is added at its join
        ckpt.saves.append(out.saved)
    if out.artifact is not None:
        ckpt.artifacts.append(out.artifact)
    if out.wrote:
        ckpt.last_saved_step = ckpt._lifecycle.saved = step
    if out.validated:
        ckpt.last_validated_step = step
    return StepEnd(
        saved=out.saved,
        artifact=out.artifact,
        metrics=out.metrics,
        validated=out.validated,
        validation=out.validation,
    )
