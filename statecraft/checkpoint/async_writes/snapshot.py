"""What a staging copy is: :class:`Snapshot`, the staged payloads of one async save, and
:class:`SnapshotUnsupported`, why a payload could not be staged.

:class:`~statecraft.checkpoint.async_writes.staging.StagingBuffers` makes snapshots;
:func:`~statecraft.checkpoint.async_writes.isolation.isolation_problem` checks them. Both
build on these records, neither on the other's module.
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["Snapshot", "SnapshotUnsupported"]


class SnapshotUnsupported(Exception):
    """A payload holds something the staging copy cannot take; ``reason`` names its key path
    and why, in one line (``optim.pt["state"][0]["exp_avg"] is a sparse tensor``). Not an
    error to report: the caller writes that save synchronously and logs the reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@attrs.frozen
class Snapshot:
    """The staged copy of one save's payloads.

    Attributes:
        payloads: file name -> the copied payload (containers rebuilt, tensors in staging
            buffers, other leaves deep-copied); what the write job serializes.
        tensor_bytes: bytes of tensor storage in the copy (each shared storage once).
        allocated_bytes: bytes of staging buffers this snapshot had to allocate (0 from the
            second save on, when no shape, dtype or layout changed).
        seconds: wall time of the copy on the calling thread.
    """

    payloads: dict[str, Any]
    tensor_bytes: int
    allocated_bytes: int
    seconds: float
