"""The facade's termination rules around the loop (``Checkpointer.step_end()`` / ``save()`` /
``finalize()`` / ``resume()``), kept apart so the facade stays a thin list of calls.

- :func:`poll_stop`: at a quiescent boundary after at least one applied update, ask the
  watch (one collective); on a stop run the emergency save
  (:func:`~statecraft.checkpoint.facade.emergency_step.stop_boundary`), then rank 0 consumes the
  sentinel, and the facade is stopped: every later ``step_end()`` / ``save()`` raises
  :class:`~statecraft.errors.RunStoppedError` (:func:`refuse_after_stop`). A boundary inside an
  open accumulation window, or before the first update, has nothing exact to save: the watch
  is asked at the next one (a signal or the sentinel stays observed until then).
- :func:`finalize_run`: a normal ``finalize()`` runs the final boundary, joins, and writes
  ``DONE.json`` (``preempted: null``, :func:`write_completed`); after a stop it only joins.
  Either way it restores the signal handlers: after ``finalize()`` no boundary polls them,
  and a flag-only handler left in place would swallow a later SIGTERM. A signal that came
  after the last boundary (during ``finalize()``: never acted on) is sent again to the
  restored handler once ``finalize()`` succeeded, so it is not swallowed either.
- :func:`previous_window`: ``resume()`` reads the previous window's ``DONE.json``, logs it,
  and tells the watch that older sentinels are stale.
"""

from __future__ import annotations

import logging

from statecraft.checkpoint.artifacts.saving import ArtifactReport
from statecraft.checkpoint.async_writes.write_slot import PendingSave
from statecraft.checkpoint.facade.boundary_run import BoundaryRunner
from statecraft.checkpoint.facade.boundary_step import due_boundary, execute
from statecraft.checkpoint.facade.emergency_step import stop_boundary
from statecraft.checkpoint.facade.run_context import OpenAttempt, RunContext
from statecraft.checkpoint.facade.run_state import RunState
from statecraft.checkpoint.facade.step import StepEnd
from statecraft.checkpoint.kernel.layout import RunAttempt
from statecraft.checkpoint.save.saving import SaveReport
from statecraft.checkpoint.stop.bindings import covering_path, read_step_coverage
from statecraft.checkpoint.stop.records import DoneRecord
from statecraft.checkpoint.stop.run_done import done_record, read_done, write_done
from statecraft.errors import CheckpointCorruptError, RunStoppedError
from statecraft.parallel.rank0 import on_rank_zero

__all__ = [
    "finalize_run",
    "poll_stop",
    "previous_window",
    "refuse_after_stop",
    "write_completed",
]

log = logging.getLogger("statecraft")


def poll_stop(context: RunContext, state: RunState, runner: BoundaryRunner) -> StepEnd | None:
    """The stop boundary's outcome when the watch decides a stop here, else ``None`` (the due
    boundary runs as usual). Every rank calls it at the same boundary.

    Raises:
        what :func:`~statecraft.checkpoint.facade.emergency_step.stop_boundary` raises (the run is
        then not stopped: nothing of DONE was written).
    """
    clocks = state.tracked.clocks
    if not context.config.termination.enabled or not clocks.quiescent or state.step <= 0:
        return None
    watch = context.termination
    decision = watch.should_stop(step=state.step)
    if not decision.stop:
        return None
    end = stop_boundary(context, state, runner.saver, decision)
    if context.rank_zero:
        watch.consume_sentinel()
    watch.log_late_signals()  # a second signal during the save changed nothing
    state.stopped = decision
    state.stop_end = end
    return end


def refuse_after_stop(state: RunState, action: str) -> None:
    """Raise when the run was stopped (nothing is written).

    Raises:
        RunStoppedError: ``action`` (``step_end()`` / ``save()``) after the stop, naming its
            step and reason.
    """
    decision, end = state.stopped, state.stop_end
    if decision is None or end is None:
        return
    step = end.emergency.step if end.emergency is not None else state.step
    raise RunStoppedError(
        f"{action} after the run was stopped at step {step} ({decision.reason}): the "
        "emergency save and DONE.json are written; break out of the loop and call finalize()",
        step=step,
        reason=decision.reason,
    )


def finalize_run(
    context: RunContext, state: RunState, runner: BoundaryRunner
) -> SaveReport | PendingSave | ArtifactReport | None:
    """The body of ``Checkpointer.finalize()`` (which documents it)."""
    stopped = state.stop_end
    completed = False
    try:
        final = stopped or execute(
            context, state, runner, due_boundary(context, state, final=True), state.step
        )
        state.final = final
        state.writes.join(state.saves)
        if stopped is None:
            write_completed(context, state, final)
        completed = True
    finally:
        # no boundary polls any more: SIGTERM is SIGTERM again; one that came after the last
        # boundary (never acted on) goes on to the restored handler once DONE.json is durable
        context.termination.uninstall(redeliver=completed)
    return final.saved or final.artifact


def _on_disk(context: RunContext, attempt: RunAttempt, step: int) -> str | None:
    """The run-dir relative path of ``step``'s committed checkpoint or artifact (rank 0)."""
    coverage = read_step_coverage(attempt, context.filesystem, step)
    if not coverage.checkpoint and coverage.artifact is None:
        return None
    return covering_path(coverage, step)


def write_completed(context: RunContext, state: RunState, final: StepEnd) -> None:
    """``DONE.json`` of a normally completed window (rank 0 writes, after the final save is
    durable): ``preempted: null``, the final step's checkpoint when it is on disk. Nothing
    when no attempt was ever opened (nothing saved, no resume).

    Raises:
        StoreError: the record could not be written (every rank).
    """
    if state.opened is None:
        return
    attempt = state.opened.attempt
    step = state.step

    def write() -> None:
        record = done_record(
            step=step,
            preempted=None,
            checkpoint=_on_disk(context, attempt, step),
            saved=final.saved is not None or final.artifact is not None,
            seconds_to_durable=None,
        )
        write_done(attempt, context.filesystem, record)

    on_rank_zero(context.collective, write)


def previous_window(context: RunContext, opened: OpenAttempt | None) -> DoneRecord | None:
    """What ``resume()`` learns of the previous window of an adopted attempt (every rank;
    rank 0 reads ``DONE.json``): one INFO line (``previous window ended at step 120:
    preempted: sentinel`` / ``...: completed``), and sentinels older than its end are stale
    for the watch. ``DONE.json`` never changes what resume adopts: a damaged one is a
    WARNING and ignored.
    """
    if opened is None or opened.attempt.minted:
        return None
    attempt = opened.attempt

    def read() -> DoneRecord | str | None:
        try:
            return read_done(attempt, context.filesystem)
        except CheckpointCorruptError as exc:
            return str(exc)

    found = on_rank_zero(context.collective, read)
    if isinstance(found, str):
        if context.rank_zero:
            log.warning("ignoring the previous window's end record: %s", found)
        return None
    if found is None:
        return None
    if context.rank_zero:
        how = f"preempted: {found.preempted}" if found.preempted else "completed"
        log.info("previous window ended at step %d: %s", found.step, how)
    context.termination.ignore_sentinels_before(found.finished_at)
    return found
