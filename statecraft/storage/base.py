"""The store interface every checkpoint binding is written against.

Two families implement it: :class:`~statecraft.storage.local.LocalStore` (POSIX files through a
:class:`~statecraft.storage.filesystem.Filesystem`) and
:class:`~statecraft.storage.objects.ObjectStore` (keys in a bucket through a
:class:`~statecraft.storage.objects.BucketClient`). Paths are relative POSIX names
(``iter_000000100/model.pt``); ``..`` and absolute names are refused.

Write protocol (who calls what):
    1. the binding opens a writer with :meth:`Store.open_atomic` (or calls
       :meth:`Store.write_atomic` / :meth:`Store.create_exclusive` for small payloads);
    2. the serializer (``torch.save``, JSON encoder) calls ``writer.write`` repeatedly;
    3. leaving the ``with`` block commits: the bytes become visible under the name only
       complete and durable, and the writer's :class:`FileRecord` holds the size and the
       digest (:mod:`statecraft.storage.digest`) computed from the bytes as they were
       written (never re-read);
    4. an exception inside the block aborts: nothing becomes visible, the old content (if
       any) is untouched.
"""

from __future__ import annotations

from typing import BinaryIO, Protocol

import attrs

from statecraft.errors import StoreError
from statecraft.storage.digest import Digest
from statecraft.storage.filesystem import FileStat

__all__ = ["AtomicWriter", "FileRecord", "Store", "check_relative_path"]


@attrs.frozen
class FileRecord:
    """What a committed write put under a name: exactly ``size`` bytes with ``digest``."""

    path: str
    size: int
    digest: Digest


def check_relative_path(path: str) -> str:
    """Return ``path`` if it is a clean relative POSIX name.

    Raises:
        StoreError: ``path`` is empty, absolute, or contains ``..`` / ``.`` segments.
    """
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise StoreError(
            f"store path {path!r} must be a relative name without '.', '..' or empty segments "
            "(e.g. 'iter_000000100/model.pt')"
        )
    return path


class AtomicWriter(Protocol):
    """A file being written; visible under its name only after a successful commit."""

    path: str
    record: FileRecord | None

    def write(self, data: bytes | bytearray | memoryview) -> int: ...

    def flush(self) -> None: ...

    def commit(self) -> FileRecord: ...

    def abort(self) -> None: ...

    def __enter__(self) -> AtomicWriter: ...

    def __exit__(self, exc_type, exc, tb) -> None: ...


class Store(Protocol):
    """Durable named blobs with atomic publication.

    Contract:
        - :meth:`open_atomic` / :meth:`write_atomic` publish complete bytes or nothing; a
          replace leaves either the old or the new bytes under the name, never a mix.
        - :meth:`create_exclusive` publishes only if the name is free; it never overwrites
          (``StoreConflictError`` otherwise).
        - Once a call returns, what it published survives process kill and power loss.
    """

    def describe(self) -> str:
        """Where this store points (``local:/path``, ``s3://bucket/prefix``)."""

    def open_atomic(self, path: str, *, exclusive: bool = False) -> AtomicWriter: ...

    def write_atomic(self, path: str, data: bytes) -> FileRecord: ...

    def create_exclusive(self, path: str, data: bytes) -> FileRecord: ...

    def read_bytes(self, path: str) -> bytes: ...

    def open_read(self, path: str) -> BinaryIO: ...

    def local_path(self, path: str) -> str | None:
        """An OS path to ``mmap`` the file from, when the store has one."""

    def stat(self, path: str) -> FileStat | None: ...

    def list(self, path: str = "") -> list[str]:
        """Names directly inside directory / prefix ``path`` (sorted; [] when absent)."""

    def make_dirs(self, path: str) -> None:
        """Create directory ``path`` and its parents durably (no-op on object stores)."""

    def make_durable(self, path: str) -> None:
        """Make durable everything directly in directory ``path`` (what a crashed process may
        have left unsynced) before anything relies on it."""

    def delete(self, path: str) -> None: ...

    def delete_tree(self, path: str) -> None:
        """Remove ``path`` and everything below it, files first, durably."""
