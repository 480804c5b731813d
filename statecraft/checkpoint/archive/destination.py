"""An archive destination: a bucket and the key prefix of a checkpoints root.

The default prefix mirrors the local layout, ``<project>/<group>/<name>/<RUN_TS>/checkpoints``,
so ``iter_N`` of a run lands at ``s3://<bucket>/<prefix>/iter_N/`` and its partial artifacts at
the sibling ``.../<RUN_TS>/checkpoint_artifacts/iter_N/``. A prefix that does not end in
``/checkpoints`` keeps its artifacts under ``<prefix>/checkpoint_artifacts/``. A destination
built with an explicit ``artifacts_root`` (what ``statecraft archive publish --upload-prefix P``
does, :meth:`ArchiveDestination.under`) puts them at ``<artifacts_root>/iter_N/`` and never
rewrites the prefix it was given.
"""

from __future__ import annotations

import posixpath
import re

import attrs

from statecraft.checkpoint.archive.marker import DestinationRecord
from statecraft.checkpoint.kernel.layout import (
    ARTIFACTS_DIR,
    CHECKPOINTS_DIR,
    RunIdentity,
    iter_dirname,
)
from statecraft.errors import ConfigError, ConfigIssue
from statecraft.storage.objects import ArchiveBucket

__all__ = ["ArchiveDestination", "default_prefix", "parse_s3_uri"]

_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def default_prefix(run: RunIdentity, run_ts: str) -> str:
    """``<project>/<group>/<name>/<RUN_TS>/checkpoints`` (``<RUN_TS>`` omitted when empty)."""
    parts = [run.project, run.group, run.name, run_ts, CHECKPOINTS_DIR]
    return "/".join(p for p in parts if p)


def parse_s3_uri(uri: str, *, what: str = "uri") -> tuple[str, str]:
    """``s3://bucket/key/prefix`` as ``(bucket, "key/prefix")`` (no trailing ``/``).

    Raises:
        ConfigError: not an ``s3://`` URI, or the bucket is not a DNS-style name.
    """
    if not isinstance(uri, str) or not uri.startswith("s3://"):
        raise ConfigError(
            [ConfigIssue(what, uri, "an s3://<bucket>/<prefix> URI")], source="archive"
        )
    bucket, _, key = uri[len("s3://") :].partition("/")
    if not _BUCKET_RE.match(bucket):
        raise ConfigError(
            [ConfigIssue(what, uri, "a DNS-style bucket name (3-63 of a-z 0-9 . -)")],
            source="archive",
        )
    return bucket, key.strip("/")


@attrs.frozen
class ArchiveDestination:
    """A bucket plus the prefix of a checkpoints root (``.../<RUN_TS>/checkpoints``).

    Attributes:
        bucket: the remote bucket (:class:`~statecraft.storage.objects.ArchiveBucket`).
        prefix: the checkpoints-root prefix, no leading or trailing ``/``.
        artifacts_root: where partial artifacts go, as given (``None``: the rule of
            :attr:`artifacts_prefix`).
        catch_up_per_save: how many committed iterations without a receipt a save's upload
            archives besides its own (``upload.catch_up_per_save``;
            :func:`~statecraft.checkpoint.archive.catch_up.archive_saved`).
        pending_disk_share: warn when iterations without a receipt hold more than this share
            of the disk (``upload.pending_disk_share``).
        keep_last: remote retention after a save's upload (``upload.keep_last``; ``0``: keep
            every archived iteration; :mod:`~statecraft.checkpoint.archive.remote_retention`).
    """

    bucket: ArchiveBucket
    prefix: str = attrs.field(converter=lambda p: str(p).strip("/"))
    artifacts_root: str | None = attrs.field(
        default=None, converter=lambda p: None if p is None else str(p).strip("/")
    )
    catch_up_per_save: int = 2
    pending_disk_share: float = 0.5
    keep_last: int = 0

    @classmethod
    def under(cls, bucket: ArchiveBucket, prefix: str) -> ArchiveDestination:
        """The destination of ``archive publish --upload-prefix <prefix>``: everything under
        ``prefix`` exactly as given; an artifact lands at
        ``<prefix>/checkpoint_artifacts/iter_N/`` (never at a sibling of ``prefix``)."""
        inside = cls(bucket, prefix)
        return cls(bucket, prefix, artifacts_root=inside.key(ARTIFACTS_DIR))

    def key(self, relative: str) -> str:
        """The object key of ``relative`` under the prefix."""
        return f"{self.prefix}/{relative}" if self.prefix else relative

    def iteration_prefix(self, iteration: int) -> str:
        """``<prefix>/iter_N``: where a full checkpoint's files go."""
        return self.key(iter_dirname(iteration))

    @property
    def artifacts_prefix(self) -> str:
        """Where partial artifacts go: the sibling ``checkpoint_artifacts`` of a prefix ending
        in ``checkpoints``, else ``<prefix>/checkpoint_artifacts`` (or ``artifacts_root`` when
        given)."""
        if self.artifacts_root is not None:
            return self.artifacts_root
        if posixpath.basename(self.prefix) == CHECKPOINTS_DIR:
            parent = posixpath.dirname(self.prefix)
            return f"{parent}/{ARTIFACTS_DIR}" if parent else ARTIFACTS_DIR
        return self.key(ARTIFACTS_DIR)

    def artifact_prefix(self, iteration: int) -> str:
        """``<artifacts prefix>/iter_N``: where one artifact's files go."""
        return f"{self.artifacts_prefix}/{iter_dirname(iteration)}"

    def record(self, directory_prefix: str) -> DestinationRecord:
        """The marker's destination record of a directory archived at ``directory_prefix``."""
        return DestinationRecord.of(self.bucket.identity(), directory_prefix)

    def uri(self, key: str = "") -> str:
        name = self.bucket.identity().bucket
        return f"s3://{name}/{key}" if key else f"s3://{name}"
