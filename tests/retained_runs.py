"""Retention's states built by hand on real checkpoints: the markers of
``statecraft/checkpoint/kernel/retention_records.py`` written and files removed in the order
retention
uses (marker first), so the catalog, resume, ``load_weights`` and ``inspect`` tests see exactly
what a retention pass, or a crash inside one, leaves."""

from __future__ import annotations

import shutil
from pathlib import Path

from statecraft.checkpoint.kernel.layout import MANIFEST_NAME
from statecraft.checkpoint.kernel.retention_records import (
    INVALIDATED_MARKER,
    RETENTION_DECISION,
    WEIGHTS_ONLY_MARKER,
    InvalidatedRecord,
    RetentionDecision,
    WeightsOnlyRecord,
)


def _create(path: Path, data: bytes) -> None:
    with open(path, "xb") as f:  # exclusive, as retention creates its markers
        f.write(data)


def mark_weights_only(iter_dir: Path, *, policy: str = "latest 1", remove: bool = True) -> None:
    """Mark ``iter_dir`` weights-only, then (``remove``) remove its ``optim.pt``; without
    ``remove`` it is what a crash between the two steps leaves."""
    iteration = int(iter_dir.name.removeprefix("iter_"))
    _create(
        iter_dir / WEIGHTS_ONLY_MARKER, WeightsOnlyRecord(iteration, ("optim.pt",), policy).encode()
    )
    if remove:
        (iter_dir / "optim.pt").unlink()


def invalidate(iter_dir: Path, *, policy: str = "latest 2", stage: str = "marked") -> None:
    """Invalidate ``iter_dir`` as retention's delete does, stopping after ``stage``:
    ``"marked"`` (the marker only), ``"unmanifested"`` (manifest removed too), ``"emptied"``
    (only the marker is left)."""
    iteration = int(iter_dir.name.removeprefix("iter_"))
    _create(iter_dir / INVALIDATED_MARKER, InvalidatedRecord(iteration, policy).encode())
    if stage in ("unmanifested", "emptied"):
        (iter_dir / MANIFEST_NAME).unlink()
    if stage == "emptied":
        for child in iter_dir.iterdir():
            if child.name != INVALIDATED_MARKER:
                shutil.rmtree(child) if child.is_dir() else child.unlink()


def write_decision(checkpoints: Path, decision: RetentionDecision) -> None:
    """Write the last retention pass's decision record into ``checkpoints``."""
    (checkpoints / RETENTION_DECISION).write_bytes(decision.encode())
