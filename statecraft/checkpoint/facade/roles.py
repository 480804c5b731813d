"""What a loop that tracks several roles calls (``Checkpointer.track_role``,
``committed_loop_state``) and where its ``resume()``, ``save()``, ``finalize()`` and
``close()`` go: the multi-role capability (:mod:`statecraft.checkpoint.roles`).

::

    policy = ckpt.track_role("policy", model=actor, optimizer=actor_opt, data=sampler)
    critic = ckpt.track_role("critic", model=critic_net, optimizer=critic_opt)
    start = ckpt.resume()                     # start.step: the outer iteration; start.roles
    for it in range(start.step, iterations):
        ...; critic.record(sc.Outcome.APPLIED)
        if it >= warmup: ...; policy.record(sc.Outcome.APPLIED)
        ckpt.save(iteration=it + 1, loop_state={"critic_warmup_iterations": warmup})
    ckpt.finalize()
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from statecraft.checkpoint.facade.attempt_open import ensure_attempt
from statecraft.checkpoint.facade.roles_stop import finalize_roles, step_end_roles
from statecraft.checkpoint.facade.run_context import RunContext
from statecraft.checkpoint.facade.run_state import RunState
from statecraft.checkpoint.facade.stopping import previous_window, refuse_after_stop
from statecraft.checkpoint.fencing.fenced_store import FencedStore
from statecraft.checkpoint.resume.records import ResumeResult
from statecraft.checkpoint.retention.policies import RetentionCandidate
from statecraft.checkpoint.retention.rules import RetentionPlan
from statecraft.checkpoint.roles import (
    ROLES_DIR,
    KeepBoundaries,
    RoleRun,
    RolesResume,
    TrackedRole,
    refuse_config,
)
from statecraft.checkpoint.roles.explicit import verify_explicit_boundary
from statecraft.errors import NotSupportedYetError, TrackingError
from statecraft.storage.filesystem import OsFilesystem
from statecraft.storage.local import LocalStore

__all__ = [
    "RoleMethods",
    "RolesResumeResult",
    "boundary_policy",
    "close_roles",
    "finalize_roles",
    "join_roles",
    "refuse_mixed",
    "refuse_single_model_call",
    "resume_roles",
    "save_roles",
    "step_end_roles",
]


@attrs.frozen
class RolesResumeResult(ResumeResult):
    """A multi-role resume: ``step`` is the adopted boundary's outer iteration (0 fresh);
    ``roles`` each role's restored optimizer counter."""

    roles: dict[str, int] = attrs.field(factory=dict, hash=False)


class RoleMethods:
    """The ``Checkpointer`` methods of a multi-role loop."""

    run_context: RunContext
    run_state: RunState

    def track_role(
        self, name: str, *, model: Any, optimizer: Any, scheduler: Any = None, data: Any = None
    ) -> TrackedRole:
        """Track one role of a multi-role loop (two or more roles; the first one tracked also
        holds the data cursor and the RNG). Returns its handle: record the role's optimizer
        outcomes on it (``critic.record(sc.Outcome.APPLIED)``).

        Raises:
            TrackingError: a bad or repeated name, a non-stateful object, ``data`` on a later
                role, after ``track()`` (one loop tracks one way), after ``resume()``.
            ConfigError: the config breaks a multi-role rule (an object-store primary, a
                partial ``checkpoint_components``, ``emergency_checkpoint_components=run``).
        """
        state = self.run_state
        if state.tracked.model is not None:
            raise TrackingError(
                f"track_role({name!r}, ...) after track(): a loop tracks one model with track() "
                "or several roles with track_role(), not both; track every part as a role"
            )
        if state.roles is not None and state.roles.resumed:
            raise TrackingError(f"track_role({name!r}, ...) after resume(): track every role first")
        if self.run_context.config.checkpoint_format == "incremental":
            raise NotSupportedYetError(
                "checkpoint_format",
                "incremental",
                f"track_role({name!r}, ...): a multi-role loop saves role units in the "
                "consolidated format; set checkpoint_format=consolidated",
            )
        refuse_config(self.run_context.config, world_size=self.run_context.collective.world_size)
        if state.roles is None:
            state.roles = RoleRun()
        return state.roles.roles.add(
            name, model=model, optimizer=optimizer, scheduler=scheduler, data=data
        )

    def committed_loop_state(self) -> dict[str, Any] | None:
        """The ``loop_state`` of the boundary ``resume()`` adopted, verbatim (``{}`` when it
        recorded none; ``None`` after a fresh start).

        Raises:
            TrackingError: no roles are tracked, or ``resume()`` has not run.
        """
        roles = self.run_state.roles
        if roles is None or not roles.resumed:
            raise TrackingError(
                "committed_loop_state(): track the roles with track_role() and call resume() first"
            )
        return None if roles.adopted is None else dict(roles.adopted.loop_state)


def refuse_mixed(state: RunState) -> None:
    """``track()`` after ``track_role()``.

    Raises:
        TrackingError: naming the rule.
    """
    if state.roles is not None:
        raise TrackingError(
            "track() after track_role(): a loop tracks one model with track() or several "
            "roles with track_role(), not both; track this model as a role"
        )


def refuse_single_model_call(state: RunState, call: str) -> None:
    """``record()`` of a loop that tracks roles.

    Raises:
        TrackingError: naming the call and what a multi-role loop calls instead.
    """
    if state.roles is not None:
        raise TrackingError(
            f"{call} is the call of a loop that tracks one model; a multi-role loop records on "
            "each role's handle (critic.record(sc.Outcome.APPLIED)) and saves its boundaries "
            "with ckpt.save(iteration=..., loop_state=...) and polls the stop with "
            "ckpt.step_end(iteration=..., loop_state=...)"
        )


def resume_roles(context: RunContext, state: RunState) -> RolesResumeResult:
    """``resume()`` of a multi-role loop: open the attempt, adopt the newest committed
    boundary of its ``role_checkpoints/`` (``resume=auto``), the committed boundary an
    explicit ``resume=<.../role_checkpoints/iter_N>`` names (verified like auto's, before the
    attempt is opened), or start fresh (``off``).

    Raises:
        ResumeError / CheckpointCorruptError: the explicit path is not a committed boundary
            (:func:`~statecraft.checkpoint.roles.explicit.verify_explicit_boundary`).
        what :meth:`statecraft.checkpoint.roles.RoleRun.resume` raises.
    """
    roles = state.roles
    if roles is None:  # pragma: no cover - the facade calls this with roles only
        raise TrackingError("no roles tracked")
    mode = context.config.resume
    explicit = None
    if mode not in ("auto", "off"):  # proven before an attempt is opened: a bad path mints none
        fs = context.filesystem or OsFilesystem()
        explicit = (mode, *verify_explicit_boundary(mode, fs))
    opened = ensure_attempt(context, state)
    LocalStore(str(opened.attempt.run_dir), fs=context.filesystem).make_dirs(ROLES_DIR)
    store = LocalStore(str(opened.attempt.run_dir / ROLES_DIR), fs=context.filesystem)
    lease = opened.lease
    fenced = FencedStore(store, lambda _path: lease.check() if lease is not None else None)
    roles.keep = boundary_policy(context.retention)
    done = roles.resume(fenced, mode=mode, explicit=explicit)
    state.lifecycle.resumed = True
    previous_window(context, opened)
    if context.config.termination.enabled:  # once the resume succeeded (main thread only)
        context.termination.install()
    return RolesResumeResult(
        step=done.iteration, source=done.source, reason=done.reason,
        passed_over=done.passed_over,
        loop_state={} if done.marker is None else dict(done.marker.loop_state),
        rng="fresh" if done.source is None else "restored", data=_data_outcome(roles, done),
        roles=done.counters,
    )  # fmt: skip


def boundary_policy(plan: RetentionPlan) -> KeepBoundaries | None:
    """The run's retention over multi-role boundaries: its model policy (``keep_model_last=N``
    keeps the newest N boundaries; a ``RetentionPlan``'s model policy), ``None`` (keep every
    boundary) without one, or with ``require_uploaded`` (boundaries are not archived, so none
    is ever uploaded). The optimizer policy does not apply: a boundary is kept whole or
    deleted whole."""
    policy = plan.model
    if policy is None or plan.require_uploaded:
        return None
    return lambda iterations: policy.keep([RetentionCandidate(i) for i in iterations])


def _data_outcome(roles: RoleRun, done: RolesResume) -> str:
    if done.source is None:
        return "fresh"
    first = next(iter(roles.roles.roles.values()))
    return "untracked" if first.data is None else "restored"


def save_roles(
    context: RunContext,
    state: RunState,
    iteration: int | None,
    loop_state: Mapping[str, Any] | None,
) -> Any:
    """``save(iteration=..., loop_state=...)`` of a multi-role loop (asynchronous with
    ``save_async``: joined by the next save, ``wait()``, ``finalize()``, ``close()``).

    Raises:
        TrackingError: no roles tracked (``iteration`` / ``loop_state`` are for roles).
        what :meth:`statecraft.checkpoint.roles.RoleRun.save` raises.
    """
    refuse_after_stop(state, "save()")
    if state.roles is None:
        raise TrackingError(
            "save(iteration=..., loop_state=...) is the save of a multi-role loop; track roles "
            "with track_role(), or call save() without them"
        )
    return state.roles.save(iteration, loop_state, background=context.config.save_async)


def join_roles(state: RunState) -> None:
    """Join the boundary in flight (``wait()``; a no-op without roles).

    Raises:
        RoleWriteError / StatecraftError / OSError: the boundary in flight failed.
    """
    if state.roles is not None:
        state.roles.writers.join()


def close_roles(state: RunState) -> None:
    """Join every role's writer and stop them (``finalize()`` / ``close()``).

    Raises:
        RoleWriteError / StatecraftError / OSError: the boundary in flight failed.
    """
    if state.roles is not None:
        state.roles.writers.close()
