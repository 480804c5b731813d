"""What one step boundary did: :class:`StepEnd`, the value of ``Checkpointer.step_end()``.

::

    end = ckpt.step_end()
    if end.saved is not None:
        print(f"saved iter {end.saved.iteration}")
    if end:                     # bool(end) is end.stop: the loop must stop now
        break

``if ckpt.step_end(): break`` reads as before: a ``StepEnd`` is true exactly when the loop
must stop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:  # the facade imports this module; the report type is only annotated
    from statecraft.checkpoint.saving import SaveReport

__all__ = ["StepEnd"]


@attrs.frozen
class StepEnd:
    """The outcome of one ``Checkpointer.step_end()`` call.

    Attributes:
        saved: the report of the save this boundary made (on rank 0; ``None`` on other ranks,
            and ``None`` when no save was due).
        stop: the loop must stop now (termination handling arrives with emergency saves; this
            release never asks to stop).
        reason: why the loop must stop (``None`` while ``stop`` is false).

    ``bool(step_end)`` is ``stop``, so ``if ckpt.step_end(): break`` stops exactly when asked.

    Example:
        >>> bool(StepEnd(saved=None, stop=False, reason=None))
        False
    """

    saved: SaveReport | None = None
    stop: bool = False
    reason: str | None = None

    def __bool__(self) -> bool:
        return self.stop
