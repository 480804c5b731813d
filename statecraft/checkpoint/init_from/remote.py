"""Staging an ``s3://`` ``init_from`` source: the archived ``iter_*`` (a checkpoint or a partial
artifact) is fetched by the archive's own fetch (``machines/fetch.toml``: manifest first, every
payload proven by size and sha256, placed only when complete) into a local stage directory,
then read like any local statecraft source (its digests verified again against its manifest).

An iteration already staged there is not fetched again: it is re-verified when read, so a
damaged or half-copied stage is refused, never loaded.
"""

from __future__ import annotations

import logging
import os
import posixpath
from pathlib import Path

from statecraft.checkpoint.archive.destination import parse_s3_uri
from statecraft.checkpoint.archive.fetch import fetch_archive
from statecraft.checkpoint.archive.open import open_bucket
from statecraft.storage.local import LocalStore

__all__ = ["is_remote", "stage_remote"]

log = logging.getLogger("statecraft.init_from")


def is_remote(source: object) -> bool:
    """True for an ``s3://`` source."""
    return isinstance(source, str) and source.startswith("s3://")


def stage_remote(uri: str, *, credentials: str, stage_dir: str | os.PathLike[str]) -> Path:
    """Fetch the archived iteration ``uri`` (``s3://bucket/.../iter_N``) into ``stage_dir``
    (unless it is there already) and return the local directory.

    Raises:
        ArchiveError: a malformed URI, no commit record, a payload that does not prove.
        CredentialsError / ObjectRequestError: the bucket cannot be reached with
            ``credentials`` (``""``: boto3's default chain; ``profile:NAME``; a JSON file).
    """
    bucket_name, prefix = parse_s3_uri(uri, what="init_from")
    name = posixpath.basename(prefix)
    stage = Path(stage_dir).expanduser().absolute()
    target = stage / name
    if target.is_dir():
        log.info("init_from %s: already staged at %s (verified when read)", uri, target)
        return target
    stage.mkdir(parents=True, exist_ok=True)
    bucket = open_bucket(credentials, bucket_name)
    report = fetch_archive(bucket, prefix, LocalStore(str(stage)), name)
    log.info("init_from %s: fetched %d files to %s", uri, report.files, report.path)
    return target
