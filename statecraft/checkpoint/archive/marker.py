"""The local archive receipt ``.uploaded`` (schema ``statecraft.archive-marker.v1``).

Written beside what was archived (``iter_N/.uploaded`` of a full checkpoint,
``checkpoint_artifacts/iter_N/.uploaded`` of an artifact) by an atomic write, only after every
remote object was uploaded and verified. It records the non-secret destination identity
(endpoint authority, bucket, the key prefix of the archived directory) and the archived
inventory (every file's size; sha256 for the files the archive path hashed). It never holds a
key id or a secret.

Readers:

- retention (``require_uploaded``) tests only that a marker *exists* (a legacy one-line marker
  counts; a damaged JSON marker counts too: presence, never content, gates pruning);
- ``archive prune-verified`` and ``inspect`` read it with :func:`read_marker`: a
  :class:`LegacyMarker` binds no destination and no digest, so nothing can be verified through
  it.

The temporary of the write (``.uploaded.tmp`` or a ``LocalStore`` temporary) is never a
marker (:func:`~statecraft.checkpoint.archive.inventory.is_receipt_name`).
"""

from __future__ import annotations

from typing import Literal

import attrs

from statecraft.checkpoint.archive.inventory import ArchiveEntry
from statecraft.checkpoint.kernel.records import record_codec
from statecraft.errors import CheckpointCorruptError
from statecraft.storage.base import Store
from statecraft.storage.s3_credentials import S3Identity

__all__ = [
    "MARKER_NAME",
    "MARKER_SCHEMA",
    "MARKER_SCHEMA_FILE",
    "DestinationRecord",
    "LegacyMarker",
    "UploadedMarker",
    "decode_marker",
    "marker_path",
    "read_marker",
    "write_marker",
]

MARKER_NAME = ".uploaded"
MARKER_SCHEMA = "statecraft.archive-marker.v1"
#: the JSON schema of a v1 marker (named by ``specs/upload.toml``), enforced on write and read
MARKER_SCHEMA_FILE = "archive-marker.schema.json"
MarkerKind = Literal["checkpoint", "artifact"]

_FIX = "Move the marker aside and run the upload again (the local copy is kept)."


@attrs.frozen
class DestinationRecord:
    """Where an archive lives, without secrets.

    Attributes:
        endpoint: the endpoint's authority (``host:port``).
        bucket: the bucket.
        prefix: the key prefix of the archived directory (``<...>/checkpoints/iter_000000100``),
            no leading or trailing ``/``.
    """

    endpoint: str
    bucket: str
    prefix: str

    @classmethod
    def of(cls, identity: S3Identity, prefix: str) -> DestinationRecord:
        return cls(identity.endpoint, identity.bucket, prefix.strip("/"))

    def binds(self, identity: S3Identity) -> bool:
        """True when ``identity`` addresses this endpoint and bucket."""
        return (self.endpoint, self.bucket) == (identity.endpoint, identity.bucket)

    def uri(self, relative: str = "") -> str:
        tail = f"/{relative}" if relative else ""
        return f"s3://{self.bucket}/{self.prefix}{tail}"


@attrs.frozen
class UploadedMarker:
    """A verified archive of one directory.

    Attributes:
        kind: ``checkpoint`` (a full checkpoint's ``iter_N``) or ``artifact``.
        iteration: the archived ``iter_N``.
        destination: where the archive lives.
        files: every archived file, sorted by path.
        schema: :data:`MARKER_SCHEMA`.
    """

    kind: MarkerKind
    iteration: int
    destination: DestinationRecord
    files: tuple[ArchiveEntry, ...]
    schema: str = MARKER_SCHEMA

    def encode(self) -> bytes:
        """Canonical JSON, checked against ``specs/archive-marker.schema.json`` first.

        Raises:
            CheckpointError: the marker breaks the schema (nothing is written).
        """
        return _CODEC.encode(self, what=f"the archive marker of iteration {self.iteration}")

    def entry(self, path: str) -> ArchiveEntry | None:
        return next((e for e in self.files if e.path == path), None)


_CODEC = record_codec(
    UploadedMarker,
    schema=MARKER_SCHEMA,
    what="archive marker",
    fix=_FIX,
    schema_file=MARKER_SCHEMA_FILE,
    schema_first=False,
)


@attrs.frozen
class LegacyMarker:
    """A one-line marker of an earlier release: valid for retention, binds nothing."""

    text: str


def marker_path(directory: str) -> str:
    """The marker of ``directory`` (``iter_000000100/.uploaded``)."""
    return f"{directory}/{MARKER_NAME}" if directory else MARKER_NAME


def decode_marker(data: bytes, *, source: str) -> UploadedMarker | LegacyMarker:
    """Parse a marker's bytes.

    Raises:
        CheckpointCorruptError: JSON that is not a valid v1 marker (wrong schema, missing or
            malformed fields), or bytes that are neither JSON nor one line of text.
    """
    text = data.decode("utf-8", errors="replace")
    if not text.lstrip().startswith("{"):
        lines = [line for line in text.splitlines() if line.strip()]
        if len(lines) <= 1 and "\ufffd" not in text:
            return LegacyMarker(lines[0].strip() if lines else "")
        raise CheckpointCorruptError(source, "is neither a JSON marker nor one line of text", _FIX)
    return _CODEC.decode(data, source=source)


def read_marker(store: Store, directory: str) -> UploadedMarker | LegacyMarker:
    """The marker of ``directory`` of ``store``.

    Raises:
        FileNotFoundError: no marker.
        CheckpointCorruptError: as :func:`decode_marker`.
    """
    path = marker_path(directory)
    return decode_marker(store.read_bytes(path), source=f"{store.describe()}/{path}")


def write_marker(store: Store, directory: str, marker: UploadedMarker) -> None:
    """Write ``directory``'s marker atomically and durably (replacing an older one)."""
    store.write_atomic(marker_path(directory), marker.encode())
