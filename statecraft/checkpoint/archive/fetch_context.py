"""The records of one fetch (the ``fetch`` machine, :mod:`.fetch_bindings`): what the effects
share (:class:`FetchContext`), what a fetch placed (:class:`FetchReport`) and the names of its
staging directories (:func:`staging_name_pattern`)."""

from __future__ import annotations

import posixpath
import re
from typing import Any

import attrs

from statecraft.checkpoint.archive.inventory import ArchiveEntry
from statecraft.checkpoint.kernel.layout import iter_dirname, parse_iter_dirname
from statecraft.errors import ArchiveError
from statecraft.storage.local import LocalStore
from statecraft.storage.objects import ArchiveBucket

__all__ = ["FetchContext", "FetchReport", "staging_name_pattern"]


def staging_name_pattern(name: str) -> re.Pattern[str]:
    """The names of ``<name>``'s staging directories (``.<name>.fetch-<pid>-<n>``)."""
    return re.compile(rf"^\.{re.escape(name)}\.fetch-\d+-\d+$")


@attrs.frozen
class FetchReport:
    """What a fetch placed.

    Attributes:
        kind: ``"artifact"`` or ``"checkpoint"``.
        files: files placed (the commit record included).
        bytes_fetched: bytes downloaded.
        seconds: wall time of the fetch.
        path: the placed directory (``dst/<name>``).
    """

    kind: str
    files: int
    bytes_fetched: int
    seconds: float
    path: str


@attrs.define
class FetchContext:
    """One fetch.

    Attributes:
        bucket: the source bucket.
        remote_prefix: ``<...>/iter_N`` (no ``s3://bucket/``, no trailing ``/``).
        dst: the local directory that receives ``<name>``.
        name: the directory to create under ``dst`` (one path component).
        kind: ``artifact`` / ``checkpoint`` once the commit record was read.
        manifest_name / manifest_bytes: the commit record as read (placed from these bytes).
        entries: every payload to fetch (path relative to ``iter_N``, size, sha256 when the
            inventory states one).
        staging: the staging directory of this fetch (``""`` before ``prepare_staging``).
        bytes_fetched: bytes downloaded so far.
        moved: this fetch renamed its staging copy to ``dst/<name>`` (its fsyncs may still
            have failed: then the discard takes it back out).
        progress: called with ``(path, size)`` after each payload lands (the command's bar).
    """

    bucket: ArchiveBucket
    remote_prefix: str = attrs.field(converter=lambda p: str(p).strip("/"))
    dst: LocalStore
    name: str
    kind: str = ""
    manifest_name: str = ""
    manifest_bytes: bytes = b""
    entries: list[ArchiveEntry] = attrs.field(factory=list)
    staging: str = ""
    bytes_fetched: int = 0
    moved: bool = False
    progress: Any = None

    @property
    def iteration(self) -> int:
        found = parse_iter_dirname(posixpath.basename(self.remote_prefix))
        if found is None:
            raise ArchiveError(
                self.source(),
                "is not an archived iteration (the URI must end in iter_<9 digits>)",
                "Name the iteration directory, e.g. s3://bucket/.../checkpoints/iter_000000100.",
            )
        return found

    @property
    def iter_dir(self) -> str:
        return iter_dirname(self.iteration)

    def key(self, relative: str) -> str:
        return f"{self.remote_prefix}/{relative}"

    def source(self, relative: str = "") -> str:
        bucket = self.bucket.identity().bucket
        tail = f"/{relative}" if relative else ""
        return f"s3://{bucket}/{self.remote_prefix}{tail}"

    @property
    def target(self) -> str:
        return f"{self.dst.root}/{self.name}"

    def staged(self, relative: str = "") -> str:
        """Store path of ``relative`` in the staging copy of ``iter_N``."""
        base = f"{self.staging}/{self.iter_dir}"
        return f"{base}/{relative}" if relative else base
