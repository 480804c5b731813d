"""Broken variants of what ``init_from`` initializes at a start
(:func:`statecraft.checkpoint.init_from.start.targets_at_start`).

``skip_reference_on_resume``: the 2026-07-06 relaunch bug the reference contract records
(``rl.init_from`` skipped on a resumed window). On a fresh start it does what the shipped policy
does; on a resumed window it initializes nothing, so the frozen reference keeps whatever the
loop built before ``resume()`` (the raw experiment initialization) instead of the base weights,
and the objective is silently wrong from the first resumed step. ``tests/init_from`` swaps it
in for the shipped policy and shows the resumed loss differs from the uninterrupted run's,
while the shipped policy's is bit-identical.
"""

from __future__ import annotations

from typing import Any

from statecraft.checkpoint.init_from.roles import ModelCopies
from statecraft.checkpoint.init_from.start import targets_at_start

__all__ = ["VARIANTS", "skip_reference_on_resume"]


def skip_reference_on_resume(
    resumed: bool, model: Any, copies: ModelCopies
) -> list[tuple[str, Any]]:
    """The shipped policy on a fresh start; nothing on a resumed one (the bug)."""
    return [] if resumed else targets_at_start(resumed, model, copies)


#: name -> the wrong ``targets_at_start``
VARIANTS = {"skip_reference_on_resume": skip_reference_on_resume}
