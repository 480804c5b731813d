"""Fetch one archived iteration: :func:`fetch_archive`, the one entry point (``statecraft
archive fetch`` calls it). It checks the destination and the name, runs the ``fetch`` machine
(``machines/fetch.toml``; its effects are :mod:`.fetch_bindings`) and reports what was placed.
"""

from __future__ import annotations

import re
import time
from typing import Any

from statecraft.checkpoint.archive.fetch_context import FetchContext, FetchReport
from statecraft.checkpoint.kernel.machines import shipped_machine
from statecraft.errors import ArchiveError
from statecraft.storage.base import Store
from statecraft.storage.local import LocalStore
from statecraft.storage.objects import ArchiveBucket

__all__ = ["fetch_archive"]

_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")


def fetch_archive(
    bucket: ArchiveBucket,
    remote_prefix: str,
    dst: Store,
    name: str,
    *,
    progress: Any = None,
) -> FetchReport:
    """Fetch the archived iteration at ``remote_prefix`` of ``bucket`` to ``dst/<name>``.

    Args:
        remote_prefix: ``<...>/iter_N`` of an artifact or a full checkpoint.
        dst: a :class:`LocalStore` (the directory that receives ``<name>``).
        name: one path component (``iter_000000100``).
        progress: optional ``(path, size)`` callback after each payload.

    Returns:
        what was placed.

    Raises:
        FetchDestinationExistsError: ``dst/<name>`` exists (untouched).
        ArchiveError: no commit record, a malformed record, a payload that does not prove;
            nothing was placed.
        ObjectRequestError: the bucket failed after its retries; nothing was placed.
    """
    if not isinstance(dst, LocalStore):
        raise ArchiveError(
            dst.describe(), "is not a local directory", "Fetch into a local --dst directory."
        )
    if not _NAME_RE.match(name) or name in (".", ".."):
        raise ArchiveError(
            f"{dst.root}/{name}",
            "is not a plain directory name to fetch into",
            "Use one path component such as iter_000000100.",
        )
    started = time.monotonic()
    ctx = FetchContext(bucket=bucket, remote_prefix=remote_prefix, dst=dst, name=name)
    ctx.progress = progress
    shipped_machine("fetch").recover(ctx).raise_for_failure()
    return FetchReport(
        kind=ctx.kind,
        files=len(ctx.entries) + 1,
        bytes_fetched=ctx.bytes_fetched,
        seconds=time.monotonic() - started,
        path=ctx.target,
    )
