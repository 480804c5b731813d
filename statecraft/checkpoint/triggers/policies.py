"""The save triggers: each one object with one method, validated when built (the shape of the
retention policies). A trigger says whether a save is due at a step boundary; it composes with
``save_every`` (a save is due when either says so) and never with the emergency path (a stop's
emergency save replaces whatever is due).

::

    EveryNSeconds(1800)          a save once 1800 s have passed since the run's last save
                                 (or its start): Lightning's train_time_interval
    EveryNEpochs(1)              at every step_end(epoch=k) with k a multiple of 1
    SaveFn(should_save)          should_save(step) -> bool: Orbax's should_save_fn

Bad values are refused when the trigger is built, as a
:class:`~statecraft.errors.ConfigError` naming the trigger and the field.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import attrs

from statecraft.errors import ConfigError, ConfigIssue

__all__ = ["EveryNEpochs", "EveryNSeconds", "SaveFn", "SaveTrigger", "TriggerFacts"]


@attrs.frozen
class TriggerFacts:
    """What a trigger may read at a boundary.

    Attributes:
        step: the applied optimizer steps so far (the iteration a save would write).
        epoch: the ``epoch`` passed to ``step_end`` (epochs completed), else ``None``.
        since: the monotonic time of the run's last save (or its start, before the first).
    """

    step: int
    epoch: int | None
    since: float


@runtime_checkable
class SaveTrigger(Protocol):
    """Whether a save is due at a boundary (``facts``). It is asked on rank 0 only (its
    answer is broadcast), at every ``step_end()`` that could save. ``describe`` is one short
    phrase for logs and refusals."""

    def due(self, facts: TriggerFacts) -> bool: ...

    def describe(self) -> str: ...


def _refuse(trigger: str, field: str, found: object, allowed: str) -> ConfigError:
    return ConfigError([ConfigIssue(field, found, allowed)], source=f"save trigger {trigger}")


@attrs.frozen
class EveryNSeconds:
    """Due once ``seconds`` of wall-clock time have passed since the run's last save of any
    kind (or, before the first, since the ``Checkpointer`` was built).

    Args:
        seconds: the interval, a finite number > 0.
        clock: monotonic seconds (default ``time.monotonic``; tests pass a fake one).

    Raises:
        ConfigError: ``seconds`` is not a finite number > 0, or ``clock`` is not callable.
    """

    seconds: float
    clock: Callable[[], float] = attrs.field(default=time.monotonic, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        value = self.seconds
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _refuse("EveryNSeconds", "seconds", value, "a number of seconds > 0")
        if not math.isfinite(value) or value <= 0:
            raise _refuse("EveryNSeconds", "seconds", value, "a finite number of seconds > 0")
        if not callable(self.clock):
            raise _refuse("EveryNSeconds", "clock", self.clock, "a callable returning seconds")

    def due(self, facts: TriggerFacts) -> bool:
        return self.clock() - facts.since >= self.seconds

    def describe(self) -> str:
        return f"every {self.seconds:g} s"


@attrs.frozen
class EveryNEpochs:
    """Due at a ``step_end(epoch=k)`` whose ``k`` (the epochs completed, as the loop counts
    them: resume-consistent) is a multiple of ``n``.

    Raises:
        ConfigError: ``n`` is not an int >= 1.
    """

    n: int = 1

    def __attrs_post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise _refuse("EveryNEpochs", "n", self.n, "an int >= 1")

    def due(self, facts: TriggerFacts) -> bool:
        return facts.epoch is not None and facts.epoch % self.n == 0

    def describe(self) -> str:
        return "every epoch" if self.n == 1 else f"every {self.n} epochs"


@attrs.frozen
class SaveFn:
    """``should_save(step) -> bool``, asked on rank 0 at each boundary that could save (its
    answer, or its error, reaches every rank).

    Raises:
        ConfigError: ``should_save`` is not callable (at build); a call returning anything
            but a bool (at that boundary, on every rank).
    """

    should_save: Callable[[int], bool]

    def __attrs_post_init__(self) -> None:
        if not callable(self.should_save):
            raise _refuse("SaveFn", "should_save", self.should_save, "a callable(step) -> bool")

    def due(self, facts: TriggerFacts) -> bool:
        answer = self.should_save(facts.step)
        if not isinstance(answer, bool):
            raise _refuse(
                "SaveFn",
                "should_save(step)",
                answer,
                f"True or False (returned at step {facts.step}; return a bool)",
            )
        return answer

    def describe(self) -> str:
        name = getattr(self.should_save, "__qualname__", type(self.should_save).__name__)
        return f"should_save {name}"
