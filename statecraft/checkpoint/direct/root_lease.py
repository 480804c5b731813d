"""The facade's writer lease under ``checkpoint_store.backend=object_store``: the local attempt's
lease plus the direct root's object-store lease, checked and released together."""

from __future__ import annotations

from typing import Any

__all__ = ["ObjectRootLease"]


class ObjectRootLease:
    """The facade's writer lease under ``backend=object_store`` (rank 0): the local attempt's
    :class:`~statecraft.checkpoint.fencing.lease.WriterLease` (the run directory, resolved config
    and
    RUN_TS stay local) plus the direct root's ``ObjectStoreLease``. :meth:`check` checks both;
    :meth:`release` releases the object lease first (the next job on the root may start at
    once), then the local one."""

    def __init__(self, local: Any, remote: Any) -> None:
        self.local = local
        self.remote = remote

    @property
    def where(self) -> str:
        return f"{self.local.where} and {self.remote.where}"

    def check(self) -> None:
        self.local.check()
        self.remote.check()

    def release(self) -> None:
        try:
            self.remote.release()
        finally:
            self.local.release()
