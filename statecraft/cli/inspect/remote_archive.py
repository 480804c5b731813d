"""``statecraft inspect s3://bucket/prefix[/iter_N]`` when the prefix is an archive (what the
upload and ``archive publish`` write), not a direct checkpoints root: each iteration is
``complete``, ``partial`` or ``corrupt`` as :func:`~statecraft.checkpoint.archive.listing.
list_archive` reads it. Read-only (through :class:`~statecraft.cli.inspect.remote.
ReadOnlyBucket`)."""

from __future__ import annotations

from typing import Any

from statecraft.checkpoint.archive.listing import is_archive, list_archive

__all__ = ["archive_lines", "inspect_archive"]


def inspect_archive(uri: str, bucket: Any, prefix: str, only: int | None) -> dict[str, Any] | None:
    """The report of the archive at ``prefix`` (``only``: its ``iter_<only>``), or ``None``
    when it is not an archive (then it is read as a direct root)."""
    listing = list_archive(bucket, prefix, only=only)
    if not is_archive(listing):
        return None
    data = listing.to_dict()
    return data | {
        "path": uri,
        "kind": "remote_archive",
        "newest_complete": next(
            (
                it.name
                for it in reversed(listing.iterations)
                if it.state == "complete" and it.kind == "checkpoint"
            ),
            None,
        ),
    }


def archive_lines(data: dict[str, Any]) -> list[str]:
    """The text of :func:`inspect_archive`'s (or ``archive list``'s) data."""
    lines = [
        f"archive {data['root']}: {len(data['iterations'])} iteration(s), {data['complete']} "
        f"complete, {data['partial']} partial, {data['corrupt']} corrupt, {data['bytes']} bytes"
    ]
    for it in data["iterations"]:
        lines.append(
            f"  {it['name']}: {it['state']} {it['kind']} ({it['objects']} objects, "
            f"{it['bytes']} bytes)"
        )
        if it["reason"]:
            lines.append(f"      {it['reason']}")
    if data["other_entries"]:
        lines.append(f"  other entries: {', '.join(data['other_entries'])}")
    return lines
