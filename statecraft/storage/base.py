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

from types import TracebackType
from typing import Any, BinaryIO, Protocol, runtime_checkable

import attrs

from statecraft.errors import StoreError
from statecraft.storage.digest import Digest
from statecraft.storage.filesystem import FileStat

__all__ = [
    "AtomicWriter",
    "FileRecord",
    "Store",
    "check_range",
    "check_relative_path",
    "missing_members",
    "protocol_members",
]


@attrs.frozen
class FileRecord:
    """What a committed write put under a name: exactly ``size`` bytes with ``digest``."""

    path: str
    size: int
    digest: Digest


def check_range(path: str, offset: int, length: int) -> None:
    """Refuse a negative ``offset`` / ``length`` for :meth:`Store.read_range` of ``path``.

    Raises:
        ValueError: either is negative.
    """
    if offset < 0 or length < 0:
        raise ValueError(
            f"read_range({path!r}, {offset}, {length}): offset and length must be >= 0"
        )


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


@runtime_checkable
class AtomicWriter(Protocol):
    """A file being written; visible under its name only after a successful commit."""

    path: str
    record: FileRecord | None

    def write(self, data: bytes | bytearray | memoryview) -> int: ...

    def flush(self) -> None: ...

    def commit(self) -> FileRecord: ...

    def abort(self) -> None: ...

    def __enter__(self) -> AtomicWriter: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


@runtime_checkable
class Store(Protocol):
    """Durable named blobs with atomic publication.

    Contract:
        - :meth:`open_atomic` / :meth:`write_atomic` publish complete bytes or nothing; a
          replace leaves either the old or the new bytes under the name, never a mix.
        - :meth:`create_exclusive` publishes only if the name is free; it never overwrites
          (``StoreConflictError`` otherwise).
        - Once a call returns, what it published survives process kill and power loss.
        - Every ``path`` is a clean relative POSIX name (:func:`check_relative_path`); any
          other raises ``StoreError`` before anything is touched.
        - Reads never change bytes or names.

    Implementations: :class:`~statecraft.storage.local.LocalStore` and
    :class:`~statecraft.storage.objects.ObjectStore`; :func:`missing_members` checks one
    (``tests/test_protocols.py`` runs it on each).
    """

    def describe(self) -> str:
        """Where this store points (``local:/path``, ``s3://bucket/prefix``), for messages."""

    def open_atomic(
        self, path: str, *, exclusive: bool = False, defer_sync: bool = False
    ) -> AtomicWriter:
        """A writer for ``path``; leaving its ``with`` block publishes (see the module doc).

        Args:
            exclusive: publish only if ``path`` is free (the commit of a manifest).
            defer_sync: (not with ``exclusive``) the commit may return before the bytes are
                durable under the name; they are once the store's next publication or
                removal returns (each settles deferred ones first; an exclusive create
                before it links). The bulk files of a save use it, so their fsyncs overlap
                the next file's serialization and share one directory fsync. Stores whose
                publications are durable when they return ignore it.

        Raises:
            StoreError: (on commit) the bytes could not be made durable; nothing was published.
            StoreConflictError: (on commit, ``exclusive``) the name exists; it is untouched.
        """

    def write_atomic(self, path: str, data: bytes) -> FileRecord:
        """Replace ``path`` with ``data`` atomically and durably; returns size and digest.

        Raises:
            StoreError: not durable; the old content (if any) is still in place.
        """

    def create_exclusive(self, path: str, data: bytes) -> FileRecord:
        """Publish ``data`` under ``path`` only if the name is free, durably.

        Raises:
            StoreConflictError: the name exists; nothing was changed (never a replace).
            StoreError: not durable; nothing was published.
        """

    def read_bytes(self, path: str) -> bytes:
        """The whole content of file ``path``.

        Raises:
            FileNotFoundError: no such file.
        """

    def open_read(self, path: str) -> BinaryIO:
        """A binary reader of file ``path`` (the caller closes it).

        Raises:
            FileNotFoundError: no such file.
        """

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """``length`` bytes of file ``path`` from byte ``offset`` (a DCP item's slice of a
        shard: one seek locally, one ranged GET remotely). Fewer bytes come back only when
        the file ends first, so a caller that needs exactly ``length`` checks the size.

        Raises:
            ValueError: a negative ``offset`` or ``length``.
            FileNotFoundError: no such file.
        """

    def local_path(self, path: str) -> str | None:
        """An OS path to ``mmap`` the file from, when the store has one (``None`` for object
        stores and simulated filesystems). Never raises for a missing file."""

    def stat(self, path: str) -> FileStat | None:
        """Size and kind of ``path``; ``None`` when it does not exist (never raises for that).
        An object store reports a prefix with keys below it as a directory of size 0."""

    def list(self, path: str = "") -> list[str]:
        """Names directly inside directory / prefix ``path`` (sorted; [] when absent)."""

    def make_dirs(self, path: str, *, defer_sync: bool = False) -> None:
        """Create directory ``path`` and its parents durably (no-op on object stores;
        ``defer_sync``: durable once the store's next publication returns).

        Raises:
            StoreError: a component exists and is not a directory.
            OSError: the filesystem refused (an injected fault included).
        """

    def make_durable(self, path: str) -> None:
        """Make durable everything directly in directory ``path`` (what a crashed process may
        have left unsynced) before anything relies on it (no-op on object stores)."""

    def delete(self, path: str) -> None:
        """Remove file ``path`` durably; a missing file is fine."""

    def delete_tree(self, path: str) -> None:
        """Remove ``path`` and everything below it, files first, durably, so no crash leaves
        a directory that looks complete but lacks files it had; missing is fine."""


def protocol_members(protocol: type) -> tuple[str, ...]:
    """The members (methods and attributes) a ``typing.Protocol`` class declares, sorted."""
    names: set[str] = set()
    for klass in protocol.__mro__:
        if klass in (object, Protocol) or not getattr(klass, "_is_protocol", False):
            continue
        names.update(n for n in vars(klass) if not n.startswith("_"))
        names.update(getattr(klass, "__annotations__", {}))
    names.update(n for n in ("__enter__", "__exit__") if hasattr(protocol, n))
    return tuple(sorted(names))


def missing_members(obj: Any, protocol: type) -> list[str]:
    """The members of ``protocol`` that ``obj`` lacks (a method that is not callable counts
    as missing); empty when ``obj`` satisfies it structurally. Unlike ``isinstance`` on a
    runtime-checkable protocol it names what is missing."""
    missing = []
    declared = vars(protocol)
    for name in protocol_members(protocol):
        absent = not hasattr(obj, name)
        if absent or (callable(declared.get(name)) and not callable(getattr(obj, name))):
            missing.append(name)
    return missing
