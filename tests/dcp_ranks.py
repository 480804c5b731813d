"""What multi-rank test children leave behind (a report file per rank, a checkpoints folder),
read back and compared exactly by the judging test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def rank_report(tmp: Path, phase: str, rank: int) -> dict[str, Any]:
    """The report rank ``rank`` saved as ``<tmp>/<phase>-rank<rank>.pt``."""
    loaded: dict[str, Any] = torch.load(tmp / f"{phase}-rank{rank}.pt", weights_only=True)
    return loaded


def checkpoints_dir(out: Path) -> Path:
    """The one ``checkpoints`` folder under a run's output folder."""
    [found] = out.glob("**/checkpoints")
    return found


def assert_equal(a: Any, b: Any, where: str = "") -> None:
    """Nested tensors, dicts, lists and plain values are exactly equal (``where`` names the
    first difference)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), where
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict), where
        assert sorted(a, key=str) == sorted(b, key=str), where
        for key in a:
            assert_equal(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_equal(x, y, f"{where}[{i}]")
    else:
        assert a == b, where
