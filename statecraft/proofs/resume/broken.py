"""The deliberately wrong resumes ``specs/resume.toml`` declares (``[[broken]]``): each returns
the scenarios that run one wrong variant, and ``statecraft crashcheck --broken`` fails unless
exploring them violates the guarantees the spec says it must. ``tests/engine/
test_crash_blind_spots.py`` asserts the specific messages."""

from __future__ import annotations

import io
from typing import Any

import attrs
import torch

from statecraft.checkpoint.direct.resume_source import DirectResumeSource
from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.checkpoint.resume import bindings as resume_tx
from statecraft.proofs.resume.direct_scenarios import (
    DirectResumeScenario,
    direct_resume_scenarios,
)
from statecraft.proofs.save import broken as save_broken
from statecraft.proofs.save.broken import scenario, with_effects
from statecraft.proofs.save.scenarios import SaveScenario
from statecraft.writers.consolidated import ConsolidatedWriter

__all__ = [
    "FreshOverDamagedLatest",
    "UnsafeWriter",
    "deletes_a_corrupt_commit",
    "forgets_a_reason",
    "fresh_start_over_damaged_latest",
    "load_skipping_clocks",
    "load_skipping_optimizer",
    "load_skipping_rng",
    "load_skipping_scheduler",
    "loads_with_weights_only_false",
    "resume_adopting_unverified",
    "resume_cleaning_up",
    "resume_forgetting_reasons",
    "resume_oldest_first",
    "resume_trusting_latest",
    "skips_the_optimizer",
    "tries_the_oldest_first",
]


# ----------------------------------------------------------------- broken resume effects
def resume_oldest_first(ctx: Any) -> None:
    """Broken: the candidates are tried oldest first."""
    resume_tx.list_candidates(ctx)
    ctx.candidates.reverse()


def resume_forgetting_reasons(ctx: Any) -> None:
    """Broken: a candidate passed over leaves no recorded reason."""
    try:
        resume_tx.verify_next_candidate(ctx)
    except Exception:
        ctx.passed_over.pop()
        raise


def resume_cleaning_up(ctx: Any) -> None:
    """Broken: a commit that does not verify is "helpfully" removed."""
    iteration = ctx.candidates[0]
    try:
        resume_tx.verify_next_candidate(ctx)
    except Exception:
        ctx.store.delete_tree(iter_dirname(iteration))
        raise


def resume_trusting_latest(ctx: Any) -> None:
    """Broken: the iteration latest names is tried first, even when it does not exist."""
    resume_tx.list_candidates(ctx)
    raw = ctx.store.read_bytes("latest_checkpoint.txt").decode().strip()
    latest = int(raw[5:])  # raises on a garbage pointer
    if latest in ctx.candidates:
        ctx.candidates.remove(latest)
    ctx.candidates.insert(0, latest)


def load_skipping_optimizer(ctx: Any) -> None:
    """Broken: optim.pt is read, never loaded into the optimizer."""
    ctx.tracked.optimizer.load_state_dict = lambda state: None
    resume_tx.load_checkpoint(ctx)


def load_skipping_scheduler(ctx: Any) -> None:
    """Broken: the scheduler's state is never loaded."""
    ctx.tracked.scheduler.load_state_dict = lambda state: None
    resume_tx.load_checkpoint(ctx)


def load_skipping_rng(ctx: Any) -> None:
    """Broken: the RNG streams are never restored."""
    original = resume_tx.restore_rank_rng
    resume_tx.restore_rank_rng = lambda *a, **k: "restored"
    try:
        resume_tx.load_checkpoint(ctx)
    finally:
        resume_tx.restore_rank_rng = original


def load_skipping_clocks(ctx: Any) -> None:
    """Broken: the clocks restart from zero."""
    resume_tx.load_checkpoint(ctx)
    ctx.tracked.clocks = type(ctx.tracked.clocks)()


class UnsafeWriter(ConsolidatedWriter):
    def read(self, store: Any, path: str, *, mmap: bool = True) -> Any:
        """Broken: loads with weights_only=False (runs any __reduce__ in the pickle)."""
        with store.open_read(path) as handle:
            return torch.load(io.BytesIO(handle.read()), weights_only=False)

    def load_bytes(self, data: bytes, *, where: str) -> Any:
        """Broken: the bytes verification hashed, loaded with weights_only=False."""
        return torch.load(io.BytesIO(data), weights_only=False)


def _listing_with_unsafe_writer(ctx: Any) -> None:
    ctx.writer = UnsafeWriter()
    resume_tx.list_candidates(ctx)


class FreshOverDamagedLatest(DirectResumeSource):
    """Broken: when latest names an iteration that does not verify, starts fresh."""

    def fresh_refusal(self, failures: dict[int, Exception]) -> Exception | None:
        return None


# ----------------------------------------------------------------------- the variants
def resume_adopting_unverified() -> list[SaveScenario]:
    """A resume that checks sizes only, and adopts an iteration without a manifest when its
    trainer.pt loads: it picks up the half-written one a crashed save left."""
    return save_broken.resume_adopting_unverified()[:1]


def tries_the_oldest_first() -> list[SaveScenario]:
    """A resume that tries the oldest checkpoint first."""
    factory = with_effects("resume", list_candidates=resume_oldest_first)
    return [scenario("next-save", resume_factory=factory)]


def forgets_a_reason() -> list[SaveScenario]:
    """A resume that passes over a corrupt checkpoint without recording why."""
    factory = with_effects("resume", verify_next_candidate=resume_forgetting_reasons)
    return [scenario("newest-is-corrupt", resume_factory=factory)]


def deletes_a_corrupt_commit() -> list[SaveScenario]:
    """A resume that removes the commit it could not verify."""
    factory = with_effects("resume", verify_next_candidate=resume_cleaning_up)
    return [scenario("newest-is-corrupt", resume_factory=factory)]


def skips_the_optimizer() -> list[SaveScenario]:
    """A resume that reads optim.pt but never loads it into the optimizer."""
    factory = with_effects("resume", load_checkpoint=load_skipping_optimizer)
    return [scenario("next-save", resume_factory=factory)]


def loads_with_weights_only_false() -> list[SaveScenario]:
    """A resume whose writer loads with weights_only=False: the hostile pickle runs."""
    factory = with_effects("resume", list_candidates=_listing_with_unsafe_writer)
    return [scenario("dangling-latest-hostile-pickle", resume_factory=factory)]


def fresh_start_over_damaged_latest() -> list[DirectResumeScenario]:
    """Over a direct root, a resume that starts fresh when latest names an iteration that
    does not verify (fail open), instead of refusing."""
    (found,) = [
        s for s in direct_resume_scenarios() if s.name == "direct-latest-names-missing-object"
    ]
    return [attrs.evolve(found, name=f"broken-{found.name}", source_factory=FreshOverDamagedLatest)]
