"""The parts a run's full saves use with ``checkpoint_format=incremental``: the writer made
per save, and the collection of unreferenced blobs the write job runs after retention
(fenced by the run's writer lease)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from statecraft.checkpoint.fencing.lease import WriterLease
from statecraft.checkpoint.incremental.gc_bindings import GcReport, collect_blobs
from statecraft.storage.base import Store
from statecraft.writers.incremental import DurableBlobs, IncrementalWriter

__all__ = ["incremental_save_parts"]


def _collect(store: Store, *, lease: WriterLease | None) -> GcReport:
    return collect_blobs(store, fence=None if lease is None else lease.check)


def incremental_save_parts(
    lease: WriterLease | None,
) -> tuple[Callable[[], IncrementalWriter], Callable[[Store], Any]]:
    """``(writer, collect)`` for a :class:`~statecraft.checkpoint.save.saving.SaveTarget`
    (the writers share which blobs this process wrote durably)."""
    durable = DurableBlobs()
    return functools.partial(IncrementalWriter, durable=durable), functools.partial(
        _collect, lease=lease
    )
