"""Fixtures shared by test modules."""

from __future__ import annotations

from pathlib import Path

import pytest
from checkpoint_runs import private_copy


@pytest.fixture
def out(pristine: Path, tmp_path: Path) -> Path:
    """A private copy of the requesting module's ``pristine`` output root, free to damage."""
    return private_copy(pristine, tmp_path)
