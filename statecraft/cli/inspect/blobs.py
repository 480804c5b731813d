"""``inspect``'s view of an iteration of ``checkpoint_format=incremental``: the bytes of the
blobs it references, split into those another committed iteration references too (shared)
and its own."""

from __future__ import annotations

from typing import Any

from statecraft.checkpoint.incremental import referenced_blobs
from statecraft.storage.base import Store

__all__ = ["blob_field", "blob_lines"]


def blob_field(store: Store, iteration: int, manifest: Any) -> dict[str, int] | None:
    """``{"blobs", "shared_bytes", "own_bytes"}`` of an incremental iteration (``None`` for
    any other, or when the references cannot be read)."""
    if manifest is None or manifest.format != "incremental":
        return None
    try:
        refs = referenced_blobs(store)
        mine = next(it for it in refs.iterations if it.iteration == iteration)
        shared, own = refs.shared_and_own(iteration)
    except Exception:
        return None
    return {"blobs": len(mine.blobs), "shared_bytes": shared, "own_bytes": own}


def blob_lines(it: dict[str, Any], size: Any) -> list[str]:
    """The ``blobs:`` line of an iteration record (none without a ``blobs`` field)."""
    field = it.get("blobs")
    if not field:
        return []
    return [
        f"      blobs: {field['blobs']} referenced, {size(field['shared_bytes'])} shared with "
        f"other iterations, {size(field['own_bytes'])} its own"
    ]
