"""The direct root's ``latest_checkpoint.txt``: which iteration it names (read only; it is
written under the lease by the save, :mod:`statecraft.checkpoint.direct.bindings`)."""

from __future__ import annotations

from statecraft.checkpoint.kernel.layout import LATEST_POINTER, parse_latest
from statecraft.errors import CheckpointCorruptError
from statecraft.storage.base import Store

__all__ = ["read_latest"]


def read_latest(store: Store) -> int | None:
    """The iteration ``latest_checkpoint.txt`` names (``None`` when absent).

    Raises:
        CheckpointCorruptError: latest exists but does not name an iteration.
    """
    if store.stat(LATEST_POINTER) is None:
        return None
    raw = store.read_bytes(LATEST_POINTER)
    try:
        return parse_latest(raw)
    except ValueError as exc:
        raise CheckpointCorruptError(
            f"{store.describe()}/{LATEST_POINTER}",
            f"does not name an iteration ({exc})",
            "Point it at a committed iter_N (or remove it) after inspecting the root.",
        ) from None
