"""The release record ``.archive-released.json`` (schema ``statecraft.archive-release.v1``).

``archive prune-verified`` writes it into ``checkpoint_artifacts/iter_N/`` (atomically and
durably) *before* it unlinks the first payload, once the artifact's archive is proven. It turns a
half-pruned artifact into a stated one: the catalog and ``inspect`` report the artifact as
``released (archived at s3://...)`` instead of corrupt, and the resume rules still count it (its
manifest stays, and so does its ``.uploaded`` marker). It holds no key id and no secret.
"""

from __future__ import annotations

import json

import attrs

from statecraft.checkpoint.kernel.manifest import strict_converter, structure_record
from statecraft.errors import CheckpointCorruptError
from statecraft.storage.base import Store

__all__ = ["RELEASE_NAME", "RELEASE_SCHEMA", "ReleaseRecord", "read_release", "release_path"]

RELEASE_NAME = ".archive-released.json"
RELEASE_SCHEMA = "statecraft.archive-release.v1"
_converter = strict_converter()


@attrs.frozen
class ReleaseRecord:
    """The local payloads of an artifact were released because its archive was proven.

    Attributes:
        iteration: the artifact's ``iter_N``.
        archive: ``s3://<bucket>/<prefix>`` of the archived directory.
        endpoint: the archive's endpoint authority (``host:port``).
        files: the payload paths released (unlinked, or about to be), sorted.
        schema: :data:`RELEASE_SCHEMA`.
    """

    iteration: int
    archive: str
    endpoint: str
    files: tuple[str, ...]
    schema: str = RELEASE_SCHEMA

    def encode(self) -> bytes:
        return (json.dumps(_converter.unstructure(self), sort_keys=True, indent=1) + "\n").encode()


def release_path(directory: str) -> str:
    return f"{directory}/{RELEASE_NAME}" if directory else RELEASE_NAME


def read_release(store: Store, directory: str) -> ReleaseRecord:
    """The release record of ``directory``.

    Raises:
        FileNotFoundError: none.
        CheckpointCorruptError: not a valid v1 record.
    """
    path = release_path(directory)
    source = f"{store.describe()}/{path}"
    fix = "The artifact's payloads may be gone; fetch it back with statecraft archive fetch."
    try:
        raw = json.loads(store.read_bytes(path))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise CheckpointCorruptError(source, "is not valid JSON", fix) from None
    if not isinstance(raw, dict) or raw.get("schema") != RELEASE_SCHEMA:
        raise CheckpointCorruptError(source, f"is not a {RELEASE_SCHEMA} record", fix)
    record: ReleaseRecord = structure_record(
        _converter, raw, ReleaseRecord, source=source, what="release record", fix=fix
    )
    return record
