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

import os
import posixpath
import re
from typing import BinaryIO

from statecraft.errors import StoreConflictError, StoreError
from statecraft.storage.base import FileRecord, check_range, check_relative_path
from statecraft.storage.deferred import DeferredPublications
from statecraft.storage.filesystem import FileStat, Filesystem, OsFilesystem
from statecraft.storage.local_writer import LocalAtomicWriter

__all__ = ["LocalAtomicWriter", "LocalStore", "is_temporary_name"]

_TEMP_RE = re.compile(r"^\..+\.tmp-\d+-\d+$")


def is_temporary_name(name: str) -> bool:
    """True for the temporary names ``LocalStore`` writers use."""
    return bool(_TEMP_RE.match(name))


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
        but lacks files it had. A symlink (to a directory or anything else) is removed itself,
        never followed: nothing outside ``path`` is ever deleted."""
        self.settle(keep_errors=False)
        target = self.abspath(path)
        stat = self.fs.stat(target)
        if stat is None:
            return
        if stat.link:
            self.fs.unlink(target)
            self.fs.fsync_dir(posixpath.dirname(target))
            return
        if not stat.is_dir:
            self.delete(path)
            return
        for name in self.fs.listdir(target):
            child = f"{path}/{name}"
            child_stat = self.fs.stat(self.abspath(child))
            if child_stat is not None and child_stat.is_dir and not child_stat.link:
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

    def rename_dir(self, src: str, dst: str) -> None:
        """Move directory ``src`` to the free name ``dst`` durably: ``rename``, then an
        ``fsync`` of ``src``'s parent (when it differs) and of ``dst``'s parent. Before the
        parent's fsync returns a power loss may revert the rename (``src`` is back, ``dst``
        absent); once it returns ``dst`` holds what ``src`` held. Everything under ``src``
        must already be durable (the rename moves names, it makes no bytes durable).

        Raises:
            StoreConflictError: ``dst`` exists (a file, or a directory, even an empty one);
                nothing was changed.
            FileNotFoundError: ``src`` is not a directory of this store.
        """
        self.settle()
        source, target = self.abspath(src), self.abspath(dst)
        stat = self.fs.stat(source)
        if stat is None or not stat.is_dir or stat.link:
            raise FileNotFoundError(f"{self.describe()}: {src!r} is not a directory to move")
        if self.fs.stat(target) is not None:
            raise StoreConflictError(
                f"{self.describe()}: {dst!r} exists; a directory is never moved over it"
            )
        self.fs.rename(source, target)
        # The source side first: a power loss between the two fsyncs may then lose the
        # directory (neither name durable), never leave it under both names.
        if posixpath.dirname(source) != posixpath.dirname(target):
            self.fs.fsync_dir(posixpath.dirname(source))
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

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """``length`` bytes from ``offset`` of ``path`` (one seek + read; fewer at its end)."""
        check_range(path, offset, length)
        with self.fs.open_read(self.abspath(path)) as reader:
            if length == 0:
                return b""
            reader.seek(offset)
            return reader.read(length)

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
