"""Errors of the commands that are not checkpoint transactions: ``statecraft demo`` and
``statecraft inspect``."""

from __future__ import annotations

from statecraft.errors._base import StatecraftError

__all__ = ["DemoError", "InspectError"]


class DemoError(StatecraftError, ValueError):
    """``statecraft demo`` cannot run as asked (its output root already holds runs)."""

    code = "demo_invalid"


class InspectError(StatecraftError, FileNotFoundError):
    """``statecraft inspect``: PATH does not exist or holds no checkpoints layout."""

    code = "no_checkpoints_layout"
