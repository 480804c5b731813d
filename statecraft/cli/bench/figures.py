"""What a bench module declares for the one table of ``statecraft bench``: its figures.

A :class:`Figure` names one comparison (what is measured, against which baseline, the target
and which way meets it) and how to measure it: ``run(ctx)`` runs the compared variants
interleaved (A B A B ..., at least ``ctx.repeat`` times) and returns a :class:`Measured`,
one value per repetition (a ratio of that repetition's paired runs, or seconds where the
figure's unit is ``s``). A module lists its figures in ``FIGURES``; the table
(:mod:`~statecraft.cli.bench.table`) imports the modules it names, so a new figure is one line
in its module's ``FIGURES`` (and a new module one line in the table's list).

A figure that needs something this machine lacks (an extra not installed, no ``weed`` binary)
raises :class:`FigureUnavailable` naming what is missing; the table shows it as skipped.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any, Literal

import attrs

from statecraft.errors import FigureUnavailable, StatecraftError

__all__ = [
    "Figure",
    "FigureRun",
    "FigureUnavailable",
    "Measured",
    "paired",
    "size_text",
]

Better = Literal["lower", "higher"]


@attrs.frozen
class Measured:
    """One figure's values, one per repetition, and the size they were measured at."""

    values: tuple[float, ...]
    size: str

    @property
    def median(self) -> float:
        return statistics.median(self.values)


@attrs.define
class FigureRun:
    """What a figure's ``run`` gets: where to write, how many repetitions, quick or full
    sizes, whether slow figures run, an optional cap on every size (``--max-mib``), and
    results shared by figures of one measurement (:meth:`once`)."""

    root: str
    repeat: int
    quick: bool = True
    slow: bool = False
    max_mib: int | None = None
    shared: dict[str, Any] = attrs.field(factory=dict)

    def size_mib(self, quick: int, full: int) -> int:
        """``quick`` or ``full`` MiB, capped at ``max_mib``."""
        chosen = quick if self.quick else full
        return chosen if self.max_mib is None else max(1, min(chosen, self.max_mib))

    def once(self, key: str, measure: Callable[[], Any]) -> Any:
        """``measure()`` the first time ``key`` is asked for, its result after that (one
        interleaved run serves every figure taken from it)."""
        if key not in self.shared:
            self.shared[key] = measure()
        return self.shared[key]


@attrs.frozen
class Figure:
    """One row of the table.

    ``name`` says what is measured, ``baseline`` what it is compared with, ``target`` the bar
    (``None``: reported, no bar declared), ``better`` which way of the bar meets it, ``unit``
    ``x`` (a ratio) or ``s`` (seconds over the baseline); ``full_only`` marks a figure
    whose target is stated at a size ``--quick`` does not reach, ``slow`` one that starts
    processes, a server or a training framework (both are listed, and run with ``--full`` and
    ``--all`` respectively).
    """

    name: str
    baseline: str
    target: float | None
    better: Better
    run: Callable[[FigureRun], Measured]
    unit: Literal["x", "s"] = "x"
    full_only: bool = False
    slow: bool = False
    stated_at: str | None = None  # the size a --full only figure is measured at (for its row)

    def met(self, value: float) -> bool | None:
        if self.target is None:
            return None
        return value <= self.target if self.better == "lower" else value >= self.target


def paired(ours: Sequence[float], base: Sequence[float], *, invert: bool = False) -> tuple:
    """Per-repetition ratios ``ours[i] / base[i]`` (``base[i] / ours[i]`` with ``invert``:
    throughput from seconds) of two equally long, interleaved sample lists."""
    if len(ours) != len(base) or not ours:
        raise StatecraftError(
            f"bench: {len(ours)} and {len(base)} samples cannot be paired by repetition"
        )
    return tuple((b / o) if invert else (o / b) for o, b in zip(ours, base, strict=True))


def size_text(mib: float) -> str:
    if mib >= 1024 and mib % 1024 == 0:
        return f"{int(mib // 1024)} GiB"
    return f"{mib:g} MiB"
