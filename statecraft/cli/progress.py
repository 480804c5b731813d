"""A plain text progress bar on stderr for long transfers (``archive``, ``objects``).

One line, rewritten in place after each file: ``<label>: 3/12 files, 41.0/96.0 MiB  model.pt``.
It is on only when stderr is a terminal and ``--quiet``/``--json`` were not given, so logs,
pipes and JSON output never hold it.
"""

from __future__ import annotations

import sys
from typing import TextIO

__all__ = ["Progress"]

_MIB = 1024 * 1024


class Progress:
    """Counts files and bytes; draws when enabled.

    Args:
        label: what is being transferred (``fetch``, ``download``...).
        total_files / total_bytes: known totals (``None``: shown as counts only).
        enabled: draw at all (default: stderr is a TTY).
    """

    def __init__(
        self,
        label: str,
        *,
        total_files: int | None = None,
        total_bytes: int | None = None,
        enabled: bool | None = None,
        stream: TextIO | None = None,
    ) -> None:
        self.label = label
        self.total_files = total_files
        self.total_bytes = total_bytes
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.files = 0
        self.bytes = 0
        self._drawn = False

    def __call__(self, path: str, size: int) -> None:
        """One file (``path``, ``size`` bytes) landed."""
        self.files += 1
        self.bytes += size
        if not self.enabled:
            return
        files = f"{self.files}/{self.total_files}" if self.total_files else str(self.files)
        mib = self.bytes / _MIB
        amount = (
            f"{mib:.1f}/{self.total_bytes / _MIB:.1f} MiB" if self.total_bytes else f"{mib:.1f} MiB"
        )
        self.stream.write(f"\r{self.label}: {files} files, {amount}  {path[-40:]}\033[K")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        """End the line (when anything was drawn)."""
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
