"""The fenced store: every publication or removal of a save passes a check first.

The save bindings (:mod:`statecraft.checkpoint.save.bindings`) wrap their store in a
:class:`FencedStore` whose fence re-reads the writer lease
(:mod:`statecraft.checkpoint.fencing.lease`)
and refuses to write into an iteration that holds a manifest. The check runs in the writer's
commit, after the bytes are written and before the rename, so the window in which another
writer could slip in is as small as the store allows (a rename cannot be conditional on a
POSIX filesystem; the ``flock`` of the lease is what keeps a second live writer out).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, BinaryIO

from statecraft.errors import StoreError, WriterLeaseError
from statecraft.storage.base import AtomicWriter, FileRecord, Store
from statecraft.storage.filesystem import FileStat

if TYPE_CHECKING:
    from statecraft.checkpoint.fencing.lease import WriterLease

__all__ = ["FencedStore", "discard_own_leftovers"]

log = logging.getLogger("statecraft.save")


class _FencedWriter:
    """An atomic writer whose commit first passes the fence (else it aborts)."""

    def __init__(self, inner: AtomicWriter, fence: Callable[[str], None]) -> None:
        self._inner = inner
        self._fence = fence
        self.path = inner.path
        self.record: FileRecord | None = None
        # A serializer calls write hundreds of times per file: bind the inner writer's
        # method itself, so the wrapper adds no call per chunk (only commit is fenced).
        self.write = inner.write  # type: ignore[method-assign]

    def write(self, data: bytes | bytearray | memoryview) -> int:
        return self._inner.write(data)

    def flush(self) -> None:
        self._inner.flush()

    def commit(self) -> FileRecord:
        try:
            self._fence(self.path)
        except BaseException:
            self._inner.abort()
            raise
        self.record = self._inner.commit()
        return self.record

    def abort(self) -> None:
        self._inner.abort()

    def __enter__(self) -> _FencedWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()


class FencedStore:
    """A :class:`Store` whose every publication (and removal) first calls ``fence(path)``,
    which raises to refuse it; reads and everything else pass through unchanged. The save
    bindings wrap their store in one (the lease check and the no-manifest check), so the
    check runs as late as possible: after the bytes are written, before the rename."""

    def __init__(self, inner: Store, fence: Callable[[str], None]) -> None:
        self.inner = inner
        self.fence = fence

    def __repr__(self) -> str:
        return f"FencedStore({self.inner!r})"

    def __getattr__(self, name: str) -> object:  # store extras (sweep_temporaries...)
        return getattr(self.inner, name)

    def describe(self) -> str:
        return self.inner.describe()

    def open_atomic(
        self, path: str, *, exclusive: bool = False, defer_sync: bool = False
    ) -> AtomicWriter:
        inner = self.inner.open_atomic(path, exclusive=exclusive, defer_sync=defer_sync)
        return _FencedWriter(inner, self.fence)

    def write_atomic(self, path: str, data: bytes) -> FileRecord:
        """A replace through :meth:`open_atomic` (the protocol's equivalent), so the fence
        runs after the bytes are written and just before the rename: a writer that lost its
        lease while writing the pointer cannot move it back over the new owner's."""
        with self.open_atomic(path) as writer:
            writer.write(data)
        if writer.record is None:  # pragma: no cover - a commit always sets it
            raise StoreError(f"{path}: the writer committed without a record")
        return writer.record

    def create_exclusive(self, path: str, data: bytes) -> FileRecord:
        """The fence, then the inner store's own exclusive create (a link on a POSIX store,
        ``If-None-Match`` on an object store), which can never replace another commit."""
        self.fence(path)
        return self.inner.create_exclusive(path, data)

    def read_bytes(self, path: str) -> bytes:
        return self.inner.read_bytes(path)

    def open_read(self, path: str) -> BinaryIO:
        return self.inner.open_read(path)

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        return self.inner.read_range(path, offset, length)

    def local_path(self, path: str) -> str | None:
        return self.inner.local_path(path)

    def stat(self, path: str) -> FileStat | None:
        return self.inner.stat(path)

    def list(self, path: str = "") -> list[str]:
        return self.inner.list(path)

    def make_dirs(self, path: str, *, defer_sync: bool = False) -> None:
        self.inner.make_dirs(path, defer_sync=defer_sync)

    def make_durable(self, path: str) -> None:
        self.inner.make_durable(path)

    def delete(self, path: str) -> None:
        self.fence(path)
        self.inner.delete(path)

    def delete_tree(self, path: str) -> None:
        self.fence(path)
        self.inner.delete_tree(path)


def discard_own_leftovers(
    store: Store, iter_dir: str, *, conflict: bool, lease: WriterLease | None, label: str
) -> None:
    """After a failed write of ``iter_dir``: remove its files, a manifest the failed save
    published itself included (a failed fsync may never make it durable). Kept only when
    another writer is in the way: ``conflict`` (its commit met another writer's) or a lease
    taken over; ``label`` names the directory in the warning."""
    if conflict:
        log.warning("%s belongs to another writer; it is kept", label)
        return
    if lease is not None:
        try:
            lease.check()
        except WriterLeaseError:
            log.warning("the writer lease was taken over; %s is left to its owner", label)
            return
    store.delete_tree(iter_dir)
