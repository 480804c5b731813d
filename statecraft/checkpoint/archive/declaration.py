"""The remote declaration of an artifact archive: ``iter_N/.posttrain-archive.json`` of its prefix.

Schema ``statecraft.archive-declaration.v1`` (``specs/archive-declaration.schema.json``, enforced
on encode and on decode). The publish transaction creates it by ``If-None-Match: *`` before any
payload is uploaded, and never replaces it: it pins the complete inventory of the archive (every
file with its size and sha256, the artifact manifest's own included), so a retried publish either
resumes the same archive or is refused before it touches a payload. It holds nothing secret (no
endpoint, key id or secret)::

    {"schema": "statecraft.archive-declaration.v1", "iteration": 100,
     "manifest": ".posttrain-checkpoint-artifact.json",
     "files": [{"path": ".posttrain-checkpoint-artifact.json", "size": 512, "sha256": "..."},
               {"path": "model.pt", "size": 1234, "sha256": "..."}]}
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable

import attrs

from statecraft.checkpoint.archive.inventory import ArchiveEntry
from statecraft.checkpoint.kernel.layout import ARTIFACT_MANIFEST_NAME
from statecraft.checkpoint.kernel.records import record_codec
from statecraft.errors import CheckpointError
from statecraft.storage.objects import BucketClient

__all__ = [
    "DECLARATION_NAME",
    "DECLARATION_SCHEMA",
    "DECLARATION_SCHEMA_FILE",
    "ArchiveDeclaration",
    "decode_declaration",
    "read_declaration",
]

DECLARATION_NAME = ".posttrain-archive.json"
DECLARATION_SCHEMA = "statecraft.archive-declaration.v1"
#: its JSON schema (named by ``specs/publish.toml``), enforced on encode and decode.
DECLARATION_SCHEMA_FILE = "archive-declaration.schema.json"

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_FIX = (
    "The declaration is immutable and statecraft never replaces it: inspect it; if it is not a "
    "statecraft archive (or it is damaged and nothing depends on it), delete the object and "
    "publish again."
)


@attrs.frozen
class ArchiveDeclaration:
    """The complete inventory of one artifact archive (see the module docstring).

    Attributes:
        iteration: the artifact's ``iter_N``.
        files: every archived file (the manifest included), sorted by path, each with sha256.
        manifest: the commit record's name (:data:`~statecraft.checkpoint.kernel.layout.
            ARTIFACT_MANIFEST_NAME`), uploaded last.
        schema: :data:`DECLARATION_SCHEMA`.
    """

    iteration: int
    files: tuple[ArchiveEntry, ...]
    manifest: str = ARTIFACT_MANIFEST_NAME
    schema: str = DECLARATION_SCHEMA

    @classmethod
    def of(cls, iteration: int, files: Iterable[ArchiveEntry]) -> ArchiveDeclaration:
        """The declaration of ``files`` (sorted by path here)."""
        return cls(iteration, tuple(sorted(files, key=lambda e: e.path)))

    @property
    def payloads(self) -> tuple[ArchiveEntry, ...]:
        """Every file but the commit record, in upload order."""
        return tuple(e for e in self.files if e.path != self.manifest)

    def entry(self, path: str) -> ArchiveEntry | None:
        return next((e for e in self.files if e.path == path), None)

    @property
    def manifest_entry(self) -> ArchiveEntry:
        entry = self.entry(self.manifest)
        if entry is None:  # pragma: no cover - problems() refuses such a record
            raise CheckpointError(f"the declaration lists no {self.manifest}")
        return entry

    def problems(self) -> list[str]:
        """What makes this record not a valid declaration (empty when it is one)."""
        out: list[str] = []
        if self.schema != DECLARATION_SCHEMA:
            out.append(f"schema {self.schema!r}, expected {DECLARATION_SCHEMA!r}")
        if self.manifest != ARTIFACT_MANIFEST_NAME:
            out.append(f"manifest {self.manifest!r}, expected {ARTIFACT_MANIFEST_NAME!r}")
        if self.iteration < 0:
            out.append(f"iteration {self.iteration} is negative")
        paths = [e.path for e in self.files]
        if paths != sorted(set(paths)):
            out.append(f"files {paths} are not sorted by path without duplicates")
        if self.manifest not in paths:
            out.append(f"files do not list the commit record {self.manifest}")
        if not any(p != self.manifest for p in paths):
            out.append("files list no payload besides the commit record")
        for e in self.files:
            normal = posixpath.normpath(e.path)
            if normal != e.path or e.path.startswith(("/", "../")) or e.path == "..":
                out.append(f"{e.path!r} is not a plain relative path")
            if e.size < 0:
                out.append(f"{e.path}: size {e.size} is negative")
            if e.sha256 is None or not _SHA256.match(e.sha256):
                out.append(f"{e.path}: sha256 {e.sha256!r} is not 64 lowercase hex digits")
        return out

    def encode(self) -> bytes:
        """Canonical JSON bytes (sorted keys), checked against the schema.

        Raises:
            CheckpointError: the record is invalid (a bug in the code that built it); nothing
                is written.
        """
        return _CODEC.encode(self, what=f"the archive declaration of iteration {self.iteration}")

    def differences(self, other: ArchiveDeclaration) -> list[str]:
        """How ``other`` (say, the one found remotely) differs from this one, per file."""
        out: list[str] = []
        if other.iteration != self.iteration:
            out.append(f"iteration {other.iteration} instead of {self.iteration}")
        mine = {e.path: e for e in self.files}
        theirs = {e.path: e for e in other.files}
        for path in sorted(set(mine) | set(theirs)):
            a, b = mine.get(path), theirs.get(path)
            if a is None:
                out.append(f"{path} is declared there but not here")
            elif b is None:
                out.append(f"{path} is here but not declared there")
            elif a != b:
                out.append(
                    f"{path}: declared size {b.size} sha256 {b.sha256}, here size {a.size} "
                    f"sha256 {a.sha256}"
                )
        return out


_CODEC = record_codec(
    ArchiveDeclaration,
    schema=DECLARATION_SCHEMA,
    what="archive declaration",
    fix=_FIX,
    schema_file=DECLARATION_SCHEMA_FILE,
    problems=ArchiveDeclaration.problems,
)


def decode_declaration(data: bytes, *, source: str) -> ArchiveDeclaration:
    """Parse and validate declaration bytes.

    Raises:
        CheckpointCorruptError: not JSON, another schema, malformed fields, values
            :meth:`ArchiveDeclaration.problems` refuses, or anything the JSON schema refuses;
            the message names ``source`` and the problem, and says what to do.
    """
    return _CODEC.decode(data, source=source)


def read_declaration(
    bucket: BucketClient, key: str, *, source: str | None = None
) -> ArchiveDeclaration:
    """The declaration stored at ``key`` of ``bucket``.

    Args:
        source: how messages name the object (default ``key``; pass the ``s3://`` URI).

    Raises:
        FileNotFoundError: no object at ``key``.
        CheckpointCorruptError: as :func:`decode_declaration`.
        ObjectRequestError: the request failed.
    """
    return decode_declaration(bucket.get(key), source=source or key)
