"""``Store.read_range`` on every store: the slice asked for, fewer bytes only at the end, a
missing file and negative arguments refused (the DCP reader reads items by range)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statecraft.checkpoint.fencing.fenced_store import FencedStore
from statecraft.storage import SimWorld
from statecraft.storage.local import LocalStore
from statecraft.storage.objects import ObjectStore, SimBucket

DATA = bytes(range(256)) * 4


class _GetOnlyBucket(SimBucket):
    """A bucket client without ``get_range`` (the store falls back to a whole GET)."""

    get_range = None  # type: ignore[assignment]


def _stores(tmp_path: Path) -> list[Any]:
    local = LocalStore(str(tmp_path / "local"))
    return [
        local,
        SimWorld().local_store("/ckpt"),
        ObjectStore(SimBucket(), prefix="ckpt"),
        ObjectStore(_GetOnlyBucket(), prefix="ckpt"),
        FencedStore(LocalStore(str(tmp_path / "fenced")), lambda path: None),
    ]


@pytest.mark.parametrize("index", range(5))
def test_read_range_slices(tmp_path: Path, index: int) -> None:
    store = _stores(tmp_path)[index]
    store.make_dirs("d")
    store.write_atomic("d/blob", DATA)
    assert store.read_range("d/blob", 0, 10) == DATA[:10]
    assert store.read_range("d/blob", 300, 17) == DATA[300:317]
    assert store.read_range("d/blob", 1000, 100) == DATA[1000:]  # short at the end
    assert store.read_range("d/blob", 5, 0) == b""
    with pytest.raises(FileNotFoundError):
        store.read_range("d/absent", 0, 4)
    with pytest.raises(FileNotFoundError):
        store.read_range("d/absent", 0, 0)
    with pytest.raises(ValueError, match="must be >= 0"):
        store.read_range("d/blob", -1, 4)
