"""The checks named by ``specs/emergency.toml``.

They judge with the independent oracles (:mod:`statecraft.proofs.oracle` for
``checkpoints/``, :mod:`statecraft.proofs.artifacts.oracle` for ``checkpoint_artifacts/``: raw
bytes, their own manifest parsing and hashing) and read ``DONE.json`` themselves (raw JSON, no
production reader). Each check raises :class:`~statecraft.proofs.GuaranteeViolation` with what
it found and calls ``ctx.exercised()`` only when it asserted something in the state it was
given.
"""

from __future__ import annotations

import json
from typing import Any

from statecraft.checkpoint.stop.records import EmergencyKind
from statecraft.proofs.artifacts.oracle import ARTIFACTS_ROOT, ArtifactView
from statecraft.proofs.oracle import CHECKPOINTS_ROOT, iteration_name, touched_paths
from statecraft.proofs.save.checks import before_view, world_view
from statecraft.proofs.scenario import CheckContext, GuaranteeViolation
from statecraft.proofs.stop.recovery import EmergencyRecovery
from statecraft.proofs.stop.scenarios import DONE_PATH, EmergencyScenario

__all__ = [
    "coverage_not_step_number",
    "done_names_durable_save",
    "one_save_first_reason",
    "pending_stop_is_evaluation_pending",
    "requeue_never_saves_again",
    "resume_lands_on_previous_or_emergency",
]

_PUBLISHED = ".validation-publication-published.json"
_EVALUATED = ".validation-publication-evaluated.json"


def scenario_of(ctx: CheckContext) -> EmergencyScenario:
    return ctx.scenario


def recovery_of(ctx: CheckContext) -> EmergencyRecovery:
    """The recovery the checks judge (a violation if recovery did not complete)."""
    if not isinstance(ctx.recovery, EmergencyRecovery):
        raise GuaranteeViolation(f"recovery did not complete: {ctx.recovery!r}")
    return ctx.recovery


def artifacts_view(ctx: CheckContext) -> ArtifactView:
    view: ArtifactView = ctx.memo("artifacts", lambda: ArtifactView.of(ctx.world))
    return view


def done_of(ctx: CheckContext) -> dict[str, Any] | None:
    """The checked world's ``DONE.json``, parsed here (``None``: absent).

    Raises:
        GuaranteeViolation: it exists but is not a JSON object (an atomic write never
            leaves a torn record).
    """

    def parse() -> dict[str, Any] | None:
        if ctx.world.fs.stat(DONE_PATH) is None:
            return None
        raw = ctx.world.fs.read(DONE_PATH)
        try:
            data = json.loads(raw)
        except ValueError:
            raise GuaranteeViolation(f"{DONE_PATH} is torn: {raw[:60]!r}") from None
        if not isinstance(data, dict):
            raise GuaranteeViolation(f"{DONE_PATH} holds {type(data).__name__}, not a record")
        return data

    done: dict[str, Any] | None = ctx.memo("done", parse)
    return done


def _named_problem(ctx: CheckContext, named: Any, plan: tuple[str, ...]) -> str | None:
    """Why the directory ``named`` (run-dir relative) is not a complete commit of step N
    holding every component of ``plan`` (``None``: it is)."""
    s = scenario_of(ctx)
    name = iteration_name(s.target)
    if named == f"checkpoints/{name}":
        return world_view(ctx).problem(s.target, s.plan_files)
    if named == f"checkpoint_artifacts/{name}":
        view = artifacts_view(ctx)
        data = view.manifest(s.target)
        if data is None:
            return f"{named} has no readable artifact manifest"
        components = tuple(data.get("components", ()))
        missing = sorted(set(plan) - set(components))
        if missing:
            return f"{named} lacks {missing} of the plan {list(plan)} (it holds {list(components)})"
        files = [f for f in data.get("files", {})]
        return view.problem(s.target, components, files)
    return f"it names {named!r}, not checkpoints/{name} nor checkpoint_artifacts/{name}"


def done_names_durable_save(ctx: CheckContext) -> None:
    """EMERGENCY-DONE-DURABLE: whenever ``DONE.json`` exists (after any crash, any loss of
    unsynced data, and after recovery) it records the stop of step N with a reason and names
    a complete commit of step N; once the transaction returned, it exists."""
    s = scenario_of(ctx)
    done = done_of(ctx)
    if done is None:
        if ctx.acknowledged:
            ctx.exercised()
            raise GuaranteeViolation("the emergency transaction returned, yet DONE.json is gone")
        return
    ctx.exercised()
    if done.get("step") != s.target or done.get("preempted") is None:
        raise GuaranteeViolation(
            f"DONE.json records step {done.get('step')!r}, preempted {done.get('preempted')!r}; "
            f"expected step {s.target} with a stop reason"
        )
    problem = _named_problem(ctx, done.get("checkpoint"), s.plan)
    if problem is not None:
        raise GuaranteeViolation(
            f"DONE.json ({ctx.phase}, {ctx.kind} {ctx.choice}) names "
            f"{done.get('checkpoint')!r}, which is not a durable commit: {problem}"
        )


def resume_lands_on_previous_or_emergency(ctx: CheckContext) -> None:
    """EMERGENCY-RESUME: after any crash, ``resume=auto`` adopts the previous complete
    checkpoint or the emergency (or covering) one of step N and loads exactly its weights;
    an emergency artifact never moves ``latest`` and is never adopted (resume refuses to
    restart into it, the documented warm start)."""
    s = scenario_of(ctx)
    ctx.exercised()
    if s.expected is EmergencyKind.ARTIFACT:
        pointer = world_view(ctx).pointer()
        before = before_view(ctx).pointer()
        if pointer != before:
            raise GuaranteeViolation(
                f"the emergency artifact moved latest_checkpoint.txt from {before} to {pointer}"
            )
    if ctx.phase != "recovered":
        return
    first = recovery_of(ctx).first
    verified = before_view(ctx).verified(s.plan_files)
    allowed = {max(verified)} if verified else {0}
    if s.expected is not EmergencyKind.ARTIFACT:
        allowed.add(s.target)
    if first.result is None:
        # The existing rule: no restart into an attempt whose newest commit is an artifact
        # (the emergency one, or the step's validation artifact) newer than any checkpoint.
        newer = first.artifacts.committed(s.target) and s.target not in first.seen.verified(
            s.plan_files
        )
        if newer:
            return
        raise GuaranteeViolation(f"resume=auto refused: {first.refused}")
    if first.result.step not in allowed:
        raise GuaranteeViolation(
            f"resume=auto adopted step {first.result.step}; allowed: {sorted(allowed)} "
            f"(passed over: {[p.name for p in first.result.passed_over]})"
        )
    if first.result.resumed:
        loaded = first.loaded
        weight = None if loaded is None else loaded.model["weight"].flatten().tolist()
        if weight is None or any(w != float(first.result.step) for w in weight):
            raise GuaranteeViolation(
                f"resumed iteration {first.result.step} but loaded weights {weight}"
            )


def requeue_never_saves_again(ctx: CheckContext) -> None:
    """EMERGENCY-REQUEUE: a requeued process's emergency machine observes the stop's traces
    and ends without any effect: it starts no save and performs no store operation."""
    recovery = recovery_of(ctx)
    ctx.exercised()
    requeue = recovery.requeue
    if requeue.failed or requeue.final_state not in ("done", "restarted"):
        raise GuaranteeViolation(
            f"the requeued process's emergency machine ended in {requeue.final_state!r}"
        )
    if requeue.trace or recovery.requeue_writes or recovery.requeue_io:
        raise GuaranteeViolation(
            f"the requeued process ran the emergency transaction again: effects "
            f"{[e.effect for e in requeue.trace]}, saves {list(recovery.requeue_writes)}, "
            f"{len(recovery.requeue_io)} store operations"
        )


def one_save_first_reason(ctx: CheckContext) -> None:
    """EMERGENCY-ONE-SAVE: one stop starts at most one save, whatever signal arrives during
    it, and ``DONE.json`` records the first reason."""
    s = scenario_of(ctx)
    run = s.last_run
    done = done_of(ctx)
    if run is None or (not run.writes and done is None):
        return
    ctx.exercised()
    if len(run.writes) > 1:
        raise GuaranteeViolation(
            f"one stop started {len(run.writes)} saves ({run.writes}); "
            f"{run.delivered} later signals were delivered during the first"
        )
    if done is not None and done.get("preempted") != s.reason:
        raise GuaranteeViolation(
            f"DONE.json records preempted {done.get('preempted')!r}; the stop was decided for "
            f"{s.reason!r} (later signals: {run.delivered})"
        )


def coverage_not_step_number(ctx: CheckContext) -> None:
    """EMERGENCY-COVERAGE: a step that holds every component of the plan is not saved again
    (no store operation under ``checkpoints/`` or ``checkpoint_artifacts/``, committed bytes
    unchanged) and ``DONE.json`` names the covering directory with ``saved: false``; a step
    whose committed artifact lacks a component is saved (``DONE.json`` names a directory
    holding the whole plan, ``saved: true``)."""
    s = scenario_of(ctx)
    done = done_of(ctx)
    covered = s.expected is EmergencyKind.COVERED
    if covered:
        ctx.exercised()
        roots = (CHECKPOINTS_ROOT + "/", ARTIFACTS_ROOT + "/")
        touched = [r for r in ctx.io_log if any(p.startswith(roots) for p in touched_paths(r))]
        if touched:
            r = touched[0]
            raise GuaranteeViolation(
                f"the step was covered, yet the stop performed #{r.index} {r.op} {r.target}"
            )
        for root in (CHECKPOINTS_ROOT, ARTIFACTS_ROOT):
            if ctx.world.fs.tree(root) != ctx.before.fs.tree(root):
                raise GuaranteeViolation(f"the step was covered, yet {root} changed")
    if done is None:
        return
    ctx.exercised()
    saved = done.get("saved")
    if saved is covered:
        raise GuaranteeViolation(
            f"DONE.json records saved={saved!r} for a step that was "
            f"{'covered' if covered else 'not covered'} ({done.get('checkpoint')!r})"
        )
    problem = _named_problem(ctx, done.get("checkpoint"), s.plan)
    if problem is not None:
        raise GuaranteeViolation(
            f"DONE.json names a directory that does not cover the plan: {problem}"
        )


def pending_stop_is_evaluation_pending(ctx: CheckContext) -> None:
    """EMERGENCY-PENDING: a stop before a due validation writes the full checkpoint of step N
    evaluation-pending: never published by the stop, and a requeued resume that adopts it
    finishes its pending stage (evaluated, then published)."""
    s = scenario_of(ctx)
    if not s.validation_due:
        return
    now = world_view(ctx)
    name = iteration_name(s.target)
    if ctx.phase == "crashed":
        if now.problem(s.target, s.plan_files) is not None:
            return
        ctx.exercised()
        stage = now.payload(s.target, "trainer.pt").get("validation", {}).get("stage")
        if stage != "evaluation_pending":
            raise GuaranteeViolation(f"{name}/trainer.pt records validation stage {stage!r}")
        if any(f"{name}/{r}" in now.files for r in (_EVALUATED, _PUBLISHED)):
            raise GuaranteeViolation(f"the stop evaluated or published {name}")
        return
    recovery = recovery_of(ctx)
    result = recovery.first.result
    if result is None or not result.resumed or result.step != s.target:
        return
    ctx.exercised()
    if recovery.finished is None or recovery.finished.failed:
        raise GuaranteeViolation(f"resume adopted pending {name} but its stage did not finish")
    if f"{name}/{_PUBLISHED}" not in now.files:
        raise GuaranteeViolation(f"{name} was adopted pending but is not published afterwards")
