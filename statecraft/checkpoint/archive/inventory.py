"""What an archive holds: one :class:`ArchiveEntry` per file, and which local files count.

A directory's archived files are every regular file under it, recursively, except the local
receipts (``.uploaded`` and its ``.uploaded.tmp`` temporary) and ``LocalStore`` temporaries
(``.<name>.tmp-<pid>-<n>``): a receipt describes the archive, it is never part of it, and a
half-written temporary is never mistaken for either. Paths are ``/``-separated and relative to
the archived directory; the order is sorted with the directory's commit record (the manifest)
last, the order uploads use so that a remote manifest implies every file before it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from statecraft.storage.base import Store
from statecraft.storage.digest import file_digests
from statecraft.storage.local import is_temporary_name
from statecraft.storage.objects import RemoteObject

__all__ = [
    "RECEIPT_NAMES",
    "ArchiveEntry",
    "archived_files",
    "is_receipt_name",
    "sha256_of",
    "upload_order",
]

#: local receipt names, never archived, never read as part of an inventory
RECEIPT_NAMES = frozenset({".uploaded", ".uploaded.tmp"})


def is_receipt_name(name: str) -> bool:
    """True for a receipt or any temporary: names an archive never includes."""
    return name in RECEIPT_NAMES or is_temporary_name(name) or name.startswith(".uploaded.tmp")


@attrs.frozen
class ArchiveEntry:
    """One archived file.

    Attributes:
        path: relative to the archived directory, ``/``-separated (``model.pt``).
        size: bytes.
        sha256: lowercase hex of its bytes when the archive path hashed it, else ``None``
            (full-checkpoint bulk is not hashed on the training path; the marker then binds
            the destination and the size only).
    """

    path: str
    size: int
    sha256: str | None = None

    def matches(self, remote: RemoteObject) -> bool:
        """True when ``remote`` holds this entry: the same size, and the same stored sha256
        when the entry records one (an unhashed entry is matched by size only)."""
        return remote.size == self.size and (self.sha256 is None or remote.sha256 == self.sha256)


def archived_files(store: Store, root: str) -> list[tuple[str, int]]:
    """``(relative path, size)`` of every archived file under ``root`` of ``store``, sorted.

    Raises:
        FileNotFoundError: ``root`` is not a directory of ``store``.
    """
    stat = store.stat(root)
    if stat is None or not stat.is_dir:
        raise FileNotFoundError(f"{store.describe()}/{root}: no such directory to archive")
    found: list[tuple[str, int]] = []
    pending = [""]
    while pending:
        relative = pending.pop()
        base = f"{root}/{relative}" if relative else root
        for name in store.list(base):
            if is_receipt_name(name):
                continue
            child = f"{relative}/{name}" if relative else name
            info = store.stat(f"{root}/{child}")
            if info is None:
                continue
            if info.is_dir:
                pending.append(child)
            else:
                found.append((child, info.size))
    return sorted(found)


def upload_order(paths: Iterable[str], *, last: Sequence[str]) -> list[str]:
    """``paths`` sorted, with the names in ``last`` moved to the end in that order (the
    commit record of a directory goes last)."""
    every = set(paths)
    rest = sorted(p for p in every if p not in last)
    return rest + [p for p in last if p in every]


def sha256_of(store: Store, path: str) -> str:
    """The hex sha256 of stored file ``path`` (mmap and a read-ahead thread when local)."""
    return file_digests(store, path, ("sha256",))["sha256"].value
