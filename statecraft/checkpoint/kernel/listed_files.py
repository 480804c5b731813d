"""The one check that the files a commit record lists are the files on the store.

A full checkpoint's manifest, an artifact manifest and a unit's commit manifest each list
files with their size and digest (:class:`~statecraft.checkpoint.kernel.manifest.FileEntry`).
A listed file is what its record says when it is present, a regular file (a symlink, FIFO,
device or directory is never followed or read), of the recorded size and, when it is hashed
(level ``"digest"`` of :data:`~statecraft.checkpoint.kernel.verify.LEVELS`), of the recorded
digest, computed with the recorded algorithm. The first difference is a :class:`FileMismatch`
value; each verifier turns it into its own refusal or verdict.

Example::

    mismatch = first_listed_mismatch(store, "iter_000000100", manifest.files,
                                     hashed=lambda name: True)
    if mismatch is not None:
        raise mismatch.error("the manifest", fixes=(incomplete, replace_it, changed))
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, MutableMapping
from typing import Literal

import attrs

from statecraft.checkpoint.kernel.manifest import FileEntry
from statecraft.errors import CheckpointCorruptError
from statecraft.storage.base import Store
from statecraft.storage.digest import Digest, file_digest

__all__ = [
    "FileMismatch",
    "MismatchKind",
    "first_listed_mismatch",
    "listed_file_mismatch",
    "read_listed_file",
]

MismatchKind = Literal["missing", "special", "size", "digest"]


@attrs.frozen
class FileMismatch:
    """How one listed file differs from its record.

    Attributes:
        name: the file as its record lists it (relative to the record's directory).
        where: ``<store>/<path>``, for messages.
        kind: ``missing``, ``special`` (not a regular file), ``size`` or ``digest``.
        entry: what the record says.
        found_kind: the stat kind of a special file (``symlink``, ``fifo``, ...).
        found_size: the size found, for ``size``.
        found_digest: the digest found, for ``digest``.
    """

    name: str
    where: str
    kind: MismatchKind
    entry: FileEntry
    found_kind: str = ""
    found_size: int | None = None
    found_digest: Digest | None = None

    def problem(self, recorded_by: str) -> str:
        """The difference in one phrase (after the file's name), ``recorded_by`` naming the
        record (``"the manifest"``)."""
        if self.kind == "missing":
            return "is missing"
        if self.kind == "special":
            return f"is a {self.found_kind}, not a regular file; it was not followed or read"
        if self.kind == "size":
            return (
                f"has {self.found_size} bytes, {recorded_by} recorded {self.entry.size} "
                "(truncated or replaced)"
            )
        found = self.found_digest or self.entry.digest  # a digest mismatch records it
        return (
            f"digest {found.algorithm} {found.value[:16]}... does not match {recorded_by}'s "
            f"{self.entry.digest.value[:16]}... (the bytes changed after the commit)"
        )

    def error(self, recorded_by: str, *, fixes: tuple[str, str, str]) -> CheckpointCorruptError:
        """The refusal naming the file and the difference, ending with what to do when it is
        missing, when it is not a regular file, or when its size or digest differs
        (``fixes``, in that order)."""
        missing, special, changed = fixes
        fix = {"missing": missing, "special": special}.get(self.kind, changed)
        return CheckpointCorruptError(self.where, self.problem(recorded_by), fix)


def listed_file_mismatch(
    store: Store, path: str, entry: FileEntry, *, digest: bool, name: str | None = None
) -> FileMismatch | None:
    """How the file at ``path`` differs from ``entry`` (``None``: it does not). Reads every
    byte only with ``digest``; a file that is not regular is never opened.

    Args:
        name: the file as its record lists it (default ``path``).

    Raises:
        OSError / StatecraftError: the file could not be read while hashing it.
    """
    listed = (name or path, f"{store.describe()}/{path}")
    stat = store.stat(path)
    if stat is None:
        return FileMismatch(*listed, "missing", entry)
    if stat.kind != "file":
        return FileMismatch(*listed, "special", entry, found_kind=stat.kind)
    if stat.size != entry.size:
        return FileMismatch(*listed, "size", entry, found_size=stat.size)
    if digest:
        found = file_digest(store, path, entry.digest.algorithm)
        if found != entry.digest:
            return FileMismatch(*listed, "digest", entry, found_digest=found)
    return None


def read_listed_file(
    store: Store, path: str, entry: FileEntry, *, name: str | None = None
) -> FileMismatch | bytes:
    """The bytes of the file at ``path`` read once, when they are what ``entry`` records
    (present, regular, its size, its digest computed over exactly these bytes); otherwise how
    the file differs. A verifier that then deserializes the returned bytes loads the bytes it
    checked, from one read of the file.

    Raises:
        OSError / StatecraftError: the file could not be read.
    """
    found = listed_file_mismatch(store, path, entry, digest=False, name=name)
    if found is not None:
        return found
    listed = (name or path, f"{store.describe()}/{path}")
    with store.open_read(path) as handle:  # refuses a file that became special meanwhile
        data = handle.read()
    if len(data) != entry.size:  # changed between the stat and the read
        return FileMismatch(*listed, "size", entry, found_size=len(data))
    digest = Digest.of(data, entry.digest.algorithm)
    if digest != entry.digest:
        return FileMismatch(*listed, "digest", entry, found_digest=digest)
    return data


def first_listed_mismatch(
    store: Store,
    directory: str,
    files: Mapping[str, FileEntry],
    *,
    hashed: Callable[[str], bool] = lambda name: False,
    keep: Collection[str] = (),
    kept: MutableMapping[str, bytes] | None = None,
) -> FileMismatch | None:
    """The first (by name) of ``files`` under ``directory`` that differs from its entry, the
    names for which ``hashed`` is true checked by digest too; ``None`` when all match.

    Args:
        keep: names of hashed files whose bytes the caller deserializes next: each is read
            once with :func:`read_listed_file` and its verified bytes stored in ``kept``
            under its name (hashed and loaded from the same bytes, one read per file).
        kept: where the bytes of ``keep`` go (required with ``keep``).

    Raises:
        OSError / StatecraftError: a file could not be read while hashing it.
    """
    for name, entry in sorted(files.items()):
        path = f"{directory}/{name}"
        if name in keep and hashed(name):
            if kept is None:
                raise TypeError("first_listed_mismatch(keep=...) needs kept=, a mapping")
            read = read_listed_file(store, path, entry, name=name)
            if isinstance(read, FileMismatch):
                return read
            kept[name] = read
            continue
        found = listed_file_mismatch(store, path, entry, digest=hashed(name), name=name)
        if found is not None:
            return found
    return None
