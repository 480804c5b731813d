"""``prune_verified``: release an artifact's local payloads only once its archive is proven.

An artifact directory (``.../checkpoint_artifacts/iter_N``) loses its payload files only when
all of these hold, checked in this order, each failure keeping everything and saying why:

1. its ``.uploaded`` marker is a v1 JSON marker of kind ``artifact`` (a legacy one-line marker
   binds nothing; a malformed one proves nothing) recording a sha256 for every file;
2. the marker binds the endpoint and bucket these credentials address
   (:meth:`DestinationRecord.binds`);
3. the local bytes still match the recorded sizes and sha256s (the commit record included);
4. every recorded object is live at the destination with that size and sha256 (HEAD).

Then the release record ``.archive-released.json`` is written (durably) before the first
unlink, and every recorded payload except the artifact manifest is unlinked (each durably).
The manifest, the marker and the release record stay. A prune interrupted after the release
record is finished by the next run (files already gone are fine then, and the proof is
repeated for the ones left).
"""

from __future__ import annotations

import logging
from pathlib import Path

import attrs

from statecraft.checkpoint.archive.inventory import sha256_of
from statecraft.checkpoint.archive.marker import LegacyMarker, UploadedMarker, read_marker
from statecraft.checkpoint.kernel.artifact_release import RELEASE_NAME, ReleaseRecord, release_path
from statecraft.checkpoint.kernel.layout import ARTIFACT_MANIFEST_NAME, parse_iter_dirname
from statecraft.errors import CheckpointCorruptError, ObjectRequestError
from statecraft.storage.filesystem import OsFilesystem
from statecraft.storage.local import LocalStore
from statecraft.storage.objects import ArchiveBucket

__all__ = ["PruneDecision", "archived_marker", "prune_verified"]

log = logging.getLogger("statecraft.archive")


@attrs.frozen
class PruneDecision:
    """What ``prune_verified`` did with one artifact directory.

    Attributes:
        path: the artifact directory.
        pruned: its payloads were released (unlinked).
        reason: why it was kept, or what was released and where the archive is.
        freed_bytes: bytes unlinked by this call.
    """

    path: str
    pruned: bool
    reason: str
    freed_bytes: int = 0


def _keep(path: str, reason: str) -> PruneDecision:
    log.warning("keeping %s: %s", path, reason)
    return PruneDecision(path, False, reason, 0)


def _marker(store: LocalStore, path: str) -> UploadedMarker | str:
    """The marker, or why it cannot prove anything."""
    try:
        marker = read_marker(store, "")
    except FileNotFoundError:
        return "it has no .uploaded marker: it was never archived (publish it first)"
    except CheckpointCorruptError as exc:
        return f"its .uploaded marker is malformed ({exc.problem}); nothing can be proven by it"
    if isinstance(marker, LegacyMarker):
        return (
            "its .uploaded marker is a legacy one-line marker, which binds no destination and "
            "no digest; re-publish it (statecraft archive publish) to write a v1 marker"
        )
    if marker.kind != "artifact":
        return f"its marker is of kind {marker.kind!r}: prune-verified releases artifacts only"
    unhashed = [e.path for e in marker.files if e.sha256 is None]
    if unhashed:
        return f"its marker records no sha256 for {unhashed}: those cannot be proven"
    if not any(e.path == ARTIFACT_MANIFEST_NAME for e in marker.files):
        return f"its marker does not record the artifact manifest {ARTIFACT_MANIFEST_NAME}"
    return marker


def archived_marker(artifact_dir: Path) -> UploadedMarker | PruneDecision:
    """The local half of the proof: ``artifact_dir`` is an artifact directory holding its
    manifest and a v1 ``artifact`` marker recording a sha256 for every file. Returns the
    marker (whose destination says which bucket to ask), or the decision to keep it. Reads
    only; needs no bucket."""
    path = str(Path(artifact_dir).absolute())
    stat = OsFilesystem().stat(path)
    if stat is None or not stat.is_dir or stat.link:
        return _keep(path, "is not a directory")
    iteration = parse_iter_dirname(Path(path).name)
    if iteration is None:
        return _keep(path, "is not an artifact directory (checkpoint_artifacts/iter_<9 digits>)")
    store = LocalStore(path)
    if store.stat(ARTIFACT_MANIFEST_NAME) is None:
        return _keep(path, f"it holds no artifact manifest ({ARTIFACT_MANIFEST_NAME})")
    found = _marker(store, path)
    if isinstance(found, str):
        return _keep(path, found)
    if found.iteration != iteration:
        return _keep(path, f"its marker records iteration {found.iteration}, not {iteration}")
    return found


def prune_verified(artifact_dir: Path, bucket: ArchiveBucket) -> PruneDecision:
    """Release the payload files of ``artifact_dir`` when its archive is proven (module doc).

    Args:
        artifact_dir: ``.../checkpoint_artifacts/iter_N``.
        bucket: the bucket the credentials address (its identity is what the marker must
            bind).

    Returns:
        the decision; a kept artifact is a decision with ``pruned=False`` and the reason,
        never an exception.

    Raises:
        StoreError / OSError: a local unlink or write failed (what was released so far is
            stated by the release record, written first).
    """
    path = str(Path(artifact_dir).absolute())
    found = archived_marker(artifact_dir)
    if isinstance(found, PruneDecision):
        return found
    marker = found
    store = LocalStore(path)
    iteration = marker.iteration
    where = marker.destination.uri()
    identity = bucket.identity()
    if not marker.destination.binds(identity):
        return _keep(
            path,
            f"its marker binds {where} at {marker.destination.endpoint}, but these credentials "
            f"address s3://{identity.bucket} at {identity.endpoint}",
        )
    released = store.stat(RELEASE_NAME) is not None
    for entry in marker.files:
        local = store.stat(entry.path)
        if local is None:
            if released and entry.path != ARTIFACT_MANIFEST_NAME:
                continue  # released by an interrupted earlier run
            return _keep(path, f"the local file {entry.path} is missing")
        if local.size != entry.size or sha256_of(store, entry.path) != entry.sha256:
            return _keep(
                path,
                f"the local bytes of {entry.path} changed since the archive was verified "
                f"({local.size} bytes, marker records {entry.size} and sha256 {entry.sha256})",
            )
    for entry in marker.files:
        key = f"{marker.destination.prefix}/{entry.path}"
        try:
            remote = bucket.stat(key)
        except ObjectRequestError as exc:
            return _keep(path, f"could not check {marker.destination.uri(entry.path)}: {exc}")
        if remote is None:
            return _keep(path, f"the archived object {marker.destination.uri(entry.path)} is gone")
        if remote.size != entry.size or remote.sha256 != entry.sha256:
            got = f"{remote.size} bytes, sha256 {remote.sha256 or 'unknown'}"
            return _keep(
                path,
                f"the archived object {marker.destination.uri(entry.path)} was altered ({got}; "
                f"the marker records {entry.size} bytes, sha256 {entry.sha256})",
            )
    payloads = tuple(sorted(e.path for e in marker.files if e.path != ARTIFACT_MANIFEST_NAME))
    if not released:
        record = ReleaseRecord(iteration, where, marker.destination.endpoint, payloads)
        store.write_atomic(release_path(""), record.encode())
    freed = 0
    for relative in payloads:
        there = store.stat(relative)
        if there is None:
            continue
        store.delete(relative)
        freed += there.size
    log.info(
        "released %d payload files (%d bytes) of %s, archived at %s",
        len(payloads),
        freed,
        path,
        where,
    )
    return PruneDecision(
        path, True, f"released {len(payloads)} payload files (archived at {where})", freed
    )
