"""The termination of a multi-role loop: ``Checkpointer.step_end(iteration=..., loop_state=...)``
and ``finalize()`` when roles are tracked.

::

    for it in range(start.step, iterations):
        ...                                               # every role's updates
        if (it + 1) % save_every == 0:
            ckpt.save(iteration=it + 1, loop_state=state)
        if ckpt.step_end(iteration=it + 1, loop_state=state):
            break                                         # stopped: the boundary is durable
    ckpt.finalize()

At a boundary where every role is quiescent, ``step_end`` asks the termination watch (signal,
sentinel file, deadline). On a stop it runs the ``emergency`` transaction with the roles'
coverage (``role_checkpoints/iter_N`` committed: nothing to save): the emergency save is the
full boundary of ``iteration`` (every role and ``_SUCCESS``, synchronously, no retention pass:
the grace is for one save), then ``DONE.json`` (``preempted: <reason>``). A multi-role loop
always writes the full plan, so the emergency knob ``run`` and a partial
``checkpoint_components`` stay refused at ``track_role`` (:func:`~statecraft.checkpoint.roles.
refuse_config`). Afterwards ``step_end()`` / ``save()`` raise ``RunStoppedError``;
``finalize()`` only joins.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from statecraft.checkpoint.facade.attempt_open import ensure_attempt
from statecraft.checkpoint.facade.emergency_step import stop_line
from statecraft.checkpoint.facade.run_context import RunContext
from statecraft.checkpoint.facade.run_state import RunState
from statecraft.checkpoint.facade.step import StepEnd
from statecraft.checkpoint.facade.stopping import refuse_after_stop
from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.checkpoint.roles import ROLES_DIR, RoleRun, check_loop_state
from statecraft.checkpoint.stop.bindings import EmergencyContext, run_emergency
from statecraft.checkpoint.stop.emergency_plan import EmergencyBoundary, StepCoverage
from statecraft.checkpoint.stop.records import StopDecision
from statecraft.checkpoint.stop.run_done import done_record, write_done
from statecraft.errors import TrackingError
from statecraft.parallel.rank0 import on_rank_zero

__all__ = ["finalize_roles", "step_end_roles"]

log = logging.getLogger("statecraft")


def _roles(state: RunState, call: str) -> RoleRun:
    roles = state.roles
    if roles is None or not roles.resumed:
        raise TrackingError(f"{call}: track the roles with track_role() and call resume() first")
    return roles


def step_end_roles(
    context: RunContext, state: RunState, iteration: object, loop_state: Mapping[str, Any] | None
) -> StepEnd:
    """``step_end(iteration=..., loop_state=...)`` of a multi-role loop (module docstring).

    Raises:
        RunStoppedError: the run was stopped at an earlier ``step_end()``.
        TrackingError: ``iteration`` is not an int >= 0, ``loop_state`` breaks its rule, no
            ``resume()`` first.
        what the emergency save raises (the run is then not stopped; no ``DONE.json``).
    """
    refuse_after_stop(state, "step_end()")
    if iteration is None and state.roles is not None:
        raise TrackingError(
            "step_end() of a multi-role loop takes its outer iteration as an int >= 0: "
            "ckpt.step_end(iteration=..., loop_state=...) polls the stop; record on each "
            "role's handle (critic.record(sc.Outcome.APPLIED)) and save the boundaries with "
            "ckpt.save(iteration=..., loop_state=...)"
        )
    if type(iteration) is not int or iteration < 0:
        raise TrackingError(
            f"step_end(iteration={iteration!r}): a multi-role loop passes its outer iteration "
            "(the boundary an emergency save writes) as an int >= 0"
        )
    check_loop_state(loop_state)
    roles = _roles(state, "step_end()")
    quiet = all(role.clocks.quiescent for role in roles.roles.roles.values())
    if not context.config.termination.enabled or not quiet or iteration <= 0:
        return StepEnd()
    watch = context.termination
    decision = watch.should_stop(step=iteration)
    if not decision.stop:
        return StepEnd()
    end = _stop_boundary(context, state, roles, decision, iteration, loop_state)
    if context.rank_zero:
        watch.consume_sentinel()
    watch.log_late_signals()  # a second signal during the save changed nothing
    state.stopped, state.stop_end = decision, end
    return end


def _stop_boundary(
    context: RunContext,
    state: RunState,
    roles: RoleRun,
    decision: StopDecision,
    iteration: int,
    loop_state: Mapping[str, Any] | None,
) -> StepEnd:
    """The emergency transaction over the roles' boundary ``iteration``, then ``DONE.json``."""
    try:  # never abandoned; a failed one is logged and the emergency save goes on
        roles.writers.join()
    except Exception as exc:
        log.error(
            "the background boundary %s failed (%s: %s); the previous boundary is intact; "
            "going on with the emergency save of iteration %d",
            iter_dirname(roles.saved) if roles.saved is not None else "(unknown)",
            type(exc).__name__, exc, iteration,
        )  # fmt: skip
    opened = ensure_attempt(context, state)
    path = f"{ROLES_DIR}/{iter_dirname(iteration)}"

    def coverage(step: int) -> tuple[StepCoverage, str]:
        return StepCoverage(checkpoint=roles.committed(step)), path

    def write(boundary: EmergencyBoundary) -> str:
        roles.save(iteration, loop_state, background=False, retain=False)  # every role + marker
        return path

    ctx = EmergencyContext(
        config=context.config, decision=decision, step=iteration, validation_due=False,
        attempt=opened.attempt, filesystem=context.filesystem, write=write,
        lease=opened.lease, read_coverage=coverage,
    )  # fmt: skip
    report = run_emergency(ctx, context.machines.load("emergency"), context.collective)
    if context.rank_zero:
        log.info("%s", stop_line(report))
    return StepEnd(stop=True, reason=decision.reason, emergency=report)


def finalize_roles(context: RunContext, state: RunState) -> Any:
    """``finalize()`` of a multi-role loop (returns ``None``): join every role's writer;
    after a normal end write ``DONE.json`` (``preempted: null``, the last boundary when
    committed); after a stop only join. Either way restore the signal handlers (a signal that
    came after the last ``step_end()`` is sent again to the restored handler once this
    succeeded).

    Raises:
        RoleWriteError / StatecraftError / OSError: the boundary in flight failed.
    """
    roles = state.roles
    completed = False
    try:
        if roles is not None:
            roles.writers.close()
        if state.stop_end is None and state.opened is not None and roles is not None:
            _write_completed(context, state, roles)
        completed = True
    finally:
        context.termination.uninstall(redeliver=completed)
    return None  # the boundaries' contexts are not reports: nothing to return


def _write_completed(context: RunContext, state: RunState, roles: RoleRun) -> None:
    opened = state.opened
    if opened is None:  # pragma: no cover - the caller checks
        return
    adopted = roles.adopted.iteration if roles.adopted is not None else 0
    step = roles.saved if roles.saved is not None else adopted
    committed = roles.committed(step)

    def write() -> None:
        record = done_record(
            step=step,
            preempted=None,
            checkpoint=f"{ROLES_DIR}/{iter_dirname(step)}" if committed else None,
            saved=roles.saved is not None,
            seconds_to_durable=None,
        )
        write_done(opened.attempt, context.filesystem, record)

    on_rank_zero(context.collective, write)
