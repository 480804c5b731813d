"""What ``statecraft inspect`` says of an archive receipt (``iter_N/.uploaded``).

A v1 receipt shows its destination URI and how many files it lists; a one-line marker of an
earlier release shows as ``legacy marker (binds no destination)``; one that does not parse
shows as malformed, with why. Never a key id or a secret (a receipt holds neither).
"""

from __future__ import annotations

from typing import Any

from statecraft.checkpoint.archive.marker import (
    MARKER_NAME,
    LegacyMarker,
    marker_path,
    read_marker,
)
from statecraft.errors import CheckpointCorruptError
from statecraft.storage.base import Store

__all__ = ["archive_field", "archive_note"]


def archive_field(store: Store, directory: str) -> dict[str, Any] | None:
    """``{"status", "destination", "files", "detail"}`` of ``directory``'s receipt, or
    ``None`` when it has none. ``status``: ``uploaded`` / ``legacy`` / ``malformed``."""
    if store.stat(marker_path(directory)) is None:
        return None
    try:
        marker = read_marker(store, directory)
    except (CheckpointCorruptError, OSError) as exc:
        return {"status": "malformed", "destination": None, "files": None, "detail": str(exc)}
    if isinstance(marker, LegacyMarker):
        return {
            "status": "legacy",
            "destination": None,
            "files": None,
            "detail": "legacy marker (binds no destination)",
        }
    uri = marker.destination.uri()
    return {
        "status": "uploaded",
        "destination": uri,
        "files": len(marker.files),
        "detail": f"{marker.kind} archived at {uri} ({len(marker.files)} files)",
    }


def archive_note(it: dict[str, Any], name: str) -> str | None:
    """The note of file ``name`` of a report entry ``it`` when it is the receipt."""
    if name != MARKER_NAME:
        return None
    archive = it.get("archive")
    if not archive:
        return "  (upload marker)"
    if archive["status"] == "malformed":
        return "  (upload marker: malformed)"
    return f"  (upload marker: {archive['detail']})"
