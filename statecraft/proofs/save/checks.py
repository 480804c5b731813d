"""The checks named by ``specs/save.toml``.

They judge with the independent oracle of :mod:`statecraft.proofs.oracle` (raw bytes, their
own manifest parsing, hashing and safe loading) and with the store operations the runs
performed (the gate's log: every operation that changes bytes or names). Each raises
:class:`~statecraft.proofs.GuaranteeViolation` with what it found, and calls
``ctx.exercised()`` when it actually asserted something in the state it was given.
"""

from __future__ import annotations

from collections.abc import Iterable

from statecraft.engine.crash import IoRecord
from statecraft.proofs.oracle import (
    CHECKPOINTS_ROOT,
    MANIFEST,
    POINTER,
    DiskView,
    committed_files,
    ops_on,
    touched_paths,
)
from statecraft.proofs.save.scenarios import Recovery, SaveScenario
from statecraft.proofs.scenario import CheckContext, GuaranteeViolation

__all__ = [
    "acknowledged_save_is_durable",
    "commit_only_by_exclusive_create",
    "committed_files_never_reopened",
    "committed_iterations_never_rewritten",
    "latest_names_complete_checkpoint",
    "latest_never_absent_or_older",
    "node_loss_starts_fresh",
    "resume_lands_on_previous_or_new",
    "retry_commits_the_save",
]


def recovery_of(ctx: CheckContext) -> Recovery:
    """The recovery the checks judge (a violation if recovery did not complete)."""
    if not isinstance(ctx.recovery, Recovery):
        raise GuaranteeViolation(f"recovery did not complete: {ctx.recovery!r}")
    return ctx.recovery


def scenario_of(ctx: CheckContext) -> SaveScenario:
    return ctx.scenario


def world_view(ctx: CheckContext) -> DiskView:
    """The checked world's disk (derived once per state)."""
    view: DiskView = ctx.memo("world", lambda: DiskView.of(ctx.world))
    return view


def before_view(ctx: CheckContext) -> DiskView:
    """The disk as the scenario's setup left it (derived once per state)."""
    view: DiskView = ctx.memo("before", lambda: DiskView.of(ctx.before))
    return view


def _describe(records: Iterable[IoRecord]) -> str:
    return "; ".join(f"#{r.index} {r.op} {r.target}" for r in records)


# ------------------------------------------------------------------------- save spec
def latest_names_complete_checkpoint(ctx: CheckContext) -> None:
    """SAVE-LATEST: the pointer, when present, names a complete checkpoint (unless it is the
    very pointer the damaged starting tree held, untouched)."""
    files = scenario_of(ctx).plan_files
    now, before = world_view(ctx), before_view(ctx)
    if now.pointer_raw() is None:
        return
    if now.pointer_raw() == before.pointer_raw():
        previous = before.pointer_or_none()  # None: garbage before this save began
        if previous is None or before.problem(previous, files) is not None:
            return  # the damaged starting pointer, untouched by this save
    ctx.exercised()
    latest = now.pointer()
    assert latest is not None
    problem = now.problem(latest, files)
    if problem is not None:
        raise GuaranteeViolation(f"{POINTER} names iter {latest}, but {problem}")


def latest_never_absent_or_older(ctx: CheckContext) -> None:
    """SAVE-LATEST-MONOTONIC: once the pointer exists it is never absent, and once it names a
    complete checkpoint it never names an older iteration."""
    before = before_view(ctx)
    if before.pointer_raw() is None:
        return
    ctx.exercised()
    now = world_view(ctx)
    if now.pointer_raw() is None:
        raise GuaranteeViolation(
            f"{POINTER} existed before the save ({before.pointer_raw()!r}) and is now absent"
        )
    previous = before.pointer_or_none()
    if previous is None or before.problem(previous, scenario_of(ctx).plan_files) is not None:
        return  # the starting pointer named nothing intact: only its presence is promised
    latest = now.pointer()
    if latest is None or latest < previous:
        raise GuaranteeViolation(f"{POINTER} went back from iter {previous} to iter {latest}")


def committed_iterations_never_rewritten(ctx: CheckContext) -> None:
    """SAVE-IMMUTABLE: every file of an iteration committed before the save is unchanged."""
    before, after = before_view(ctx), world_view(ctx)
    committed = sorted(committed_files(before))
    prefix = CHECKPOINTS_ROOT + "/"
    for path in committed:
        rel = path[len(prefix) :]
        if "/" not in rel:
            continue  # the directory itself
        ctx.exercised()
        if after.files.get(rel) != before.files[rel]:
            raise GuaranteeViolation(f"committed {rel} changed or vanished")


def committed_files_never_reopened(ctx: CheckContext) -> None:
    """SAVE-NO-REOPEN: no operation of the save (nor of its retry) opens, replaces, links over,
    renames or removes a file (or the directory) of an iteration that was committed when it
    started, even to write identical bytes."""
    runs = [("the save", ctx.io_log, before_view(ctx))]
    if ctx.phase == "recovered":
        recovery = recovery_of(ctx)
        runs.append(("the retry", recovery.retry_io, recovery.retry_seen))
    for who, log, view in runs:
        committed = committed_files(view)
        if not committed or not log:
            continue
        ctx.exercised()
        touched = ops_on(log, committed)
        if touched:
            raise GuaranteeViolation(f"{who} touched committed names: {_describe(touched)}")


def commit_only_by_exclusive_create(ctx: CheckContext) -> None:
    """SAVE-EXCLUSIVE: a manifest is only ever published by ``link`` of a complete temporary
    (which the filesystem refuses over an existing name); no operation renames onto a manifest
    name or opens one for writing, so an exclusive create never replaces an existing commit."""
    logs = [("the save", ctx.io_log)]
    if ctx.phase == "recovered":
        logs.append(("the retry", recovery_of(ctx).retry_io))
    for who, log in logs:
        publishing = [r for r in log if _publishes_manifest(r)]
        if not publishing:
            continue
        ctx.exercised()
        bad = [r for r in publishing if r.op != "link"]
        if bad:
            raise GuaranteeViolation(
                f"{who} published a manifest by something other than an exclusive link: "
                f"{_describe(bad)}"
            )


def _publishes_manifest(record: IoRecord) -> bool:
    """The operation puts bytes under a manifest name (link, rename or open of it)."""
    if record.op not in ("link", "rename", "open_write"):
        return False
    return touched_paths(record)[-1].endswith("/" + MANIFEST)


def resume_lands_on_previous_or_new(ctx: CheckContext) -> None:
    """SAVE-RESUME: after the crash, resume=auto adopts the previous complete checkpoint or
    the new one, and loads exactly its state."""
    scenario = scenario_of(ctx)
    recovery = recovery_of(ctx)
    ctx.exercised()
    before_verified = before_view(ctx).verified(scenario.plan_files)
    previous = max(before_verified) if before_verified else 0
    allowed = {previous, scenario.target}
    resume = recovery.resume
    if resume.step not in allowed:
        raise GuaranteeViolation(
            f"resume=auto adopted step {resume.step}; allowed: {sorted(allowed)} "
            f"(passed over: {[p.name for p in resume.passed_over]})"
        )
    loaded = recovery.first.loaded
    if resume.resumed:
        weight = None if loaded is None else loaded.model["weight"].flatten().tolist()
        if weight is None or any(w != float(resume.step) for w in weight):
            raise GuaranteeViolation(f"resumed iteration {resume.step} but loaded weights {weight}")


def acknowledged_save_is_durable(ctx: CheckContext) -> None:
    """SAVE-DURABLE: once save returned, the new iteration is committed and latest names it."""
    if not ctx.acknowledged:
        return
    ctx.exercised()
    scenario = scenario_of(ctx)
    now = world_view(ctx)
    problem = now.problem(scenario.target, scenario.plan_files)
    if problem is not None or now.pointer() != scenario.target:
        raise GuaranteeViolation(
            f"save of iter {scenario.target} returned, yet after the crash: "
            f"{problem or f'latest names {now.pointer()}'}"
        )


def retry_commits_the_save(ctx: CheckContext) -> None:
    """SAVE-RETRY: the retried save commits the iteration, latest names it, resume adopts it,
    and no writer leftovers remain."""
    scenario = scenario_of(ctx)
    recovery = recovery_of(ctx)
    ctx.exercised()
    now = world_view(ctx)
    problem = now.problem(scenario.target, scenario.plan_files)
    if problem is not None:
        raise GuaranteeViolation(f"after the retry, {problem}")
    if now.pointer() != scenario.target:
        raise GuaranteeViolation(
            f"after the retry latest names {now.pointer()}, not {scenario.target}"
        )
    if recovery.resume_after.step != scenario.target:
        raise GuaranteeViolation(f"after the retry resume=auto adopts {recovery.resume_after.step}")
    leftovers = [p for p in now.files if ".tmp-" in p.rsplit("/", 1)[-1]]
    if leftovers:
        raise GuaranteeViolation(f"writer temporaries left after the retry: {leftovers}")


def node_loss_starts_fresh(ctx: CheckContext) -> None:
    """SAVE-NODE-LOSS: with the local disk gone, resume starts fresh instead of failing."""
    recovery = recovery_of(ctx)
    ctx.exercised()
    if recovery.resume.resumed or recovery.resume.step != 0:
        raise GuaranteeViolation(f"after node loss resume adopted {recovery.resume.source}")
