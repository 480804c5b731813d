"""The checks named by ``specs/retention.toml``.

They judge with the independent oracle of :mod:`statecraft.proofs.oracle` (raw bytes, its own
manifest parsing, hashing and safe loading), with the store operations the runs performed (the
gate's log) and with the scenario's reference: the uncrashed pass on the same starting disk
(what it decided and the disk it left). Each raises
:class:`~statecraft.proofs.GuaranteeViolation` with what it found, and calls
``ctx.exercised()`` when it actually asserted something in the state it was given.
"""

from __future__ import annotations

from collections.abc import Iterable

from statecraft.checkpoint.kernel.retention_records import (
    INVALIDATED_MARKER,
    RETENTION_DECISION,
    UPLOADED_MARKER,
    WEIGHTS_ONLY_MARKER,
    RetentionAction,
)
from statecraft.engine.crash import IoRecord
from statecraft.proofs.oracle import CHECKPOINTS_ROOT, MANIFEST, POINTER, DiskView, iteration_name
from statecraft.proofs.retention.scenarios import (
    ARTIFACTS_ROOT,
    PLAN_FILES,
    RetentionRecovery,
    RetentionScenario,
)
from statecraft.proofs.scenario import CheckContext, GuaranteeViolation
from statecraft.storage.local import is_temporary_name

__all__ = [
    "artifacts_untouched",
    "kept_files_unchanged",
    "latest_untouched_and_complete",
    "marker_before_any_removal",
    "newest_committed_survives_whole",
    "no_half_deleted_iteration_looks_complete",
    "one_exact_checkpoint_always_exists",
    "rerun_reaches_the_decided_end_state",
    "resume_adopts_the_newest_exactly",
    "un_uploaded_iterations_untouched",
]

_MARKERS = (INVALIDATED_MARKER, WEIGHTS_ONLY_MARKER)
_OPTIMIZER = "optim.pt"


def scenario_of(ctx: CheckContext) -> RetentionScenario:
    return ctx.scenario


def recovery_of(ctx: CheckContext) -> RetentionRecovery:
    if not isinstance(ctx.recovery, RetentionRecovery):
        raise GuaranteeViolation(f"recovery did not complete: {ctx.recovery!r}")
    return ctx.recovery


def world_view(ctx: CheckContext) -> DiskView:
    view: DiskView = ctx.memo("world", lambda: DiskView.of(ctx.world))
    return view


def before_view(ctx: CheckContext) -> DiskView:
    view: DiskView = ctx.memo("before", lambda: DiskView.of(ctx.before))
    return view


def _names(view: DiskView, iteration: int) -> set[str]:
    prefix = iteration_name(iteration) + "/"
    return {p[len(prefix) :] for p in view.files if p.startswith(prefix)}


def _marked(view: DiskView, iteration: int) -> bool:
    return bool(_names(view, iteration) & set(_MARKERS))


def _complete_unmarked(view: DiskView) -> list[int]:
    """Iterations that are complete exact-resume checkpoints with no retention marker."""
    return [i for i in view.verified(PLAN_FILES) if not _marked(view, i)]


def _files_of(view: DiskView, iteration: int) -> dict[str, bytes]:
    prefix = iteration_name(iteration) + "/"
    return {p: b for p, b in view.files.items() if p.startswith(prefix)}


def _newest_complete(view: DiskView) -> int | None:
    complete = _complete_unmarked(view)
    return max(complete) if complete else None


# ------------------------------------------------------------------------ crash-state checks
def newest_committed_survives_whole(ctx: CheckContext) -> None:
    """RET-NEWEST: the newest committed checkpoint before the pass is byte-identical (every
    file, nothing added) after any crash and after recovery."""
    before, now = before_view(ctx), world_view(ctx)
    newest = _newest_complete(before)
    if newest is None:
        return
    ctx.exercised()
    if _files_of(now, newest) != _files_of(before, newest):
        gone = sorted(set(_files_of(before, newest)) - set(_files_of(now, newest)))
        added = sorted(set(_files_of(now, newest)) - set(_files_of(before, newest)))
        raise GuaranteeViolation(
            f"the newest committed {iteration_name(newest)} changed: missing {gone}, added "
            f"{added}, or bytes differ"
        )


def latest_untouched_and_complete(ctx: CheckContext) -> None:
    """RET-LATEST: latest_checkpoint.txt is byte-identical and names a complete checkpoint
    that holds no retention marker."""
    before, now = before_view(ctx), world_view(ctx)
    if before.pointer_raw() is None:
        return
    ctx.exercised()
    if now.pointer_raw() != before.pointer_raw():
        raise GuaranteeViolation(
            f"{POINTER} changed from {before.pointer_raw()!r} to {now.pointer_raw()!r}"
        )
    latest = now.pointer()
    if latest is None:
        return
    problem = now.problem(latest, PLAN_FILES)
    if problem is not None or _marked(now, latest):
        why = problem or f"it holds {sorted(_names(now, latest) & set(_MARKERS))}"
        raise GuaranteeViolation(f"{POINTER} names {iteration_name(latest)}, but {why}")


def one_exact_checkpoint_always_exists(ctx: CheckContext) -> None:
    """RET-NEVER-ZERO: when a complete exact-resume checkpoint existed before the pass, one
    still exists (retention never deletes the only one)."""
    if not _complete_unmarked(before_view(ctx)):
        return
    ctx.exercised()
    if not _complete_unmarked(world_view(ctx)):
        raise GuaranteeViolation("no complete exact-resume checkpoint is left")


def no_half_deleted_iteration_looks_complete(ctx: CheckContext) -> None:
    """RET-NO-HALF: every iteration that holds a manifest and no retention marker, and was a
    complete checkpoint before the pass, is still complete (no half-deleted directory is
    adoptable)."""
    before, now = before_view(ctx), world_view(ctx)
    complete_before = set(before.verified(PLAN_FILES))
    for iteration in now.iterations():
        name = iteration_name(iteration)
        if iteration not in complete_before or f"{name}/{MANIFEST}" not in now.files:
            continue
        if _marked(now, iteration):
            continue
        ctx.exercised()
        problem = now.problem(iteration, PLAN_FILES)
        if problem is not None:
            raise GuaranteeViolation(
                f"{name} holds its manifest and no retention marker, yet {problem}"
            )


def _may_change(scenario: RetentionScenario, path: str) -> bool:
    """``path`` (relative to the root) is one the reference pass gave to retention."""
    reference = scenario.reference()
    top, _, rest = path.partition("/")
    if not rest:
        return path == RETENTION_DECISION or is_temporary_name(path)
    if top in reference.garbage or top in {iteration_name(i) for i in reference.to_delete}:
        return True
    if top in {iteration_name(i) for i in reference.to_prune}:
        return rest in (_OPTIMIZER, WEIGHTS_ONLY_MARKER) or is_temporary_name(rest)
    return False


def kept_files_unchanged(ctx: CheckContext) -> None:
    """RET-KEPT: every file the decision does not give to retention is byte-identical and no
    file appears outside what it gives (kept, pending, un-uploaded, corrupt iterations whole;
    weights-only ones but for optim.pt and their marker)."""
    scenario = scenario_of(ctx)
    before, now = before_view(ctx), world_view(ctx)
    ctx.exercised()
    for path, data in sorted(before.files.items()):
        if not _may_change(scenario, path) and now.files.get(path) != data:
            raise GuaranteeViolation(f"{path} is not retention's to change, yet it changed")
    for path in sorted(set(now.files) - set(before.files)):
        if not _may_change(scenario, path):
            raise GuaranteeViolation(f"{path} appeared, outside what retention was given")


def un_uploaded_iterations_untouched(ctx: CheckContext) -> None:
    """RET-UPLOADED: with require_uploaded, every iteration without .uploaded is
    byte-identical."""
    scenario = scenario_of(ctx)
    if not scenario.plan.require_uploaded:
        return
    before, now = before_view(ctx), world_view(ctx)
    for iteration in before.iterations():
        if UPLOADED_MARKER in _names(before, iteration):
            continue
        ctx.exercised()
        if _files_of(now, iteration) != _files_of(before, iteration):
            raise GuaranteeViolation(
                f"{iteration_name(iteration)} has no {UPLOADED_MARKER}, yet retention changed it"
            )


def artifacts_untouched(ctx: CheckContext) -> None:
    """RET-ARTIFACTS: checkpoint_artifacts/ beside the root is byte-identical."""
    ctx.exercised()
    if ctx.world.fs.tree(ARTIFACTS_ROOT) != ctx.before.fs.tree(ARTIFACTS_ROOT):
        raise GuaranteeViolation("checkpoint_artifacts/ changed")


def _marker_violations(log: Iterable[IoRecord], seen: DiskView) -> list[str]:
    """Removals inside an iteration before the marker that allows them: ``optim.pt`` needs a
    weights-only or invalidation marker, anything else an invalidation marker (durable before,
    or linked earlier in ``log``). Writer temporaries and directories that held no manifest
    before (garbage) are exempt."""
    prefix = CHECKPOINTS_ROOT + "/"
    marks: dict[str, set[str]] = {}
    for iteration in seen.iterations():
        marks[iteration_name(iteration)] = _names(seen, iteration) & set(_MARKERS)
    found = []
    for record in log:
        if record.op == "link":
            dst = record.target.partition(" -> ")[2]
            top, _, rest = dst.removeprefix(prefix).partition("/")
            if rest in _MARKERS:
                marks.setdefault(top, set()).add(rest)
            continue
        if record.op not in ("unlink", "rmdir", "rename"):
            continue
        path = record.target.partition(" -> ")[0] if record.op == "rename" else record.target
        if not path.startswith(prefix):
            continue
        top, _, rest = path.removeprefix(prefix).partition("/")
        if not top.startswith("iter_") or is_temporary_name(rest.rsplit("/", 1)[-1] or top):
            continue
        if f"{top}/{MANIFEST}" not in seen.files:
            continue  # garbage, or a tree whose deletion had already removed its manifest
        have = marks.get(top, set())
        needed = (
            {INVALIDATED_MARKER, WEIGHTS_ONLY_MARKER}
            if rest == _OPTIMIZER
            else {INVALIDATED_MARKER}
        )
        if not have & needed:
            found.append(f"#{record.index} {record.op} {path} before {' or '.join(sorted(needed))}")
    return found


def marker_before_any_removal(ctx: CheckContext) -> None:
    """RET-ORDER: no store operation removes a file of a committed iteration before the marker
    that announces it (invalidation marker before the manifest or any file; weights-only or
    invalidation marker before optim.pt), in the crashed pass and in the rerun."""
    runs = [("the pass", ctx.io_log, before_view(ctx))]
    if ctx.phase == "recovered":
        recovery = recovery_of(ctx)
        runs.append(("the rerun", recovery.rerun_io, recovery.rerun_seen))
    for who, log, seen in runs:
        if not log:
            continue
        ctx.exercised()
        bad = _marker_violations(log, seen)
        if bad:
            raise GuaranteeViolation(f"{who} removed before marking: {'; '.join(bad[:3])}")


# ------------------------------------------------------------------------ recovered checks
def resume_adopts_the_newest_exactly(ctx: CheckContext) -> None:
    """RET-RESUME: after any crash, resume=auto adopts the newest committed checkpoint of
    before the pass and loads exactly its model and optimizer state."""
    recovery = recovery_of(ctx)
    newest = _newest_complete(before_view(ctx))
    if newest is None:
        return
    ctx.exercised()
    resume = recovery.first.result
    if not resume.resumed or resume.step != newest:
        raise GuaranteeViolation(
            f"resume=auto adopted step {resume.step} (resumed={resume.resumed}), not the newest "
            f"committed {newest}; passed over: {[(p.name, p.reason) for p in resume.passed_over]}"
        )
    loaded = recovery.first.loaded
    weight = None if loaded is None else loaded.model["weight"].flatten().tolist()
    state = {} if loaded is None else loaded.optimizer.get("state", {})
    exp_avg = [v["exp_avg"].flatten().tolist() for v in state.values()]
    if weight is None or any(w != float(newest) for w in weight):
        raise GuaranteeViolation(f"resumed {newest} but loaded weights {weight}")
    if not exp_avg or any(x != newest + 0.25 for row in exp_avg for x in row):
        raise GuaranteeViolation(f"resumed {newest} but loaded optimizer exp_avg {exp_avg}")


def rerun_reaches_the_decided_end_state(ctx: CheckContext) -> None:
    """RET-RERUN: after any crash, the next pass leaves exactly the disk the uncrashed pass
    left (same files, same bytes; the decision record with the same rows for every iteration
    still there)."""
    recovery_of(ctx)
    ctx.exercised()
    expected = scenario_of(ctx).reference().end
    now = world_view(ctx)

    def comparable(view: DiskView) -> dict[str, bytes]:
        return {
            p: b
            for p, b in view.files.items()
            if p != RETENTION_DECISION and not ("/" not in p and is_temporary_name(p))
        }

    have, want = comparable(now), comparable(expected)
    if ctx.point.startswith("fault ") and "recovery, then power_loss" in ctx.choice:
        # A removal whose directory fsync failed (the injected fault) is lost for good: a
        # power loss after the recovery may bring the optimizer file back, under its durable
        # weights-only marker (never adopted); the next pass removes it again.
        pruned = {iteration_name(i) for i in scenario_of(ctx).reference().to_prune}
        for path in set(have) - set(want):
            top, _, rest = path.partition("/")
            if top in pruned and rest == _OPTIMIZER and f"{top}/{WEIGHTS_ONLY_MARKER}" in have:
                del have[path]
    if have != want:
        missing = sorted(set(want) - set(have))
        extra = sorted(set(have) - set(want))
        changed = sorted(p for p in set(have) & set(want) if have[p] != want[p])
        raise GuaranteeViolation(
            f"after the rerun the root differs from the decided end state: missing {missing}, "
            f"extra {extra}, changed {changed}"
        )
    reference_rows = {
        (r.iteration, r.action) for r in scenario_of(ctx).reference().rows
        if r.action is not RetentionAction.DELETE
    }  # fmt: skip
    rows = {
        (r.iteration, r.action)
        for r in recovery_of(ctx).rerun.decision.rows
        if r.action is not RetentionAction.DELETE
    }
    if scenario_of(ctx).plan.active and rows != reference_rows:
        raise GuaranteeViolation(
            f"the rerun decided {sorted(rows, key=str)}, the uncrashed pass "
            f"{sorted(reference_rows, key=str)}"
        )
