"""Running one boundary decision: what ``Checkpointer.step_end()`` / ``finalize()`` /
``save()`` do once :func:`~statecraft.checkpoint.facade.boundary.decide_boundary` said what is due.

::

    kind                      what runs (rank 0, through on_rank_zero)
    NOTHING                   nothing
    SAVE                      save_checkpoint               (machines/write_job.toml: save,
                                                             then retention; asynchronous
                                                             with save_async)
    ARTIFACT                  save_artifact                 (machines/artifact.toml)
    DURABLE_VALIDATION        run_durable_validation        (machines/validation.toml),
                                                            then retention once published
    ARTIFACT_THEN_EVALUATE    save_artifact(evaluation=..., evaluate_first=False)
    EVALUATE_THEN_ARTIFACT    save_artifact(evaluation=..., evaluate_first=True)
    EVALUATE                  run_evaluation                (ephemeral: metrics only)

Every rank gathers its RNG streams and data state (collectives) before rank 0 runs the
machine; the outcome (a report, or the exception) reaches every rank, so a
:class:`~statecraft.errors.ValidationFailedError` is raised on every rank. The evaluation
callable runs on rank 0 only (a documented limitation of this release).

Every writing or evaluating boundary first joins the background writes
(:class:`~statecraft.checkpoint.async_writes.role_slots.BackgroundWrites`, collective): only a
full save may be asynchronous, and the next one reuses the staging buffers.

What each kind writes goes through the run's
:class:`~statecraft.checkpoint.facade.step_saver.StepSaver`; the partial-artifact store
(``<run>/checkpoint_artifacts``) is created at the first artifact save only.
"""

from __future__ import annotations

import logging

import attrs

from statecraft.checkpoint.artifacts.saving import ArtifactReport
from statecraft.checkpoint.async_writes.write_slot import PendingSave
from statecraft.checkpoint.facade.boundary import Boundary, BoundaryKind
from statecraft.checkpoint.facade.run_context import OpenAttempt, RunContext
from statecraft.checkpoint.facade.run_state import RunState
from statecraft.checkpoint.facade.step_saver import StepCapture, StepSaver, gather_capture
from statecraft.checkpoint.kernel.evaluation import Evaluation, format_metrics, run_evaluation
from statecraft.checkpoint.save.saving import SaveReport
from statecraft.checkpoint.validation.saving import ValidationReport, run_durable_validation
from statecraft.parallel.rank0 import on_rank_zero

__all__ = ["EVALUATING", "WRITING", "BoundaryOutcome", "BoundaryRunner"]

log = logging.getLogger("statecraft")

#: the kinds that write something (and therefore need the save-without-resume check)
WRITING = frozenset(
    {
        BoundaryKind.SAVE,
        BoundaryKind.ARTIFACT,
        BoundaryKind.DURABLE_VALIDATION,
        BoundaryKind.ARTIFACT_THEN_EVALUATE,
        BoundaryKind.EVALUATE_THEN_ARTIFACT,
    }
)
#: the kinds that call the evaluation
EVALUATING = frozenset(
    {
        BoundaryKind.DURABLE_VALIDATION,
        BoundaryKind.ARTIFACT_THEN_EVALUATE,
        BoundaryKind.EVALUATE_THEN_ARTIFACT,
        BoundaryKind.EVALUATE,
    }
)


@attrs.frozen
class BoundaryOutcome:
    """What one executed boundary produced (on rank 0; reports are ``None`` elsewhere).

    Attributes:
        saved: the full checkpoint's report (a regular save, or the durable validation's
            evaluation-pending save); a :class:`PendingSave` for an asynchronous save.
        artifact: the partial artifact's report.
        validation: the durable validation's report (its final stage and metrics).
        metrics: the evaluation's metrics (``None`` when no evaluation ran, and on ranks
            other than 0).
        validated: an evaluation ran and succeeded at this boundary (every rank).
        wrote: a checkpoint or artifact of the step was committed (every rank).
    """

    saved: SaveReport | PendingSave | None = None
    artifact: ArtifactReport | None = None
    validation: ValidationReport | None = None
    metrics: dict[str, float] | None = None
    validated: bool = False
    wrote: bool = False


class BoundaryRunner:
    """Runs the decided boundaries of one run (``context``: what is fixed; ``state``: the
    registered evaluation and identity, the background writes); writes through ``saver``."""

    def __init__(self, context: RunContext, state: RunState, saver: StepSaver) -> None:
        self.context = context
        self.state = state
        self.saver = saver

    def run(self, boundary: Boundary, opened: OpenAttempt, step: int) -> BoundaryOutcome:
        """Execute ``boundary`` for ``step`` in the open attempt (every rank calls it; rank 0
        writes).

        Raises:
            ValidationFailedError: the evaluation failed (every rank); what was committed
                before it (an evaluation-pending checkpoint, an artifact committed before an
                ephemeral evaluation) stays committed, and nothing after it was written.
            (and what the save / artifact / validation machines raise)
        """
        kind = boundary.kind
        if kind is BoundaryKind.NOTHING:
            return BoundaryOutcome()
        evaluation = self.state.evaluation
        collective = self.context.collective
        if kind in EVALUATING and evaluation is None:  # pragma: no cover - decide_boundary bug
            raise AssertionError(f"{kind} decided with no registered evaluation")
        if kind is BoundaryKind.EVALUATE:
            assert evaluation is not None
            metrics = on_rank_zero(collective, lambda: self.evaluate(evaluation, step))
            return BoundaryOutcome(metrics=metrics, validated=True)
        capture = gather_capture(self.context, self.state, step)
        if kind is BoundaryKind.SAVE and self.context.sharded:
            # every rank writes its own shards: no on_rank_zero around the save
            return BoundaryOutcome(saved=self.saver.sharded(opened, capture), wrote=True)
        out: list[BoundaryOutcome] = []

        def write_here() -> str | None:
            out.append(self._write(boundary, opened, capture))
            saved = out[0].saved
            return saved.location if isinstance(saved, PendingSave) else None

        # Rank 0 decides async vs sync; the decision reaches every rank with the outcome.
        went_async = on_rank_zero(collective, write_here)
        if out:
            return out[0]
        mirror = None if went_async is None else self.state.writes.mirror(step, went_async)
        return BoundaryOutcome(saved=mirror, validated=kind in EVALUATING, wrote=True)

    def evaluate(self, evaluation: Evaluation, step: int) -> dict[str, float]:
        """An ephemeral evaluation of ``step`` (rank 0): its metrics, logged."""
        metrics = run_evaluation(evaluation, step)
        log.info("validated step %d (ephemeral): %s", step, format_metrics(metrics))
        return metrics

    def _write(
        self, boundary: Boundary, opened: OpenAttempt, capture: StepCapture
    ) -> BoundaryOutcome:
        kind = boundary.kind
        if kind is BoundaryKind.SAVE:
            return BoundaryOutcome(saved=self.saver.full(opened, capture), wrote=True)
        if kind is BoundaryKind.DURABLE_VALIDATION:
            validation = self._durable_validation(opened, capture)
            return BoundaryOutcome(
                saved=validation.save,
                validation=validation,
                metrics=validation.metrics,
                validated=True,
                wrote=True,
            )
        evaluate = kind in EVALUATING
        plan = boundary.plan
        if plan is None:  # pragma: no cover - decide_boundary names the plan of an artifact
            raise AssertionError(f"{kind} decided without a component plan")
        artifact = self.saver.artifact(
            opened,
            capture,
            plan=plan,
            evaluation=self.state.evaluation if evaluate else None,
            evaluate_first=kind is BoundaryKind.EVALUATE_THEN_ARTIFACT,
        )
        return BoundaryOutcome(
            artifact=artifact, metrics=artifact.metrics, validated=evaluate, wrote=True
        )

    def _durable_validation(self, opened: OpenAttempt, capture: StepCapture) -> ValidationReport:
        """The durable validation of the captured step (rank 0;
        ``machines/validation.toml``), then retention once it is published."""
        evaluation = self.state.evaluation
        assert evaluation is not None
        validation = run_durable_validation(
            self.state.tracked,
            self.saver.target(opened, background=False),  # the pending save: no retention
            evaluation=evaluation,
            identity=self.state.identity,
            rng=capture.rng,
            data=capture.data,
            step=capture.step,
            machine=self.context.machines.load("validation"),
            publication_steps=self.saver.publication_steps(opened),
        )
        self.saver.retain(opened.store, capture.step, opened.lease)
        return validation
