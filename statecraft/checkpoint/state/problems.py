"""Shared helpers of the trainer-state records: type-revealing descriptions and one error
listing every problem of a payload."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import torch

from statecraft.errors import TrainerStateError

__all__ = [
    "TRAINER_CORRUPT_FIX",
    "deep_equal",
    "describe",
    "is_int",
    "problems_of",
    "state_error",
]

TRAINER_CORRUPT_FIX = (
    "This trainer state cannot be resumed exactly; restore trainer.pt from an intact copy, or "
    "start a new run from these weights instead of exact resume."
)


def describe(value: object) -> str:
    """A short, type-revealing rendering of ``value`` for error messages."""
    if isinstance(value, torch.Tensor):
        return f"tensor(dtype={value.dtype}, shape={tuple(value.shape)}, device={value.device})"
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({type(value).__name__})"


def is_int(value: object) -> bool:
    """True for a real ``int`` (``bool`` is not accepted as a number)."""
    return type(value) is int


def state_error(source: str, what: str, problems: Sequence[str], fix: str) -> TrainerStateError:
    """Build one :class:`TrainerStateError` listing every problem, carrying them as fields."""
    lines = "\n".join(f"  - {p}" for p in problems)
    return TrainerStateError(
        f"{source}: {len(problems)} problem(s) in the {what}:\n{lines}\n{fix}",
        source=source,
        problems=list(problems),
    )


def deep_equal(a: Any, b: Any) -> bool:
    """Structural equality that compares tensors by dtype, shape and value, and is type-strict."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and torch.equal(a.cpu(), b.cpu())
        )
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(deep_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(deep_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


_PATH_PREFIX = re.compile(r"^[A-Za-z_][\w.\[\]']*:")


def problems_of(exc: TrainerStateError, field: str) -> list[str]:
    """The problem lines of ``exc`` (built by ``state_error``), re-rooted under ``field``."""
    lines = getattr(exc, "problems", [str(exc)])
    return [f"{field}.{p}" if _PATH_PREFIX.match(p) else f"{field}: {p}" for p in lines]
