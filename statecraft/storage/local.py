"""``LocalStore``: durable, atomic files on a POSIX filesystem.

Every publication follows the durability discipline of DESIGN.md §4:

- **replace** (:meth:`LocalStore.write_atomic`): write a temporary name in the same directory,
  ``fsync`` it, ``rename`` it over the final name, ``fsync`` the directory. A crash at any point
  leaves the old bytes or the new bytes, never a mix, and the rename is durable once the call
  returns.
- **exclusive create** (:meth:`LocalStore.create_exclusive`): the same, but published with
  ``link(temp, final)``, which fails if the name exists, so it can never clobber; then the
  temporary name is unlinked and the directory fsynced. (An ``O_EXCL`` create of the final
  name would expose a torn file after a crash; ``link`` publishes only complete bytes.)
- **directories** are created one level at a time, each followed by an ``fsync`` of its parent.
- A failed ``fsync`` is never retried: the data is treated as lost, the temporary file is
  removed, and the error is raised.
- **deferred** (``open_atomic(path, defer_sync=True)``, the bulk files of a save): the commit's
  ``fsync`` + ``rename`` run behind the caller and the directory fsync waits for the store's
  next publication or removal, which settles them first; the exclusive create settles them
  alongside its own fsync, before its ``link`` (:mod:`statecraft.storage.deferred`).

Temporary names look like ``.model.pt.tmp-<pid>-<n>``; :meth:`LocalStore.sweep_temporaries`
removes leftovers of a crashed writer.
"""

from __future__ import annotations

import errno
import os
import posixpath
import re
from typing import BinaryIO

from statecraft.errors import DiskFullError, StoreConflictError, StoreError
from statecraft.storage.base import FileRecord, check_relative_path
from statecraft.storage.deferred import DeferredPublications
from statecraft.storage.digest import StreamDigest
from statecraft.storage.filesystem import FileStat, Filesystem, OsFilesystem

__all__ = ["LocalStore", "is_temporary_name"]

_TEMP_RE = re.compile(r"^\..+\.tmp-\d+-\d+$")
# Small writes (pickle opcodes, zip headers) are coalesced into one write call of up to
# _BUFFER_BYTES; writes of at least _DIRECT_BYTES (a tensor's storage) go straight through
# without a copy, hashed inline below OVERLAP_THRESHOLD (xxh3 runs at >10 GB/s) and on the
# digest's helper thread above it. The buffer stays below OVERLAP_THRESHOLD so it is hashed
# inline and reused without a copy.
_BUFFER_BYTES = 256 << 10
_DIRECT_BYTES = 64 << 10
_WRITEBACK_BYTES = 4 << 20  # start device writeback once this much is written since the last


def is_temporary_name(name: str) -> bool:
    """True for the temporary names ``LocalStore`` writers use."""
    return bool(_TEMP_RE.match(name))


class LocalAtomicWriter:
    """A file being written under a temporary name (see ``storage.base.AtomicWriter``)."""

    def __init__(
        self, store: LocalStore, path: str, *, exclusive: bool, defer_sync: bool = False
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
        view = memoryview(data).cast("B")
        size = len(view)
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

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        elif issubclass(exc_type, Exception):
            self.abort()
        # A BaseException (simulated crash, KeyboardInterrupt) leaves the temporary file for
        # sweep_temporaries: a dying process performs no further I/O.


class LocalStore:
    """Durable atomic files under a root directory.

    Args:
        root: absolute directory all paths are relative to; created durably if missing.
        fs: the filesystem to act through (default: the real OS).
    """

    def __init__(self, root: str | os.PathLike[str], *, fs: Filesystem | None = None) -> None:
        root = os.fspath(root)
        if not posixpath.isabs(root):
            raise StoreError(f"LocalStore root must be an absolute path, got {root!r}")
        self.root = posixpath.normpath(root)
        self.fs: Filesystem = fs if fs is not None else OsFilesystem()
        self.deferred = DeferredPublications(self.fs)
        self._token = 0
        self._ensure_root()

    def __repr__(self) -> str:
        return f"LocalStore({self.root!r}, fs={self.fs!r})"

    def describe(self) -> str:
        return f"local:{self.root}"

    def next_token(self) -> int:
        self._token += 1
        return self._token

    def abspath(self, path: str) -> str:
        """The absolute filesystem path of store path ``path``."""
        if path == "":
            return self.root
        return posixpath.join(self.root, check_relative_path(path))

    def _ensure_root(self) -> None:
        if self.fs.stat(self.root) is not None:
            return
        current = "/"
        for part in [p for p in self.root.split("/") if p]:
            parent, current = current, posixpath.join(current, part)
            if self.fs.stat(current) is None:
                try:
                    self.fs.mkdir(current)
                except FileExistsError:  # another process (rank) created it meanwhile
                    continue
                self.fs.fsync_dir(parent)

    # ----------------------------------------------------------------- writes
    def open_atomic(
        self, path: str, *, exclusive: bool = False, defer_sync: bool = False
    ) -> LocalAtomicWriter:
        """Start writing ``path``; commit by leaving the ``with`` block (see module doc).

        Args:
            exclusive: publish by ``link`` only if the name is free.
            defer_sync: (not with ``exclusive``) the commit returns once the bytes are
                written; they are durable under the name once :meth:`settle` (or the next
                publication or removal of this store) returns.
        """
        return LocalAtomicWriter(self, path, exclusive=exclusive, defer_sync=defer_sync)

    def settle(self, *, keep_errors: bool = True) -> None:
        """Make every deferred publication durable now (see
        :meth:`~statecraft.storage.deferred.DeferredPublications.settle`).

        Raises:
            StoreError: a deferred publication failed (with ``keep_errors``).
        """
        if self.deferred.pending:
            self.deferred.settle(keep_errors=keep_errors)

    def write_atomic(self, path: str, data: bytes) -> FileRecord:
        """Replace ``path`` with ``data`` atomically and durably."""
        with self.open_atomic(path) as writer:
            writer.write(data)
        return writer.record  # type: ignore[return-value]

    def create_exclusive(self, path: str, data: bytes) -> FileRecord:
        """Publish ``data`` under ``path`` only if the name is free.

        Raises:
            StoreConflictError: the name exists; nothing was changed.
        """
        with self.open_atomic(path, exclusive=True) as writer:
            writer.write(data)
        return writer.record  # type: ignore[return-value]

    def make_dirs(self, path: str, *, defer_sync: bool = False) -> None:
        """Create directory ``path`` (and parents) durably: each ``mkdir`` then its parent's
        ``fsync`` (``defer_sync``: the parents' fsyncs wait for the next settle)."""
        if not defer_sync:
            self.settle()
        current = ""
        for part in check_relative_path(path).split("/"):
            parent, current = current, f"{current}/{part}" if current else part
            stat = self.fs.stat(self.abspath(current))
            if stat is None:
                self.fs.mkdir(self.abspath(current))
                if defer_sync:
                    self.deferred.mark(self.abspath(parent))
                else:
                    self.fs.fsync_dir(self.abspath(parent))
            elif not stat.is_dir:
                raise StoreError(f"{self.describe()}: {current!r} exists and is not a directory")

    def delete(self, path: str) -> None:
        """Remove file ``path`` durably (missing is fine)."""
        self.settle(keep_errors=False)
        target = self.abspath(path)
        try:
            self.fs.unlink(target)
        except FileNotFoundError:
            return
        self.fs.fsync_dir(posixpath.dirname(target))

    def delete_tree(self, path: str) -> None:
        """Remove directory ``path`` and everything under it: files first, then the emptied
        directories, each directory fsynced, so no crash leaves a directory that looks complete
        but lacks files it had."""
        self.settle(keep_errors=False)
        target = self.abspath(path)
        stat = self.fs.stat(target)
        if stat is None:
            return
        if not stat.is_dir:
            self.delete(path)
            return
        for name in self.fs.listdir(target):
            child = f"{path}/{name}"
            if self.fs.stat(self.abspath(child)).is_dir:  # type: ignore[union-attr]
                self.delete_tree(child)
            else:
                self.fs.unlink(self.abspath(child))
        self.fs.fsync_dir(target)
        self.fs.rmdir(target)
        self.fs.fsync_dir(posixpath.dirname(target))

    def make_durable(self, path: str) -> None:
        """fsync every file directly in directory ``path``, the directory and its parent.

        A restarted process calls this before relying on what a crashed one left: after a
        process kill, renames and data may still sit unsynced in the page cache, and a power
        loss could still revert them.
        """
        self.settle()
        target = self.abspath(path)
        for name in self.fs.listdir(target):
            child = posixpath.join(target, name)
            stat = self.fs.stat(child)
            if stat is not None and stat.kind == "file":  # a FIFO would block the open
                self.fs.sync_path(child)
        self.fs.fsync_dir(target)
        self.fs.fsync_dir(posixpath.dirname(target))

    def sweep_temporaries(self, path: str = "") -> list[str]:
        """Remove leftover temporary files of crashed writers directly inside ``path``."""
        self.settle(keep_errors=False)
        removed = [n for n in self.list(path) if is_temporary_name(n)]
        if not removed:
            return []
        for name in removed:
            self.fs.unlink(self.abspath(f"{path}/{name}" if path else name))
        self.fs.fsync_dir(self.abspath(path))
        return removed

    # ------------------------------------------------------------------ reads
    def read_bytes(self, path: str) -> bytes:
        return self.fs.read(self.abspath(path))

    def open_read(self, path: str) -> BinaryIO:
        return self.fs.open_read(self.abspath(path))

    def local_path(self, path: str) -> str | None:
        return self.fs.real_path(self.abspath(path))

    def stat(self, path: str) -> FileStat | None:
        return self.fs.stat(self.abspath(path))

    def list(self, path: str = "") -> list[str]:
        target = self.abspath(path)
        stat = self.fs.stat(target)
        if stat is None or not stat.is_dir:
            return []
        return self.fs.listdir(target)
