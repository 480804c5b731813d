"""The release record ``.archive-released.json`` (schema ``statecraft.archive-release.v1``).

``archive prune-verified`` writes it into ``checkpoint_artifacts/iter_N/`` (atomically and
durably) *before* it unlinks the first payload, once the artifact's archive is proven. It turns a
half-pruned artifact into a stated one: the catalog and ``inspect`` report the artifact as
``released (archived at s3://...)`` instead of corrupt, and the resume rules still count it (its
manifest stays, and so does its ``.uploaded`` marker). It holds no key id and no secret.
"""

from __future__ import annotations

import attrs

from statecraft.checkpoint.kernel.records import record_codec
from statecraft.storage.base import Store

__all__ = ["RELEASE_NAME", "RELEASE_SCHEMA", "ReleaseRecord", "read_release", "release_path"]

RELEASE_NAME = ".archive-released.json"
RELEASE_SCHEMA = "statecraft.archive-release.v1"


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
        return _CODEC.encode(self, what=f"the release record of iteration {self.iteration}")


_CODEC = record_codec(
    ReleaseRecord,
    schema=RELEASE_SCHEMA,
    what="release record",
    fix="The artifact's payloads may be gone; fetch it back with statecraft archive fetch.",
)


def release_path(directory: str) -> str:
    return f"{directory}/{RELEASE_NAME}" if directory else RELEASE_NAME


def read_release(store: Store, directory: str) -> ReleaseRecord:
    """The release record of ``directory``.

    Raises:
        FileNotFoundError: none.
        CheckpointCorruptError: not a valid v1 record.
    """
    return _CODEC.read(store, release_path(directory))
