"""The stop boundary of a ``Checkpointer``: what ``step_end()`` runs instead of the due boundary
once :meth:`~statecraft.checkpoint.stop.termination.TerminationWatch.should_stop` decided a stop.

::

    decision = context.termination.should_stop()    # every rank, the same decision
    end = stop_boundary(context, state, saver, decision)  # the emergency save, then DONE
    end.stop, end.reason, end.emergency.kind        # True, "sentinel", EmergencyKind.CHECKPOINT

In order (every rank calls it; rank 0 writes):

1. join the in-flight background write, never abandoned (a failed one is logged at ERROR
   naming its iteration, and the emergency save goes on: it is the newest chance to save);
2. open the attempt; ``validation_due`` is the due boundary's (``due_boundary(final=False)``);
3. the emergency transaction (``machines/emergency.toml``, :func:`run_emergency`) decides by
   the step's on-disk coverage (:func:`~statecraft.checkpoint.stop.emergency_plan.decide_emergency`)
   and calls back the ``write`` built here, which runs the decided save **synchronously**
   through the existing paths: ``CHECKPOINT`` the full save as a cadence save writes it (no
   slot, so no background write); ``EVALUATION_PENDING`` the same save with
   ``ValidationState(identity, EVALUATION_PENDING)`` like the first stage of a durable
   validation, and no evaluation (the requeued ``resume()`` evaluates, then publishes);
   ``ARTIFACT`` the partial artifact of the ``run`` plan under ``checkpoint_artifacts/``;
   then it writes ``DONE.json`` (``preempted: <reason>``);
4. the report is recorded (``state.saves`` / ``state.artifacts`` / ``last_saved_step``) and one
   INFO line logged on rank 0: ``stopping at step N: <reason>; emergency save <kind> <path>
   durable in X.XXX s``.

Retention does not run in the emergency path (the grace is for one save): the next window's
first save runs it. The facade consumes the sentinel afterwards (rank 0).
"""

from __future__ import annotations

import logging

import attrs

from statecraft.checkpoint.archive.upload_bindings import upload_checkpoint
from statecraft.checkpoint.artifacts.saving import ArtifactReport
from statecraft.checkpoint.facade.attempt_open import ensure_attempt
from statecraft.checkpoint.facade.boundary_step import before_writing, due_boundary
from statecraft.checkpoint.facade.run_context import OpenAttempt, RunContext
from statecraft.checkpoint.facade.run_state import RunState
from statecraft.checkpoint.facade.step import StepEnd
from statecraft.checkpoint.facade.step_saver import StepSaver, gather_capture
from statecraft.checkpoint.kernel.layout import ARTIFACTS_DIR, CHECKPOINTS_DIR, iter_dirname
from statecraft.checkpoint.kernel.validation_records import ValidationStage
from statecraft.checkpoint.save.saving import SaveReport
from statecraft.checkpoint.stop.bindings import EmergencyContext, run_emergency
from statecraft.checkpoint.stop.emergency_plan import EmergencyBoundary
from statecraft.checkpoint.stop.records import EmergencyKind, EmergencyReport, StopDecision
from statecraft.parallel.rank0 import on_rank_zero

__all__ = ["emergency_path", "stop_boundary"]

log = logging.getLogger("statecraft")


def emergency_path(kind: EmergencyKind, step: int) -> str:
    """The run-dir relative directory an emergency save of ``kind`` commits at ``step``:
    ``checkpoint_artifacts/iter_N`` for an artifact, ``checkpoints/iter_N`` otherwise."""
    where = ARTIFACTS_DIR if kind is EmergencyKind.ARTIFACT else CHECKPOINTS_DIR
    return f"{where}/{iter_dirname(step)}"


def stop_boundary(
    context: RunContext, state: RunState, saver: StepSaver, decision: StopDecision
) -> StepEnd:
    """Run the emergency save of the run's current step for ``decision`` (module docstring)
    and return ``StepEnd(stop=True, reason=..., saved | artifact, emergency=report)`` (the
    reports on rank 0; ``emergency`` on every rank).

    Raises:
        ResumeRequiredError: a save was needed in an attempt holding commits and this process
            did not resume into it (nothing written, no DONE).
        StoreError / UnsafeStateError / WriterLeaseError / ...: the emergency save failed
            (the original class, on every rank); the previous checkpoint is intact and no
            ``DONE.json`` was written.
    """
    if not decision.stop or decision.reason is None:  # pragma: no cover - the facade's guard
        raise AssertionError(f"stop_boundary called without a stop decision: {decision!r}")
    state.require_tracked("save")
    step = state.step
    join_logged(state, step)
    opened = ensure_attempt(context, state)
    collective = context.collective
    written: list[SaveReport | ArtifactReport] = []

    def write(boundary: EmergencyBoundary) -> str:
        # Every rank: the same checks and collectives as a cadence save, then rank 0 writes.
        before_writing(context, state, opened, "save the emergency checkpoint")
        capture = gather_capture(context, state, step, emergency=True)
        kind = boundary.kind
        stage = (
            ValidationStage.EVALUATION_PENDING
            if kind is EmergencyKind.EVALUATION_PENDING
            else ValidationStage.NONE
        )

        def here() -> None:
            if kind is EmergencyKind.ARTIFACT:
                written.append(
                    saver.artifact(
                        opened, capture, plan=boundary.plan, evaluation=None, evaluate_first=False
                    )
                )
                return
            report = saver.full(opened, capture, stage=stage, background=False)  # synchronous
            assert isinstance(report, SaveReport)  # no slot was given
            written.append(report)

        if kind is not EmergencyKind.ARTIFACT and context.sharded:
            # a DCP save is written by every rank (synchronous, no retention)
            shards = saver.sharded(opened, capture, stage=stage, background=False)
            assert isinstance(shards, SaveReport)  # background=False: synchronous
            written.append(shards)
        else:
            on_rank_zero(collective, here)
        state.mark_saved(step)
        return emergency_path(kind, step)

    ctx = EmergencyContext(
        config=context.config,
        decision=decision,
        step=step,
        validation_due=due_boundary(context, state, final=False).validation_due,
        attempt=opened.attempt,
        filesystem=context.filesystem,
        write=write,
        lease=opened.lease,
    )
    report = run_emergency(ctx, context.machines.load("emergency"), collective)
    saved = next((r for r in written if isinstance(r, SaveReport)), None)
    artifact = next((r for r in written if isinstance(r, ArtifactReport)), None)
    if saved is not None:
        state.saves.append(saved)
    if artifact is not None:
        state.artifacts.append(artifact)
    if context.rank_zero:
        log.info("%s", stop_line(report))
        if saved is not None:  # after DONE.json is durable: the stop's deadline came first
            saved = archive_after_stop(opened, saved)
            state.saves[-1] = saved
    return StepEnd(
        saved=saved, stop=True, reason=decision.reason, artifact=artifact, emergency=report
    )


def archive_after_stop(opened: OpenAttempt, saved: SaveReport) -> SaveReport:
    """Best effort (rank 0): archive the emergency checkpoint once ``DONE.json`` is durable
    (``upload.enabled``); a failure or refusal (an evaluation-pending emergency checkpoint) is
    logged at WARNING on ``statecraft.upload`` and the stop goes on. Returns ``saved`` with
    its ``upload`` / ``upload_error``."""
    destination = opened.destination
    if destination is None:
        return saved
    try:
        done = upload_checkpoint(opened.store, saved.iteration, destination, lease=opened.lease)
    except Exception as exc:  # best effort: the emergency checkpoint is durable locally
        logging.getLogger("statecraft.upload").warning(
            "the upload of emergency checkpoint %s to %s failed (the local checkpoint is kept): %s",
            iter_dirname(saved.iteration),
            destination.uri(destination.iteration_prefix(saved.iteration)),
            exc,
        )
        return attrs.evolve(saved, upload_error=exc)
    return attrs.evolve(saved, upload=done)


def stop_line(report: EmergencyReport) -> str:
    """The INFO line of a stop: ``stopping at step 120: sentinel; emergency save checkpoint
    checkpoints/iter_000000120 durable in 0.412 s`` (covered: ``... already on disk
    (<path>), nothing saved``)."""
    head = f"stopping at step {report.step}: {report.reason}; emergency save"
    if report.kind is EmergencyKind.COVERED:
        return f"{head} already on disk ({report.path}), nothing saved"
    kind = report.kind.value.replace("_", "-")
    return f"{head} {kind} {report.path} durable in {report.seconds_to_durable:.3f} s"


def join_logged(state: RunState, step: int) -> None:
    """Join the run's background writes before the emergency save (every rank). A failed
    background write is logged at ERROR naming its iteration and not raised: the previous
    checkpoint is intact, and the emergency save is the newest chance to save."""
    writes = state.writes
    iterations = sorted(
        {p.iteration for p in writes.in_flight()} | {m.iteration for m in writes.mirrors}
    )
    try:
        writes.join(state.saves)
    except Exception as exc:
        named = ", ".join(iter_dirname(i) for i in iterations) or "an earlier iteration"
        notes = "; ".join(getattr(exc, "__notes__", ()))
        log.error(
            "the background save of %s failed (%s: %s%s); its previous checkpoint is intact; "
            "going on with the emergency save of step %d",
            named,
            type(exc).__name__,
            exc,
            f"; {notes}" if notes else "",
            step,
        )
