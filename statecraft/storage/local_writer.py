"""``LocalAtomicWriter``: one file of a :class:`~statecraft.storage.local.LocalStore` being
written under a temporary name, published on commit (replace, exclusive create, or deferred:
see the module doc of :mod:`statecraft.storage.local`)."""

from __future__ import annotations

import errno
import os
import posixpath
from types import TracebackType
from typing import Protocol

from statecraft.errors import DiskFullError, StoreConflictError, StoreError
from statecraft.storage.base import FileRecord, check_relative_path
from statecraft.storage.deferred import DeferredPublications
from statecraft.storage.digest import StreamDigest
from statecraft.storage.filesystem import Filesystem

__all__ = ["LocalAtomicWriter", "WriterHome"]

# Small writes (pickle opcodes, zip headers) are coalesced into one write call of up to
# _BUFFER_BYTES; writes of at least _DIRECT_BYTES (a tensor's storage) go straight through
# without a copy, hashed inline below OVERLAP_THRESHOLD (xxh3 runs at >10 GB/s) and on the
# digest's helper thread above it. The buffer stays below OVERLAP_THRESHOLD so it is hashed
# inline and reused without a copy.
_BUFFER_BYTES = 256 << 10
_DIRECT_BYTES = 64 << 10
_WRITEBACK_BYTES = 4 << 20  # start device writeback once this much is written since the last


class WriterHome(Protocol):
    """What a :class:`LocalAtomicWriter` needs of the store it writes into: a
    :class:`~statecraft.storage.local.LocalStore` (which builds its writers here, so this
    module names the parts it uses instead of importing the store)."""

    fs: Filesystem
    deferred: DeferredPublications

    def describe(self) -> str:
        """Where the store points, for messages."""

    def abspath(self, path: str) -> str:
        """The absolute filesystem path of store path ``path``."""

    def next_token(self) -> int:
        """A number not handed out before, for a fresh temporary name."""


class LocalAtomicWriter:
    """A file being written under a temporary name (see ``storage.base.AtomicWriter``)."""

    def __init__(
        self, store: WriterHome, path: str, *, exclusive: bool, defer_sync: bool = False
    ) -> None:
        self.path = check_relative_path(path)
        self.record: FileRecord | None = None
        self._store = store
        self._fs = store.fs
        self._exclusive = exclusive
        self._defer = defer_sync and not exclusive
        self._final = store.abspath(path)
        directory, name = posixpath.split(self._final)
        self._dir = directory
        self._digest = StreamDigest()
        self._buffer = bytearray()
        self._size = 0
        self._flushed = 0  # bytes handed to the OS so far
        self._writeback_from = 0  # start of the range not yet scheduled for writeback
        self._failed: StoreError | None = None  # the write/fsync failure, raised again on write
        while True:  # a crashed writer's leftover may hold the name: take the next one
            self._temp = posixpath.join(
                directory, f".{name}.tmp-{os.getpid()}-{store.next_token()}"
            )
            try:
                self._handle: int | None = self._fs.open_write(self._temp, exclusive=True)
                break
            except FileExistsError:
                continue

    def __repr__(self) -> str:
        return f"LocalAtomicWriter({self.path!r}, written={self._size})"

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Append ``data``; returns its length."""
        if self._handle is None:
            if self._failed is not None:  # a serializer writing on after the failure
                raise self._failed
            raise StoreError(f"{self.path}: write after commit or abort")
        size = data.nbytes if isinstance(data, memoryview) else len(data)
        if size < _DIRECT_BYTES and len(self._buffer) + size < _BUFFER_BYTES:
            self._buffer += data  # the common case (pickle opcodes, zip headers): no syscall
            self._size += size
            return size
        view = memoryview(data).cast("B")
        try:
            if size >= _DIRECT_BYTES:
                self._flush_buffer()
                self._digest.start(view)
                try:
                    self._fs.write(self._handle, view)
                    self._flushed += size
                    self._start_writeback()
                finally:
                    self._digest.join()
            else:
                self._buffer += view
                if len(self._buffer) >= _BUFFER_BYTES:
                    self._flush_buffer()
        except OSError as exc:
            self.abort()
            raise self._failure(exc, pending=size) from exc
        self._size += size
        return size

    def _failure(self, exc: OSError, *, pending: int) -> StoreError:
        """The error for a failed write or fsync (after :meth:`abort`): a
        :class:`~statecraft.errors.DiskFullError` for ``ENOSPC``, with the bytes this file
        needed so far (written plus ``pending``) and what is free now."""
        if exc.errno == errno.ENOSPC:
            self._failed = DiskFullError(
                self._final,
                bytes_needed=self._size + pending,
                bytes_free=self._fs.free_bytes(self._dir),
            )
        else:
            self._failed = StoreError(
                f"{self._store.describe()}: writing {self.path!r} failed ({exc}); nothing was "
                "published and the previous content is untouched. Fix the disk, then retry "
                "the save"
            )
        return self._failed

    def flush(self) -> None:
        """No-op: bytes reach the OS in large chunks and become durable at commit."""

    def _flush_buffer(self) -> None:
        if self._buffer and self._handle is not None:
            with memoryview(self._buffer) as chunk:  # hashed inline: below OVERLAP_THRESHOLD
                self._digest.start(chunk)
                self._fs.write(self._handle, chunk)
                self._flushed += len(chunk)
            self._buffer.clear()
            self._start_writeback()

    def _start_writeback(self) -> None:
        """Let the device work on what is written while the next chunk is hashed, so the
        commit's fsync does not start the whole flush only after the last byte."""
        if self._handle is not None and self._flushed - self._writeback_from >= _WRITEBACK_BYTES:
            self._fs.start_writeback(
                self._handle, self._writeback_from, self._flushed - self._writeback_from
            )
            self._writeback_from = self._flushed

    def commit(self) -> FileRecord:
        """Make the bytes durable and publish them under the final name (a deferred writer:
        hand that over to the store's settle, see the module doc, and return the record).

        Every deferred publication of the store is settled first, while this file's own
        temporary is fsynced, and before the ``link`` / ``rename``.

        Raises:
            StoreConflictError: exclusive create and the name already exists (nothing changed).
            StoreError: a write or fsync failed (this file's or a deferred one's); nothing was
                published.
        """
        handle = self._handle
        if handle is None:
            raise StoreError(f"{self.path}: commit after commit or abort")
        try:
            self._flush_buffer()
            if self._defer:
                self._handle = None
                self.record = FileRecord(self.path, self._size, self._digest.digest())
                self._store.deferred.submit(lambda: self._publish_deferred(handle), self._dir)
                return self.record
            self._store.deferred.settle(alongside=lambda: self._fs.fsync(handle))
        except OSError as exc:
            self.abort()
            if isinstance(exc, StoreError):  # a deferred publication's failure, as it was
                raise
            raise self._failure(exc, pending=0) from exc
        self._fs.close(handle)
        self._handle = None
        try:
            if self._exclusive:
                try:
                    self._fs.link(self._temp, self._final)
                except FileExistsError:
                    self._remove_temp()
                    raise StoreConflictError(
                        f"{self._store.describe()}: {self.path!r} already exists; an exclusive "
                        "create never overwrites. Inspect the existing file before deciding what "
                        "to do"
                    ) from None
                self._fs.unlink(self._temp)
            else:
                self._fs.rename(self._temp, self._final)
            self._fs.fsync_dir(self._dir)
        except StoreConflictError:
            raise
        except OSError as exc:
            raise StoreError(
                f"{self._store.describe()}: publishing {self.path!r} failed ({exc}); the name "
                "may hold the old or the new bytes, never a mix, and the new bytes are not "
                "known to be durable. Retry the save"
            ) from exc
        self.record = FileRecord(self.path, self._size, self._digest.digest())
        return self.record

    def _publish_deferred(self, handle: int) -> None:
        """The handed-over part of a deferred commit: fsync, close, rename (no directory
        fsync: the settle does one per directory).

        Raises:
            StoreError: the fsync or the rename failed; the temporary is removed.
        """
        try:
            self._fs.fsync(handle)
        except OSError as exc:
            try:
                self._fs.close(handle)
            except OSError:
                pass
            self._remove_temp()
            raise self._failure(exc, pending=0) from exc
        self._fs.close(handle)
        try:
            self._fs.rename(self._temp, self._final)
        except OSError as exc:
            self._remove_temp()
            raise StoreError(
                f"{self._store.describe()}: publishing {self.path!r} failed ({exc}); nothing "
                "was published under that name. Retry the save"
            ) from exc

    def abort(self) -> None:
        """Discard the temporary file (best effort); the final name is untouched."""
        if self._handle is not None:
            try:
                self._fs.close(self._handle)
            except OSError:
                pass
            self._handle = None
        self._remove_temp()

    def _remove_temp(self) -> None:
        try:
            self._fs.unlink(self._temp)
        except OSError:
            pass

    def __enter__(self) -> LocalAtomicWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.commit()
        elif issubclass(exc_type, Exception):
            self.abort()
        # A BaseException (simulated crash, KeyboardInterrupt) leaves the temporary file for
        # sweep_temporaries: a dying process performs no further I/O.
