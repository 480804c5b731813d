"""Errors of the commands that are not checkpoint transactions: ``statecraft demo``,
``statecraft inspect`` and ``statecraft bench``."""

from __future__ import annotations

from statecraft.errors._base import StatecraftError

__all__ = ["DemoError", "FigureUnavailable", "InspectError"]


class DemoError(StatecraftError, ValueError):
    """``statecraft demo`` cannot run as asked (its output root already holds runs)."""

    code = "demo_invalid"


class InspectError(StatecraftError, FileNotFoundError):
    """``statecraft inspect``: PATH does not exist or holds no checkpoints layout."""

    code = "no_checkpoints_layout"


class FigureUnavailable(StatecraftError, RuntimeError):
    """A ``statecraft bench`` figure cannot run here (an extra or a binary is missing); the
    message names it and the table shows the figure as skipped."""

    code = "bench_figure_unavailable"
