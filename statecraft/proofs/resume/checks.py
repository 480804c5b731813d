"""The checks named by ``specs/resume.toml``.

Each judges both resumes of the restarted process (before and after the retry of the save)
against the disk exactly as that resume found it (:attr:`ResumeObservation.seen`, a copy
taken before it ran), with no exemption for the iteration being saved. They use the
independent oracle of :mod:`statecraft.proofs.oracle`, and call ``ctx.exercised()`` when they
actually asserted something.

On the direct object-store scenarios (:mod:`statecraft.proofs.resume.direct_scenarios`) each
check judges the same promise over the bucket (:mod:`statecraft.proofs.resume.direct_checks`);
RESUME-NEWEST and RESUME-REASONS are about choosing among a local attempt's iterations, and a
direct root's choice is RESUME-DIRECT-LATEST's.
"""

from __future__ import annotations

from typing import Any

from statecraft.proofs.damaged_trees import HOSTILE_MARKER
from statecraft.proofs.oracle import first_difference, iteration_name
from statecraft.proofs.resume import direct_checks
from statecraft.proofs.resume.direct_scenarios import DirectResumeRecovery
from statecraft.proofs.save.checks import recovery_of, scenario_of
from statecraft.proofs.save.scenarios import ResumeObservation
from statecraft.proofs.scenario import CheckContext, GuaranteeViolation

__all__ = [
    "adopted_checkpoint_verifies",
    "direct_resume_follows_latest",
    "hostile_pickle_never_runs",
    "newer_candidates_have_reasons",
    "no_newer_checkpoint_verifies",
    "resume_writes_nothing",
    "resumed_state_is_exact",
]


def _direct(ctx: CheckContext) -> DirectResumeRecovery | None:
    """The recovery of a direct object-store scenario, else ``None``."""
    return ctx.recovery if isinstance(ctx.recovery, DirectResumeRecovery) else None


def _resumes(ctx: CheckContext) -> list[tuple[str, ResumeObservation]]:
    recovery = recovery_of(ctx)
    return [("resume", recovery.first), ("resume after the retry", recovery.after)]


def adopted_checkpoint_verifies(ctx: CheckContext) -> None:
    """RESUME-VERIFIED: the adopted checkpoint passed the independent oracle on the disk as
    resume found it."""
    direct = _direct(ctx)
    if direct is not None:
        direct_checks.direct_adopted_checkpoint_verifies(ctx, direct)
        return
    files = scenario_of(ctx).plan_files
    for who, obs in _resumes(ctx):
        if not obs.result.resumed:
            continue
        ctx.exercised()
        problem = obs.seen.problem(obs.result.step, files)
        if problem is not None:
            raise GuaranteeViolation(f"{who} adopted iter {obs.result.step} but {problem}")


def no_newer_checkpoint_verifies(ctx: CheckContext) -> None:
    """RESUME-NEWEST: no iteration newer than the adopted one verified when resume ran (a
    local attempt; a direct root follows latest: RESUME-DIRECT-LATEST)."""
    if _direct(ctx) is not None:
        return
    files = scenario_of(ctx).plan_files
    for who, obs in _resumes(ctx):
        if not obs.seen.iterations():
            continue
        ctx.exercised()
        newer = [i for i in obs.seen.verified(files) if i > obs.result.step]
        if newer:
            raise GuaranteeViolation(
                f"{who} adopted step {obs.result.step} though {newer} verified when it ran"
            )


def newer_candidates_have_reasons(ctx: CheckContext) -> None:
    """RESUME-REASONS: resume passed over exactly the iterations newer than the adopted one,
    each with a reason (a local attempt; on a direct root: RESUME-DIRECT-LATEST)."""
    if _direct(ctx) is not None:
        return
    for who, obs in _resumes(ctx):
        newer = {iteration_name(i) for i in obs.seen.iterations() if i > obs.result.step}
        passed = {p.name: p.reason for p in obs.result.passed_over}
        if not newer and not passed:
            continue
        ctx.exercised()
        if set(passed) != newer:
            raise GuaranteeViolation(
                f"{who} adopted step {obs.result.step} and passed over {sorted(passed)}, but "
                f"the newer iterations were {sorted(newer)}"
            )
        blank = [name for name, reason in passed.items() if not reason.strip()]
        if blank:
            raise GuaranteeViolation(f"{who} passed over {blank} without a reason")


def resumed_state_is_exact(ctx: CheckContext) -> None:
    """RESUME-EXACT: every tracked object holds exactly the adopted checkpoint's state: model,
    optimizer (AdamW moments and steps), scheduler, data source, RNG streams and clocks,
    compared with the adopted files' raw bytes as resume found them."""
    direct = _direct(ctx)
    if direct is not None:
        direct_checks.direct_resumed_state_is_exact(ctx, direct)
        return
    with_data = scenario_of(ctx).with_data
    for who, obs in _resumes(ctx):
        if not obs.result.resumed:
            continue
        if obs.loaded is None:
            raise GuaranteeViolation(f"{who} resumed but nothing was loaded")
        ctx.exercised()
        step, seen, loaded = obs.result.step, obs.seen, obs.loaded
        trainer = seen.payload(step, "trainer.pt")
        expected: list[tuple[str, Any, Any]] = [
            ("model", loaded.model, seen.payload(step, "model.pt")),
            ("optimizer", loaded.optimizer, seen.payload(step, "optim.pt")),
            ("scheduler", loaded.scheduler, trainer["scheduler"]),
            ("RNG streams", loaded.rng, trainer["rng"]["ranks"][0]),
            ("clocks", loaded.clocks, {k: trainer[k] for k in loaded.clocks}),
        ]
        if with_data:
            expected.append(("data source", loaded.data, seen.payload(step, "data.pt")))
        expected += [(f"{f} copy", got, seen.payload(step, f)) for f, got in loaded.copies.items()]
        for what, got, want in expected:
            difference = first_difference(got, want)
            if difference is not None:
                raise GuaranteeViolation(
                    f"{who} adopted iter {step} but the {what} differs from its files: {difference}"
                )
        if not loaded.optimizer["state"]:
            raise GuaranteeViolation(f"{who} adopted iter {step} but the optimizer has no state")


def resume_writes_nothing(ctx: CheckContext) -> None:
    """RESUME-READ-ONLY: resume performs no store operation that changes bytes or names."""
    direct = _direct(ctx)
    if direct is not None:
        direct_checks.direct_resume_writes_nothing(ctx, direct)
        return
    for who, obs in _resumes(ctx):
        ctx.exercised()
        if obs.io:
            ops = "; ".join(f"{r.op} {r.target}" for r in obs.io[:6])
            raise GuaranteeViolation(f"{who} changed the store: {ops}")


def hostile_pickle_never_runs(ctx: CheckContext) -> None:
    """RESUME-NO-CODE: resume never executes a checkpoint's pickle payload: a file whose
    unpickling would call code is refused (passed over with a reason), never adopted."""
    direct = _direct(ctx)
    if direct is not None:
        direct_checks.direct_no_code_ran(ctx, direct)
        return
    for who, obs in _resumes(ctx):
        if obs.payloads_ran:
            ctx.exercised()
            raise GuaranteeViolation(f"{who} executed pickle payloads {list(obs.payloads_ran)}")
        hostile = sorted(p for p, data in obs.seen.files.items() if HOSTILE_MARKER in data)
        if not hostile:
            continue
        ctx.exercised()
        if obs.result.resumed:
            adopted = iteration_name(obs.result.step) + "/"
            if any(p.startswith(adopted) for p in hostile):
                raise GuaranteeViolation(f"{who} adopted {adopted} which holds {hostile}")


def direct_resume_follows_latest(ctx: CheckContext) -> None:
    """RESUME-DIRECT-LATEST: over a direct root resume=auto adopts exactly the complete
    iteration latest names, starts fresh only without latest, and otherwise refuses."""
    direct = _direct(ctx)
    if direct is not None:
        direct_checks.direct_resume_follows_latest(ctx, direct)
