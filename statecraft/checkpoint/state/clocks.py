"""The optimizer-control clocks a training loop advances once per microbatch."""

from __future__ import annotations

import enum
from typing import Any

import attrs

from statecraft.checkpoint.state.problems import (
    describe,
    is_int,
    state_error,
)
from statecraft.errors import TrainerStateError

__all__ = ["CLOCK_NAMES", "Outcome", "UpdateClocks", "clock_problems", "non_negative_int"]

CLOCK_NAMES = ("optimizer_step", "attempt_id", "skips_total", "skips_consecutive")


class Outcome(enum.Enum):
    """What one microbatch did to the optimizer attempt (the trainer's explicit return value)."""

    ACCUMULATING = "accumulating"
    """The attempt stays open; no optimizer clock advances."""
    APPLIED = "applied"
    """The whole window was finite; the optimizer (and scheduler) stepped; ``optimizer_step``
    advanced."""
    SKIPPED = "skipped"
    """A non-finite loss or gradient discarded the whole window; only attempt and skip counters
    advance."""


def non_negative_int(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    if not is_int(value) or value < 0:
        raise TrainerStateError(
            f"{type(instance).__name__}.{attribute.name} must be an int >= 0 "
            f"(got {describe(value)}); pass a non-negative count"
        )


def clock_problems(
    *, optimizer_step: int, attempt_id: int, skips_total: int, skips_consecutive: int
) -> list[str]:
    """Cross-field rules of the clocks (each field already a non-negative int)."""
    problems = []
    if attempt_id < optimizer_step:
        problems.append(
            f"attempt_id: expected >= optimizer_step ({optimizer_step}), since every applied "
            f"update is an attempt; got {attempt_id}"
        )
    if skips_consecutive > skips_total:
        problems.append(
            f"skips_consecutive: expected <= skips_total ({skips_total}); got {skips_consecutive}"
        )
    return problems


@attrs.define
class UpdateClocks:
    """The optimizer-control clocks, advanced once per microbatch by :meth:`record`.

    ``optimizer_step`` counts applied updates, ``attempt_id`` counts closed windows (applied or
    skipped), the skip counters count discarded windows (``skips_consecutive`` since the last
    applied one), and ``open_microbatches`` counts microbatches in the open window. Gradients are
    not checkpointed, so save and resume require ``open_microbatches == 0``.

    Example:
        >>> clocks = UpdateClocks()
        >>> clocks.record(Outcome.ACCUMULATING)
        >>> clocks.quiescent
        False
        >>> clocks.record(Outcome.APPLIED)
        >>> (clocks.optimizer_step, clocks.attempt_id, clocks.quiescent)
        (1, 1, True)
    """

    optimizer_step: int = attrs.field(default=0, validator=non_negative_int)
    attempt_id: int = attrs.field(default=0, validator=non_negative_int)
    skips_total: int = attrs.field(default=0, validator=non_negative_int)
    skips_consecutive: int = attrs.field(default=0, validator=non_negative_int)
    open_microbatches: int = attrs.field(default=0, validator=non_negative_int)

    def __attrs_post_init__(self) -> None:
        problems = clock_problems(
            optimizer_step=self.optimizer_step,
            attempt_id=self.attempt_id,
            skips_total=self.skips_total,
            skips_consecutive=self.skips_consecutive,
        )
        if problems:
            raise state_error(
                "UpdateClocks(...)", "update clocks", problems, "Pass consistent clocks."
            )

    def record(self, outcome: Outcome) -> None:
        """Advance the clocks by one microbatch's outcome.

        ``ACCUMULATING`` opens or extends the window; ``APPLIED`` closes it and advances
        ``optimizer_step`` and ``attempt_id`` and resets ``skips_consecutive``; ``SKIPPED``
        discards it and advances ``attempt_id`` and both skip counters.

        Raises:
            TrainerStateError: ``outcome`` is not an :class:`Outcome`.
        """
        if not isinstance(outcome, Outcome):
            raise TrainerStateError(
                f"record() expects an Outcome; got {describe(outcome)}; pass Outcome.APPLIED, "
                "Outcome.SKIPPED or Outcome.ACCUMULATING"
            )
        if outcome is Outcome.ACCUMULATING:
            self.open_microbatches += 1
            return
        self.attempt_id += 1
        self.open_microbatches = 0
        if outcome is Outcome.APPLIED:
            self.optimizer_step += 1
            self.skips_consecutive = 0
        else:
            self.skips_total += 1
            self.skips_consecutive += 1

    @property
    def quiescent(self) -> bool:
        """True when no accumulation window is open (the only state that can be saved)."""
        return self.open_microbatches == 0

    def require_quiescent(self, action: str) -> None:
        """Fail unless no accumulation window is open.

        Args:
            action: what the caller is about to do, e.g. ``"save a checkpoint"``.

        Raises:
            TrainerStateError: the window is open.
        """
        if self.quiescent:
            return
        raise TrainerStateError(
            f"cannot {action}: the accumulation window is open with {self.open_microbatches} "
            f"microbatch(es) (optimizer_step={self.optimizer_step}, attempt_id={self.attempt_id}); "
            "gradients are not checkpointed, so save and resume need accum = 0. Record "
            "Outcome.APPLIED or Outcome.SKIPPED to close the window first."
        )
