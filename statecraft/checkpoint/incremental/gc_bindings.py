"""The effect bindings of the ``incremental_gc`` machine (``machines/incremental_gc.toml``):
the collection of the blobs no iteration on disk references.

Mark, then sweep: ``mark_live`` reads every iteration's references from disk (the manifests
of committed iterations, the component files of uncommitted ones:
:func:`~statecraft.checkpoint.incremental.references.referenced_blobs`), never a count kept
in memory; ``sweep_unreferenced`` re-reads them (a reference that appeared since the mark is
honoured) and deletes every blob under ``blobs/`` that none names, plus blob temporaries an
interrupted write left. A kill anywhere leaves every referenced blob in place; what it
leaves behind is garbage the next collection removes. See ``specs/incremental_gc.toml``,
proven by ``statecraft crashcheck --machine incremental_gc``.

::

    report = collect_blobs(store)           # after retention, in the save's write job
    report.deleted, report.freed_bytes
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

import attrs

from statecraft.checkpoint.incremental.references import referenced_blobs
from statecraft.engine import Bindings
from statecraft.engine.tagging import Role, collect_bindings, effect, observer
from statecraft.storage.base import Store
from statecraft.storage.local import is_temporary_name
from statecraft.writers.blobs import BLOB_DIR

__all__ = ["GcContext", "GcReport", "collect_blobs", "incremental_gc_bindings"]

log = logging.getLogger("statecraft.incremental")


@attrs.define
class GcContext:
    """One collection over ``store`` (a checkpoints root).

    Attributes:
        fence: called before the first deletion (the writer lease check: a writer whose
            lease was taken over deletes nothing); ``None``: no fence (the harness).
        live: the blobs the mark found referenced.
        deleted / freed_bytes: blobs (and temporaries) this run deleted, and their bytes.
    """

    store: Store
    fence: Callable[[], Any] | None = None
    live: frozenset[str] = frozenset()
    deleted: int = 0
    freed_bytes: int = 0


@attrs.frozen
class GcReport:
    """What one collection did: blobs kept (referenced) and deleted, and bytes freed."""

    kept: int
    deleted: int
    freed_bytes: int


def _blob_names(store: Store) -> list[str]:
    return store.list(BLOB_DIR)


def _unreferenced(ctx: GcContext, live: frozenset[str]) -> list[str]:
    return [n for n in _blob_names(ctx.store) if n not in live]


@observer()
def observe_incremental_gc(ctx: GcContext) -> str:
    """``clean`` (every blob is referenced) or ``garbage``. Reads only."""
    return "garbage" if _unreferenced(ctx, referenced_blobs(ctx.store).live) else "clean"


@effect(role=Role.COORDINATOR)
def mark_live(ctx: GcContext) -> None:
    """Read every iteration's references from disk (no store write).

    Raises:
        CheckpointCorruptError: a committed manifest is malformed: nothing is swept.
    """
    ctx.live = referenced_blobs(ctx.store).live


@effect(role=Role.COORDINATOR)
def sweep_unreferenced(ctx: GcContext) -> None:
    """Check the fence, re-read the references (the union with the mark is kept), then
    delete every blob and blob temporary no iteration references, each removal durable.

    Raises:
        WriterLeaseError (from the fence): another writer owns the attempt; nothing deleted.
        CheckpointCorruptError: a committed manifest is malformed: nothing is deleted.
    """
    if ctx.fence is not None:
        ctx.fence()
    live = ctx.live | referenced_blobs(ctx.store).live
    for name in _unreferenced(ctx, live):
        if len(name) != 32 and not is_temporary_name(name):
            continue  # not a blob this format wrote: never touched
        path = f"{BLOB_DIR}/{name}"
        there = ctx.store.stat(path)
        ctx.store.delete(path)
        ctx.deleted += 1
        ctx.freed_bytes += there.size if there is not None else 0


def collect_blobs(
    store: Store, *, fence: Callable[[], Any] | None = None, machine: Any = None
) -> GcReport:
    """Run the ``incremental_gc`` machine over ``store`` (a checkpoints root).

    Args:
        fence: checked before the first deletion (raise to refuse).
        machine: the ``incremental_gc`` machine (tests pass broken ones; default: shipped).

    Raises:
        CheckpointCorruptError: a committed manifest is malformed: nothing was deleted.
        WriterLeaseError: another writer owns the attempt: nothing was deleted.
        StoreError: a deletion failed; every referenced blob is still there.
    """
    from statecraft.checkpoint.kernel.machines import shipped_machine

    ctx = GcContext(store, fence=fence)
    (machine or shipped_machine("incremental_gc")).run(ctx).raise_for_failure()
    if ctx.deleted:
        log.info("collected %d unreferenced blobs (%d bytes)", ctx.deleted, ctx.freed_bytes)
    return GcReport(kept=len(ctx.live), deleted=ctx.deleted, freed_bytes=ctx.freed_bytes)


def incremental_gc_bindings() -> Bindings:
    """The bindings of this module's table, collected from the tags above."""
    return collect_bindings(sys.modules[__name__])
