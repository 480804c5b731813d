"""What a checkpoint records of the data source it tracked, as the tests expect it."""

from __future__ import annotations

from typing import Any


def plain_cursor_source(world_size: int) -> dict[str, Any]:
    """The source identity stored with the cursor of a plain ``state_dict`` data source under
    ``cursor_resume=auto`` (no fingerprint, seed, sharding or batch geometry declared)."""
    return {
        "version": 1,
        "kind": "state_dict",
        "exact": True,
        "mode": "auto",
        "fingerprint": None,
        "seed": None,
        "sharding": None,
        "world_size": world_size,
        "batch_size": None,
        "grad_accum": None,
    }
