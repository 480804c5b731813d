"""Moving archived trees: download a key prefix to a local directory, and copy a prefix from
one bucket to another by streaming (no server-side copy, so any two S3-compatible endpoints
work, and multipart copy support is never assumed).

Both are idempotent and never overwrite:

- an object whose counterpart already exists with the same size and sha256 is skipped (a second
  run transfers nothing);
- a counterpart that exists with other bytes (or whose sha256 cannot be compared) is refused
  before anything is transferred: :class:`~statecraft.errors.ArchiveError` names the first
  conflicting path, and nothing local or remote was changed;
- each downloaded file is placed atomically (temporary, fsync, rename) after its size and
  stored sha256 were checked; each copied object carries the sha256 of its bytes.
"""

from __future__ import annotations

import logging
import posixpath
import tempfile
import time
from collections.abc import Callable

import attrs

from statecraft.checkpoint.archive.inventory import sha256_of
from statecraft.errors import ArchiveError
from statecraft.storage.local import LocalStore
from statecraft.storage.objects import ArchiveBucket, RemoteObject

__all__ = ["TransferReport", "copy_prefix", "download_prefix"]

log = logging.getLogger("statecraft.archive")

Progress = Callable[[str, int], None]


@attrs.frozen
class TransferReport:
    """What a download or copy did.

    Attributes:
        files: objects under the prefix.
        transferred: objects downloaded or copied by this call.
        skipped: objects already present with the same size and sha256.
        bytes_transferred: bytes moved by this call.
        seconds: wall time.
    """

    files: int
    transferred: int
    skipped: int
    bytes_transferred: int
    seconds: float


def _relative_keys(bucket: ArchiveBucket, prefix: str, uri: str) -> list[str]:
    base = f"{prefix}/" if prefix else ""
    out = []
    for key in bucket.list(base):
        relative = key[len(base) :]
        if not relative or relative.endswith("/"):
            continue  # a directory placeholder of some tools
        parts = relative.split("/")
        if any(p in ("", ".", "..") for p in parts):
            raise ArchiveError(
                f"{uri}/{relative}", "is a key that does not map to a safe local path"
            )
        out.append(relative)
    if not out:
        raise ArchiveError(uri, "holds no objects", "Check the bucket and prefix of the URI.")
    return sorted(out)


def _same(remote: RemoteObject, size: int, sha256: str) -> bool:
    return bool(remote.sha256) and remote.size == size and remote.sha256 == sha256


def download_prefix(
    bucket: ArchiveBucket,
    prefix: str,
    dst: LocalStore,
    *,
    progress: Progress | None = None,
) -> TransferReport:
    """Download every object under ``prefix/`` to the same relative path under ``dst``.

    Raises:
        ArchiveError: nothing under the prefix; a key that is not a safe relative path; a local
            file that exists with other bytes (nothing was downloaded then).
        ObjectRequestError: the bucket failed after its retries (files placed so far are
            complete; a rerun skips them).
    """
    started = time.monotonic()
    uri = f"s3://{bucket.identity().bucket}/{prefix}"
    keys = _relative_keys(bucket, prefix, uri)
    todo: list[tuple[str, RemoteObject]] = []
    skipped = 0
    for relative in keys:
        remote = bucket.stat(f"{prefix}/{relative}" if prefix else relative)
        if remote is None:
            continue
        local = dst.stat(relative)
        if local is None:
            todo.append((relative, remote))
        elif (
            local.kind == "file"
            and remote.sha256
            and local.size == remote.size
            and (sha256_of(dst, relative) == remote.sha256)
        ):
            skipped += 1
        else:
            raise ArchiveError(
                f"{dst.root}/{relative}",
                f"exists and is not the same as {uri}/{relative} (or cannot be compared: the "
                "object carries no sha256); nothing was downloaded",
                "Download into an empty directory, or move the file aside.",
            )
    moved = 0
    for relative, remote in todo:
        parent = posixpath.dirname(relative)
        if parent:
            dst.make_dirs(parent)
        bucket.download_into(f"{prefix}/{relative}" if prefix else relative, dst, relative)
        moved += remote.size
        if progress is not None:
            progress(relative, remote.size)
    return TransferReport(len(keys), len(todo), skipped, moved, time.monotonic() - started)


def copy_prefix(
    src: ArchiveBucket,
    src_prefix: str,
    dst: ArchiveBucket,
    dst_prefix: str,
    *,
    progress: Progress | None = None,
    spool_dir: str | None = None,
) -> TransferReport:
    """Copy every object under ``src_prefix/`` to ``dst_prefix/`` of ``dst``, streamed
    through a local spool file per object (downloaded and checked, then uploaded with its
    sha256), never by a server-side copy.

    Raises:
        ArchiveError: nothing under the source prefix; a destination object that exists with
            other bytes or without a comparable sha256 (nothing was copied then); source and
            destination are the same place.
        ObjectRequestError: a request failed after its retries (objects copied so far are
            complete; a rerun skips them).
    """
    started = time.monotonic()
    src_uri = f"s3://{src.identity().bucket}/{src_prefix}"
    dst_uri = f"s3://{dst.identity().bucket}/{dst_prefix}"
    if src.identity() == dst.identity() and src_prefix.strip("/") == dst_prefix.strip("/"):
        raise ArchiveError(dst_uri, "is the source itself", "Copy to another prefix or bucket.")
    keys = _relative_keys(src, src_prefix, src_uri)

    def join(prefix: str, relative: str) -> str:
        return f"{prefix}/{relative}" if prefix else relative

    todo: list[tuple[str, RemoteObject]] = []
    skipped = 0
    for relative in keys:
        there = src.stat(join(src_prefix, relative))
        if there is None:
            continue
        existing = dst.stat(join(dst_prefix, relative))
        if existing is None:
            todo.append((relative, there))
        elif there.sha256 and _same(existing, there.size, there.sha256):
            skipped += 1
        else:
            raise ArchiveError(
                f"{dst_uri}/{relative}",
                f"exists and is not the same as {src_uri}/{relative} (or cannot be compared: "
                "one side carries no sha256); nothing was copied",
                "Copy to an empty prefix, or remove the object at the destination first.",
            )
    moved = 0
    with tempfile.TemporaryDirectory(prefix="statecraft-copy-", dir=spool_dir) as spool:
        store = LocalStore(spool)
        for n, (relative, there) in enumerate(todo):
            name = f"object-{n}"
            src.download_into(join(src_prefix, relative), store, name)
            digest = there.sha256 or sha256_of(store, name)  # download_into checked it
            dst.upload_from(join(dst_prefix, relative), store, name, sha256=digest)
            store.delete(name)
            moved += there.size
            if progress is not None:
                progress(relative, there.size)
    log.info("copied %d objects (%d bytes) from %s to %s", len(todo), moved, src_uri, dst_uri)
    return TransferReport(len(keys), len(todo), skipped, moved, time.monotonic() - started)
