"""The checks named by ``specs/write_job.toml``.

They judge with the independent oracle of :mod:`statecraft.proofs.oracle` (raw bytes, their
own manifest parsing and hashing) and with the store operations the runs performed (the
gate's log, read by :mod:`statecraft.proofs.save.write_job_io_order`). An iteration is
*exact* (:mod:`statecraft.proofs.save.write_job_exact`) when it is a complete checkpoint of the
full plan and holds no retention marker: only an exact iteration can resume exactly. Each check
raises
:class:`~statecraft.proofs.GuaranteeViolation` with what it found and calls
``ctx.exercised()`` when it asserted something in the state it was given.
"""

from __future__ import annotations

from collections.abc import Sequence

from statecraft.engine.crash import IoRecord
from statecraft.proofs.oracle import POINTER, DiskView, iteration_name
from statecraft.proofs.save.checks import before_view, world_view
from statecraft.proofs.save.write_job_exact import MARKER_PREFIX, exact, exact_problem
from statecraft.proofs.save.write_job_io_order import (
    is_retention_op,
    iteration_of,
    paths,
    retention_order_problem,
    upload_order_problem,
)
from statecraft.proofs.save.write_job_scenarios import JobRun, WriteJobRecovery, WriteJobScenario
from statecraft.proofs.scenario import CheckContext, GuaranteeViolation

__all__ = [
    "acknowledged_job_is_durable",
    "latest_names_exact_checkpoint",
    "never_zero_exact_checkpoints",
    "newest_exact_survives",
    "pending_validations_untouched",
    "recovery_reaches_decided_end",
    "resume_is_exact",
    "retention_after_durable_save",
    "retention_touches_only_after_durable",
    "upload_between_durable_save_and_retention",
]


def scenario_of(ctx: CheckContext) -> WriteJobScenario:
    return ctx.scenario


def recovery_of(ctx: CheckContext) -> WriteJobRecovery:
    """The recovery the checks judge (a violation if recovery did not complete)."""
    if not isinstance(ctx.recovery, WriteJobRecovery):
        raise GuaranteeViolation(f"recovery did not complete: {ctx.recovery!r}")
    return ctx.recovery


# ---------------------------------------------------------------------------- io order
def retention_after_durable_save(ctx: CheckContext) -> None:
    """WRITE-JOB-ORDER: no store operation of a job's retention comes before the operation
    that made its save durable (the fsync of the checkpoints directory after the rename onto
    ``latest_checkpoint.txt``), in the crashed run and in the restarted process's jobs."""
    runs: list[tuple[str, Sequence[IoRecord], JobRun | None]] = [
        ("the run", ctx.io_log, scenario_of(ctx).last_run)
    ]
    if ctx.phase == "recovered":
        recovery = recovery_of(ctx)
        runs.append(("the restarted process", recovery.io, recovery.run))
    for who, log, run in runs:
        if run is None or not run.targets:
            continue
        ctx.exercised()
        problem = retention_order_problem(log, run, who)
        if problem is not None:
            raise GuaranteeViolation(problem)


def upload_between_durable_save_and_retention(ctx: CheckContext) -> None:
    """WRITE-JOB-UPLOAD-ORDER: a job's bucket requests and receipt come after its save was
    durable and before any operation of its retention, in the crashed run and in the
    restarted process's jobs."""
    runs: list[tuple[str, Sequence[IoRecord], JobRun | None]] = [
        ("the run", ctx.io_log, scenario_of(ctx).last_run)
    ]
    if ctx.phase == "recovered":
        recovery = recovery_of(ctx)
        runs.append(("the restarted process", recovery.io, recovery.run))
    for who, log, run in runs:
        if run is None or not run.targets or not scenario_of(ctx).upload:
            continue
        ctx.exercised()
        problem = upload_order_problem(log, run, who)
        if problem is not None:
            raise GuaranteeViolation(problem)


def retention_touches_only_after_durable(ctx: CheckContext) -> None:
    """WRITE-JOB-DURABLE-FIRST: in every crash state in which a job's retention had
    performed any store operation, that job's iteration is complete, unmarked and named by
    ``latest`` (the save it follows survives whatever crash comes)."""
    run = scenario_of(ctx).last_run
    if run is None:
        return
    files = scenario_of(ctx).plan_files
    now = world_view(ctx)
    for k, target in enumerate(run.targets):
        start = run.starts[k]
        end = run.starts[k + 1] if k + 1 < len(run.starts) else None
        window = [r for r in ctx.io_log if r.index >= start and (end is None or r.index < end)]
        if not any(is_retention_op(r, target) for r in window):
            continue
        ctx.exercised()
        latest = now.pointer()
        # A later job of the run may have removed iter_N after its own save was durable.
        kept = [t for t in run.targets[k:] if exact_problem(now, t, files) is None]
        if not kept:
            raise GuaranteeViolation(
                f"retention of the job of iter {target} had started, yet after the crash "
                f"{exact_problem(now, target, files)} (and no later saved iteration is exact)"
            )
        if latest is None or latest < target:
            raise GuaranteeViolation(
                f"retention of the job of iter {target} had started, yet after the crash "
                f"latest names {latest}"
            )


# ---------------------------------------------------------------------------- states
def latest_names_exact_checkpoint(ctx: CheckContext) -> None:
    """WRITE-JOB-LATEST: ``latest_checkpoint.txt``, whenever present, names a complete
    checkpoint holding no retention marker (never a pruned, invalidated or incomplete one)."""
    now = world_view(ctx)
    latest = now.pointer()
    if latest is None:
        return
    ctx.exercised()
    problem = exact_problem(now, latest, scenario_of(ctx).plan_files)
    if problem is not None:
        raise GuaranteeViolation(f"{POINTER} names iter {latest}, but {problem}")


def newest_exact_survives(ctx: CheckContext) -> None:
    """WRITE-JOB-NEWEST: the newest checkpoint that was exact before the run is still exact
    after any crash and after recovery, unless a newer saved iteration is exact and named by
    ``latest`` (only then may retention remove it)."""
    scenario = scenario_of(ctx)
    files = scenario.plan_files
    before = exact(before_view(ctx), files)
    if not before:
        return
    ctx.exercised()
    newest = before[-1]
    now = world_view(ctx)
    if exact_problem(now, newest, files) is None:
        return
    latest = now.pointer()
    replaced = [
        t
        for t in scenario.targets
        if t > newest and exact_problem(now, t, files) is None and latest is not None
        if latest >= t
    ]
    if not replaced:
        raise GuaranteeViolation(
            f"the newest exact checkpoint before the run, iter {newest}, is no longer exact "
            f"({exact_problem(now, newest, files)}) and no newer saved iteration is exact and "
            f"named by latest (latest: {latest}; exact now: {exact(now, files)})"
        )


def never_zero_exact_checkpoints(ctx: CheckContext) -> None:
    """WRITE-JOB-NEVER-ZERO: once an exact checkpoint existed, at least one exists after any
    crash and after recovery (retention never deletes or prunes the only one)."""
    files = scenario_of(ctx).plan_files
    if not exact(before_view(ctx), files):
        return
    ctx.exercised()
    if not exact(world_view(ctx), files):
        now = world_view(ctx)
        raise GuaranteeViolation(
            "no exact checkpoint is left: "
            + "; ".join(str(exact_problem(now, i, files)) for i in now.iterations())
        )


def pending_validations_untouched(ctx: CheckContext) -> None:
    """WRITE-JOB-PENDING: every file of a pending validation checkpoint is byte-identical
    after any crash and after recovery, and no run's operation touched one of its names."""
    scenario = scenario_of(ctx)
    if not scenario.protected:
        return
    before, now = before_view(ctx), world_view(ctx)
    logs = [ctx.io_log] + ([recovery_of(ctx).io] if ctx.phase == "recovered" else [])
    for iteration in scenario.protected:
        ctx.exercised()
        prefix = iteration_name(iteration) + "/"
        was = {p: b for p, b in before.files.items() if p.startswith(prefix)}
        has = {p: b for p, b in now.files.items() if p.startswith(prefix)}
        if was != has:
            changed = sorted(set(was) ^ set(has) | {p for p in was if has.get(p) != was[p]})
            raise GuaranteeViolation(f"pending validation {iteration_name(iteration)}: {changed}")
        for log in logs:
            touching = [
                r
                for r in log
                if any(iteration_of(p) == iteration_name(iteration) for p in paths(r))
            ]
            if touching:
                r = touching[0]
                raise GuaranteeViolation(
                    f"pending validation {iteration_name(iteration)} was touched: "
                    f"#{r.index} {r.op} {r.target}"
                )


def acknowledged_job_is_durable(ctx: CheckContext) -> None:
    """WRITE-JOB-ACKNOWLEDGED: once the jobs returned, the last iteration is exact and named
    by ``latest``, whatever crash follows."""
    if not ctx.acknowledged:
        return
    ctx.exercised()
    scenario = scenario_of(ctx)
    target = scenario.targets[-1]
    now = world_view(ctx)
    problem = exact_problem(now, target, scenario.plan_files)
    if problem is not None or now.pointer() != target:
        raise GuaranteeViolation(
            f"the jobs returned, yet after the crash: {problem or f'latest names {now.pointer()}'}"
        )


# ---------------------------------------------------------------------------- recovery
def resume_is_exact(ctx: CheckContext) -> None:
    """WRITE-JOB-RESUME: after any crash, resume=auto adopts the newest exact checkpoint
    (the previous one or a saved one), never a marked, pruned or partial one, and loads
    exactly its state."""
    scenario = scenario_of(ctx)
    recovery = recovery_of(ctx)
    ctx.exercised()
    seen = recovery.first.seen
    candidates = exact(seen, scenario.plan_files)
    expected = candidates[-1] if candidates else 0
    resume = recovery.first.result
    if resume.step != expected:
        raise GuaranteeViolation(
            f"resume=auto adopted step {resume.step}; the newest exact checkpoint is "
            f"{expected} (exact: {candidates}; passed over: "
            f"{[p.name for p in resume.passed_over]})"
        )
    loaded = recovery.first.loaded
    if resume.resumed:
        weight = None if loaded is None else loaded.model["weight"].flatten().tolist()
        if weight is None or any(w != float(resume.step) for w in weight):
            raise GuaranteeViolation(f"resumed iteration {resume.step} but loaded weights {weight}")
        state = None if loaded is None else loaded.optimizer.get("state", {})
        avg = [v["exp_avg"].flatten().tolist() for v in (state or {}).values()]
        if not avg or any(x != resume.step + 0.25 for a in avg for x in a):
            raise GuaranteeViolation(
                f"resumed iteration {resume.step} but loaded optimizer exp_avg {avg}"
            )


def _layout(view: DiskView) -> dict[str, list[str]]:
    """iteration -> its file names (the decision record and the pointer aside). An empty
    directory is left out: a removal whose directory fsync failed can come back empty after
    a power loss; it is never adopted and the next pass removes it as garbage."""
    out: dict[str, list[str]] = {}
    for iteration in view.iterations():
        prefix = iteration_name(iteration) + "/"
        names = sorted(p[len(prefix) :] for p in view.files if p.startswith(prefix))
        if names:
            out[iteration_name(iteration)] = names
    return out


def recovery_reaches_decided_end(ctx: CheckContext) -> None:
    """WRITE-JOB-FINISHES: after recovery the checkpoints are laid out exactly as after the
    uncrashed run (the same iterations, each with the same files: whole, weights-only or
    gone; an empty directory aside), ``latest`` names the last saved iteration, no
    temporaries remain, and every file of an iteration committed before the run that is
    still there is byte-identical."""
    scenario = scenario_of(ctx)
    recovery_of(ctx)
    ctx.exercised()
    expected, now, before = scenario.expected(), world_view(ctx), before_view(ctx)
    want, got = _layout(expected), _layout(now)
    if want != got:
        diff = {k: (want.get(k), got.get(k)) for k in sorted(set(want) | set(got))}
        diff = {k: v for k, v in diff.items() if v[0] != v[1]}
        raise GuaranteeViolation(f"after recovery the layout differs (expected, found): {diff}")
    if now.pointer() != scenario.targets[-1]:
        raise GuaranteeViolation(f"after recovery latest names {now.pointer()}")
    leftovers = [p for p in now.files if ".tmp-" in p.rsplit("/", 1)[-1]]
    if leftovers:
        raise GuaranteeViolation(f"temporaries left after recovery: {leftovers}")
    for path, data in before.files.items():
        name = path.rsplit("/", 1)[-1]
        changed = path in now.files and now.files[path] != data
        if path.startswith("iter_") and changed and not name.startswith(MARKER_PREFIX):
            raise GuaranteeViolation(f"{path} existed before the run and changed")
