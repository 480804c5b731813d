"""The file sources statecraft ships with a :meth:`fingerprint`: a JSONL manifest
(:class:`JsonlDataset`) and a JSONL manifest over tar archives (:class:`TarJsonlDataset`).

The fingerprint follows the reference rule (docs/checkpointing.md, "Data"):

* the ordered, filtered rows, each in canonical JSON (key order, whitespace and blank lines do
  not count), and the cursor-relevant ``preprocessing`` settings;
* media paths (the ``media_keys`` fields) resolve against the JSONL's directory, never the
  launch directory, and enter the fingerprint as their normalized JSONL-relative spelling, so
  ``a/b.png``, ``./a/../a/b.png`` and the absolute path name the same file;
* no mtimes, no stat of media files: rows that carry immutable digests are covered because
  their fields are;
* a tar-backed source adds each distinct archive's normalized JSONL-relative path and size (its
  rows' offsets depend on the archive's byte layout); an omitted, empty, absolute or relative
  ``tar_path`` spelling of the same archive normalizes to the same identity.
"""

from __future__ import annotations

import json
import os
import tarfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from statecraft.checkpoint.data.fingerprint import Fingerprint

__all__ = ["JsonlDataset", "TarJsonlDataset", "relative_identity"]


def relative_identity(spelling: str | os.PathLike[str], base: Path) -> str:
    """The normalized ``base``-relative spelling of a path given relative to ``base`` or
    absolute (``..`` and ``.`` folded; symlinks are not resolved, nothing is stat'ed)."""
    path = Path(spelling)
    absolute = path if path.is_absolute() else base / path
    return Path(os.path.relpath(os.path.normpath(absolute), os.path.normpath(base))).as_posix()


class JsonlDataset:
    """A map-style dataset over the rows of a JSONL file (one JSON object per line).

    Args:
        path: the JSONL file.
        keep: a row filter (``keep(row) -> bool``); the fingerprint covers the kept rows.
        media_keys: row fields holding media paths, relative to the JSONL's directory (or
            absolute); items carry them resolved to absolute paths.
        preprocessing: the cursor-relevant preprocessing settings (JSON values), part of the
            fingerprint: changing one changes what the next sample is.
        transform: applied to each item (not part of the fingerprint: name what it depends on
            in ``preprocessing``).

    Raises:
        ValueError: a line is not a JSON object (naming the file and line).
        TypeError: ``preprocessing`` holds a non-JSON value.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        keep: Callable[[dict[str, Any]], bool] | None = None,
        media_keys: Sequence[str] = (),
        preprocessing: Mapping[str, Any] | None = None,
        transform: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        self.path = Path(path).absolute()
        self.base = self.path.parent
        self.media_keys = tuple(media_keys)
        self.preprocessing = dict(preprocessing or {})
        self.transform = transform
        rows = _read_rows(self.path)
        self.rows = [r for r in rows if keep is None or keep(r)]
        self._fingerprint: Fingerprint | None = None
        Fingerprint.of_rows([], preprocessing=self.preprocessing)  # a bad setting fails here

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> Any:
        row = dict(self.rows[index])
        for key in self.media_keys:
            if isinstance(row.get(key), str) and row[key]:
                row[key] = str(self.base / relative_identity(row[key], self.base))
        return row if self.transform is None else self.transform(row)

    def identity_row(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """``row`` as the fingerprint sees it: media paths in their JSONL-relative spelling."""
        out = dict(row)
        for key in self.media_keys:
            if isinstance(out.get(key), str) and out[key]:
                out[key] = relative_identity(out[key], self.base)
        return out

    def archives(self) -> Iterable[tuple[str, int]]:
        """The archives the rows' offsets depend on (none for a plain JSONL)."""
        return ()

    def fingerprint(self) -> Fingerprint:
        """The source's semantic identity (computed once: the rows are read at construction)."""
        if self._fingerprint is None:
            self._fingerprint = Fingerprint.of_rows(
                (self.identity_row(r) for r in self.rows),
                preprocessing=self.preprocessing,
                archives=self.archives(),
            )
        return self._fingerprint


class TarJsonlDataset(JsonlDataset):
    """A JSONL manifest whose rows name members of tar archives.

    Each row's ``tar_key`` field (default ``tar_path``) names its archive relative to the
    JSONL's directory or absolutely; omitted or empty, the row is in ``archive``. The row's
    ``member_key`` field (default ``member``) names the member; an item is the row with
    ``"bytes"``: the member's content.

    Raises:
        ValueError: a row names no archive and no default ``archive`` is given.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        archive: str | os.PathLike[str] | None = None,
        tar_key: str = "tar_path",
        member_key: str = "member",
        **kwargs: Any,
    ) -> None:
        super().__init__(path, **kwargs)
        self.tar_key, self.member_key = tar_key, member_key
        self.default_archive = None if archive is None else relative_identity(archive, self.base)
        for number, row in enumerate(self.rows):
            if not row.get(tar_key) and self.default_archive is None:
                raise ValueError(
                    f"{self.path}: kept row {number} has no {tar_key!r} and no default archive "
                    f"was given; pass archive= or give each row its {tar_key!r}"
                )

    def archive_of(self, row: Mapping[str, Any]) -> str:
        """The row's archive as its normalized JSONL-relative path."""
        spelling = row.get(self.tar_key)
        if not spelling:
            assert self.default_archive is not None  # checked at construction
            return self.default_archive
        return relative_identity(str(spelling), self.base)

    def identity_row(self, row: Mapping[str, Any]) -> dict[str, Any]:
        out = super().identity_row(row)
        out[self.tar_key] = self.archive_of(row)
        return out

    def archives(self) -> Iterable[tuple[str, int]]:
        shelf = {self.archive_of(r) for r in self.rows}
        return [(rel, os.path.getsize(self.base / rel)) for rel in sorted(shelf)]

    def __getitem__(self, index: int) -> Any:
        row = dict(self.rows[index])
        with tarfile.open(self.base / self.archive_of(row)) as tar:
            member = tar.extractfile(str(row[self.member_key]))
            if member is None:
                raise ValueError(f"{self.archive_of(row)}: {row[self.member_key]!r} is not a file")
            row["bytes"] = member.read()
        return row if self.transform is None else self.transform(row)


def _read_rows(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: not a JSON line ({exc})") from None
            if not isinstance(row, dict):
                got = type(row).__name__
                raise ValueError(f"{path}:{number}: expected a JSON object; got {got}")
            rows.append(row)
    return rows
