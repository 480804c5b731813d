"""What a run did, step by step."""

from __future__ import annotations

import attrs

__all__ = ["TraceEvent", "format_trace"]


@attrs.frozen
class TraceEvent:
    """One effect executed by the runner.

    Attributes:
        state: the state the effect ran from.
        effect: the effect's name.
        target: the state the run moved to (the ``on_error`` state after an error; the
            source state after a crash).
        outcome: ``"ok"``, ``"error"`` or ``"crash"``.
        duration_s: wall time of the effect.
        io_first: index of the effect's first store operation (``None`` without a gate).
        io_count: number of store operations the effect performed.
        error: ``repr`` of the exception for ``"error"`` / ``"crash"`` outcomes.
    """

    state: str
    effect: str
    target: str
    outcome: str
    duration_s: float
    io_first: int | None = None
    io_count: int = 0
    error: str | None = None

    def describe(self) -> str:
        io = ""
        if self.io_first is not None:
            io = f" io[{self.io_first}:{self.io_first + self.io_count}]"
        err = f" {self.error}" if self.error else ""
        return (
            f"{self.state} --{self.effect}--> {self.target} {self.outcome}"
            f" {self.duration_s * 1e3:.3f}ms{io}{err}"
        )


def format_trace(events: tuple[TraceEvent, ...] | list[TraceEvent]) -> str:
    """The trace as numbered lines, for error notes and crash reproducers."""
    return "\n".join(f"  {i}: {e.describe()}" for i, e in enumerate(events)) or "  (no effects ran)"
