"""What an archive upload says while it runs: one INFO line when it starts (files, bytes,
destination) and one every ``interval_s`` while it goes on (files and bytes done, rate), so a
long in-training upload is visible before its closing ``uploaded`` line. Logging only: it
touches no store and changes no outcome.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import attrs

__all__ = ["UploadProgress"]

log = logging.getLogger("statecraft")

_MIB = 2**20


@attrs.define
class UploadProgress:
    """The progress of uploading ``total_files`` files of ``total_bytes`` for ``where``.

    Attributes:
        where: what is uploaded (``iter_N`` of a root) and to where, as the lines name it.
        interval_s: seconds between progress lines (the first one comes after it too).
        clock: monotonic seconds (injected by tests).
    """

    where: str
    total_files: int
    total_bytes: int
    interval_s: float = 10.0
    clock: Callable[[], float] = time.monotonic
    files_done: int = 0
    bytes_done: int = 0
    started: float = 0.0
    last_said: float = 0.0

    def start(self) -> None:
        """Say the upload starts (INFO)."""
        self.started = self.last_said = self.clock()
        log.info(
            "uploading %s: %d file(s), %.1f MiB",
            self.where,
            self.total_files,
            self.total_bytes / _MIB,
        )

    def advance(self, size: int) -> None:
        """One more file is done (uploaded or found matching); say where the upload is when
        ``interval_s`` passed since the last line."""
        self.files_done += 1
        self.bytes_done += size
        now = self.clock()
        if now - self.last_said < self.interval_s:
            return
        self.last_said = now
        elapsed = max(now - self.started, 1e-9)
        log.info(
            "uploading %s: %d/%d file(s), %.1f/%.1f MiB (%.1f MiB/s)",
            self.where,
            self.files_done,
            self.total_files,
            self.bytes_done / _MIB,
            self.total_bytes / _MIB,
            self.bytes_done / _MIB / elapsed,
        )
