"""The resume spec's checks on the direct object-store scenarios
(:mod:`statecraft.proofs.resume.direct_scenarios`), called by
:mod:`statecraft.proofs.resume.checks` when the recovery is a direct one.

They judge each resume of the restarted process (before and after the retried save) against
the bucket exactly as it found it, with an oracle independent of the production reader: the
manifest parsed here, every object it names checked for size and digest here
(:func:`~statecraft.proofs.direct.checks.incomplete_reason`), and the adopted state compared
with the state the scenario trained at that iteration
(:func:`~statecraft.proofs.training.expected_payloads`), not with what the reader returned.
"""

from __future__ import annotations

from typing import Any

from statecraft.checkpoint.kernel.layout import LATEST_POINTER
from statecraft.proofs.direct.checks import incomplete_reason
from statecraft.proofs.oracle import first_difference, iteration_name
from statecraft.proofs.resume.direct_scenarios import (
    ROOT_URI,
    DirectResumeObservation,
    DirectResumeRecovery,
)
from statecraft.proofs.scenario import CheckContext, GuaranteeViolation
from statecraft.proofs.training import expected_payloads

__all__ = [
    "direct_adopted_checkpoint_verifies",
    "direct_no_code_ran",
    "direct_resume_follows_latest",
    "direct_resume_writes_nothing",
    "direct_resumed_state_is_exact",
]


def _resumes(recovery: DirectResumeRecovery) -> list[tuple[str, DirectResumeObservation]]:
    return [("resume", recovery.first), ("resume after the retry", recovery.after)]


def _latest(seen: dict[str, bytes]) -> int | None:
    """The iteration latest names as resume found it (``None``: absent); a latest that names
    no iteration counts as one that does not verify (-1)."""
    raw = seen.get(LATEST_POINTER)
    if raw is None:
        return None
    text = raw.decode(errors="replace").strip()
    if not text.startswith("iter_") or not text[5:].isdigit() or len(text) != 14:
        return -1
    return int(text[5:])


def direct_adopted_checkpoint_verifies(ctx: CheckContext, recovery: DirectResumeRecovery) -> None:
    """RESUME-VERIFIED on a direct root: the adopted iteration held, as resume found it, a
    manifest naming every object with its size and digest, every component's ``.metadata``
    and a shard of every rank."""
    for who, obs in _resumes(recovery):
        if obs.result is None or not obs.result.resumed:
            continue
        ctx.exercised()
        problem = incomplete_reason(obs.seen, iteration_name(obs.result.step), real_dcp=True)
        if problem is not None:
            raise GuaranteeViolation(f"{who} adopted iter {obs.result.step} but {problem}")


def direct_resume_follows_latest(ctx: CheckContext, recovery: DirectResumeRecovery) -> None:
    """RESUME-DIRECT-LATEST: with no latest resume starts fresh; with latest naming a complete
    iteration it adopts exactly that one (its location under the root, nothing passed over);
    with latest naming anything else it refuses (no fresh start, nothing adopted)."""
    for who, obs in _resumes(recovery):
        ctx.exercised()
        latest = _latest(obs.seen)
        intact = (
            latest is not None
            and latest >= 0
            and incomplete_reason(obs.seen, iteration_name(latest), real_dcp=True) is None
        )
        result = obs.result
        if latest is None:
            if result is None or result.resumed:
                got = f"refused ({obs.error!r})" if result is None else f"adopted {result.source}"
                raise GuaranteeViolation(f"{who} found no latest but {got}, not a fresh start")
        elif intact:
            assert latest is not None
            where = f"{ROOT_URI}/{iteration_name(latest)}"
            if result is None or result.step != latest or result.source != where:
                got = f"refused ({obs.error!r})" if result is None else f"step {result.step}"
                raise GuaranteeViolation(
                    f"{who}: latest names complete {iteration_name(latest)} but resume {got}"
                )
            if result.passed_over:
                raise GuaranteeViolation(f"{who} passed over {result.passed_over}")
        elif result is not None:
            got = f"adopted {result.source}" if result.resumed else "started fresh"
            raise GuaranteeViolation(
                f"{who}: latest names {latest} which does not verify, yet resume {got} "
                "instead of refusing"
            )


def direct_resumed_state_is_exact(ctx: CheckContext, recovery: DirectResumeRecovery) -> None:
    """RESUME-EXACT on a direct root: the model, optimizer (its per-parameter state), scheduler,
    RNG streams and clocks hold exactly the state trained at the adopted iteration."""
    for who, obs in _resumes(recovery):
        if obs.result is None or not obs.result.resumed:
            continue
        if obs.loaded is None:
            raise GuaranteeViolation(f"{who} resumed but nothing was loaded")
        ctx.exercised()
        step, loaded = obs.result.step, obs.loaded
        saved = {k: make() for k, make in expected_payloads(step, with_data=False).items()}
        trainer = saved["trainer.pt"]
        expected: list[tuple[str, Any, Any]] = [
            ("model", loaded.model, saved["model.pt"]),
            ("optimizer", loaded.optimizer, saved["optim.pt"]),
            ("scheduler", loaded.scheduler, trainer["scheduler"]),
            ("RNG streams", loaded.rng, trainer["rng"]["ranks"][0]),
            ("clocks", loaded.clocks, {k: trainer[k] for k in loaded.clocks}),
        ]
        for what, got, want in expected:
            difference = first_difference(got, want)
            if difference is not None:
                raise GuaranteeViolation(
                    f"{who} adopted iter {step} but the {what} differs from the state saved "
                    f"there: {difference}"
                )


def direct_resume_writes_nothing(ctx: CheckContext, recovery: DirectResumeRecovery) -> None:
    """RESUME-READ-ONLY on a direct root: no PUT or DELETE while resume ran."""
    for who, obs in _resumes(recovery):
        ctx.exercised()
        if obs.io:
            ops = "; ".join(f"{r.op} {r.target}" for r in obs.io[:6])
            raise GuaranteeViolation(f"{who} changed the bucket: {ops}")


def direct_no_code_ran(ctx: CheckContext, recovery: DirectResumeRecovery) -> None:
    """RESUME-NO-CODE on a direct root: no pickle payload executed while resume ran."""
    for who, obs in _resumes(recovery):
        ctx.exercised()
        if obs.payloads_ran:
            raise GuaranteeViolation(f"{who} executed pickle payloads {list(obs.payloads_ran)}")
