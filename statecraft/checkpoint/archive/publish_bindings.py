"""The effect bindings of the ``publish`` machine (``machines/publish.toml``). The operation
that runs it, :func:`~statecraft.checkpoint.archive.publish.publish_artifact` (the one the
trainer and ``statecraft archive publish`` use), and the records the effects share
(:mod:`statecraft.checkpoint.archive.publish_context`) are re-exported here.

An artifact (``checkpoint_artifacts/iter_N/``, committed by ``.posttrain-checkpoint-artifact.json``)
is archived to ``destination.artifact_prefix(N)``. The table is the order: hash the local
artifact (proving it committed and intact) -> declare the inventory remotely by conditional
create -> prove the server honours conditional creates -> upload the payloads -> verify them by
HEAD -> commit the artifact manifest remotely last by conditional create -> write the local
``.uploaded`` receipt. This module says *how* each step acts; it never decides the order.

Failure rules (fail closed):

- a different remote declaration (or a different remote manifest) is an
  :class:`~statecraft.errors.ArchiveMismatchError`, raised before any payload is PUT;
- a malformed remote declaration is a :class:`~statecraft.errors.CheckpointCorruptError` naming
  its ``s3://`` URI; nothing is uploaded;
- a server that accepts a conditional create over an existing object is an
  :class:`~statecraft.errors.ArchiveError`; nothing but the declaration (rewritten with its own
  bytes) was sent;
- a local artifact that is not committed, or whose files do not match its manifest, is refused
  before any request;
- nothing local is ever modified, except the receipt written last.

A request whose outcome is unknown (a lost response) is resolved by looking at the object; a
crash anywhere is recovered by running the publish again (every step is idempotent).
"""

from __future__ import annotations

import hashlib
import logging
import sys

from statecraft.checkpoint.archive.declaration import (
    DECLARATION_NAME,
    ArchiveDeclaration,
    decode_declaration,
)
from statecraft.checkpoint.archive.inventory import ArchiveEntry, archived_files
from statecraft.checkpoint.archive.marker import UploadedMarker, marker_path, write_marker
from statecraft.checkpoint.archive.publish import publish_artifact
from statecraft.checkpoint.archive.publish_context import PublishContext, PublishReport
from statecraft.checkpoint.kernel.artifact_manifest import decode_artifact_manifest
from statecraft.checkpoint.kernel.layout import ARTIFACT_MANIFEST_NAME
from statecraft.engine import Bindings
from statecraft.engine.tagging import Role, collect_bindings, effect, observer
from statecraft.errors import (
    ArchiveError,
    ArchiveMismatchError,
    ObjectRequestError,
    PreconditionFailed,
)
from statecraft.storage.digest import file_digests

__all__ = [
    "PublishContext",
    "PublishReport",
    "publish_artifact",
    "publish_bindings",
]

log = logging.getLogger("statecraft.publish")

#: how often an accepted probe is repeated before the server is judged to ignore
#: ``If-None-Match`` (a probe retried after a transient failure may be resolved as "ours")
_PROBES = 2


# ----------------------------------------------------------------------------- observe
@observer()
def observe_publish(ctx: PublishContext) -> str:
    """Classify the local artifact and the remote archive (the table's ``[recover]`` keys):
    ``uncommitted``, ``unpublished``, ``declared``, ``remote_committed``, ``receipted``.
    Reads only (HEADs of two keys)."""
    manifest = f"{ctx.iter_dir}/{ARTIFACT_MANIFEST_NAME}"
    if ctx.artifacts.stat(manifest) is None:
        ctx.problem = (
            "absent"
            if ctx.artifacts.stat(ctx.iter_dir) is None
            else f"holds no artifact manifest ({ARTIFACT_MANIFEST_NAME})"
        )
        ctx.observed = "uncommitted"
    elif ctx.artifacts.stat(marker_path(ctx.iter_dir)) is not None:
        ctx.observed = "receipted"
    elif ctx.destination.bucket.stat(ctx.key(ARTIFACT_MANIFEST_NAME)) is not None:
        ctx.observed = "remote_committed"
    elif ctx.destination.bucket.stat(ctx.key(DECLARATION_NAME)) is not None:
        ctx.observed = "declared"
    else:
        ctx.observed = "unpublished"
    return ctx.observed


# ----------------------------------------------------------------------------- effects
@effect(role=Role.COORDINATOR)
def hash_local(ctx: PublishContext) -> None:
    """Prove the local artifact committed and intact and hash every file (one read each):
    the manifest parses, the directory holds exactly the files it lists (receipts and
    temporaries aside), each of its recorded size and digest. No request, no write.

    Raises:
        CheckpointCorruptError: the manifest is malformed or names another iteration.
        ArchiveError: files missing, unlisted, or of another size or digest than recorded.
    """
    store, name = ctx.artifacts, ctx.iter_dir
    source = f"{ctx.where}/{ARTIFACT_MANIFEST_NAME}"
    ctx.manifest_bytes = store.read_bytes(f"{name}/{ARTIFACT_MANIFEST_NAME}")
    manifest = decode_artifact_manifest(ctx.manifest_bytes, source=source)
    if manifest.iteration != ctx.iteration:
        raise ArchiveError(
            source,
            f"records iteration {manifest.iteration} but lives in {name}",
            "Nothing was uploaded; the directory was copied or renamed by hand.",
        )
    found = dict(archived_files(store, name))
    expected = {*manifest.files, ARTIFACT_MANIFEST_NAME}
    missing, extra = sorted(expected - set(found)), sorted(set(found) - expected)
    if missing or extra:
        raise ArchiveError(
            ctx.where,
            f"is not the committed artifact its manifest describes (missing {missing}, not "
            f"listed {extra})",
            "Nothing was uploaded; only an intact committed artifact is published (an extra "
            "file is never archived silently, a missing one never declared).",
        )
    entries = []
    for path in sorted(expected):
        recorded = manifest.files.get(path)
        if recorded is None:  # the manifest: the bytes read above are the bytes committed
            sha = hashlib.sha256(ctx.manifest_bytes).hexdigest()
            entries.append(ArchiveEntry(path, len(ctx.manifest_bytes), sha))
            continue
        algorithms = ("sha256", recorded.digest.algorithm)
        digests = file_digests(store, f"{name}/{path}", algorithms)
        size = found[path]
        if size != recorded.size or digests[recorded.digest.algorithm] != recorded.digest:
            raise ArchiveError(
                f"{ctx.where}/{path}",
                f"is {size} bytes with {digests[recorded.digest.algorithm]}, the artifact "
                f"manifest records {recorded.size} bytes with {recorded.digest}",
                "Nothing more was uploaded; the local payload was altered or damaged after its "
                "commit. Save the artifact again (move the damaged directory aside first).",
            )
        entries.append(ArchiveEntry(path, size, digests["sha256"].value))
    if found[ARTIFACT_MANIFEST_NAME] != len(ctx.manifest_bytes):
        raise ArchiveError(source, "changed while it was read", "Publish again.")
    ctx.entries = tuple(entries)
    ctx.declaration = ArchiveDeclaration.of(ctx.iteration, entries)


def _compare_declaration(ctx: PublishContext, data: bytes) -> None:
    key = ctx.key(DECLARATION_NAME)
    there = decode_declaration(data, source=ctx.uri(DECLARATION_NAME))
    differences = ctx.declared.differences(there)
    if differences:
        raise ArchiveMismatchError(
            ctx.uri(DECLARATION_NAME),
            "is the immutable declaration of a different inventory than the local artifact "
            f"{ctx.where} ({'; '.join(differences)}); no payload was touched",
            "Publish this artifact to another prefix, or, if the remote archive is not needed, "
            "delete everything under the remote iter_N prefix first.",
        )
    log.info("resuming the publish of %s: %s declares the same inventory", ctx.where, key)
    ctx.resumed = True


@effect(role=Role.COORDINATOR)
def declare(ctx: PublishContext) -> None:
    """Create the declaration by ``If-None-Match: *``; an existing one (found by HEAD first,
    or by the refused create) is compared, never replaced.

    Raises:
        ArchiveMismatchError: a different inventory is declared there (before any payload PUT).
        CheckpointCorruptError: the existing declaration is malformed.
        ObjectRequestError: the request failed and the object is not ours.
    """
    bucket, key = ctx.destination.bucket, ctx.key(DECLARATION_NAME)
    data = ctx.declared.encode()
    if bucket.stat(key) is not None:
        _compare_declaration(ctx, bucket.get(key))
        return
    try:
        bucket.put(key, data, if_none_match=True)
    except PreconditionFailed:
        _compare_declaration(ctx, bucket.get(key))
        return
    except ObjectRequestError:
        if bucket.stat(key) is None:  # the create did not happen: the rerun declares
            raise
        _compare_declaration(ctx, bucket.get(key))  # the response was lost: ours, or not
        return
    log.info("declared %s (%d files)", ctx.uri(DECLARATION_NAME), len(ctx.entries))


@effect(role=Role.COORDINATOR)
def prove_conditional(ctx: PublishContext) -> None:
    """A second ``If-None-Match: *`` create of the (existing) declaration, with its own bytes,
    must be refused; a server that accepts it (twice in a row) does not honour conditional
    writes, and the publish is refused before any payload is PUT.

    Raises:
        ArchiveError: the server accepted the create over an existing object.
        ObjectRequestError: the request failed.
    """
    bucket, key = ctx.destination.bucket, ctx.key(DECLARATION_NAME)
    data = ctx.declared.encode()
    for _ in range(_PROBES):
        try:
            bucket.put(key, data, if_none_match=True)
        except PreconditionFailed:
            return
    raise ArchiveError(
        ctx.uri(DECLARATION_NAME),
        f"{bucket.describe()} accepted a conditional create (If-None-Match: *) of an object "
        "that exists: it does not honour conditional writes, so an archive declaration there "
        "cannot be immutable; no payload was uploaded",
        "Publish to an S3 endpoint that supports If-None-Match on PUT (AWS S3, SeaweedFS, "
        "MinIO, recent Ceph RGW), or check that no proxy strips the header.",
    )


@effect(role=Role.COORDINATOR)
def upload_payloads(ctx: PublishContext) -> None:
    """PUT every payload (not the manifest) in path order, skipping an object already there
    with its declared size and stored sha256. The declared sha256 is deliberately not handed
    to the upload: the bucket hashes the file again as it uploads it and stores that, so a file
    changed since ``hash_local`` gets a stored sha256 that differs from the declared one, and
    ``verify_payloads`` refuses it (passing the declared value would save that read but make
    the metadata vouch for bytes it never saw).

    Raises:
        ObjectRequestError: a request failed after the bounded retries.
        FileNotFoundError: a local file vanished.
    """
    bucket = ctx.destination.bucket
    if ctx.lease is not None:
        ctx.lease.check()
    for entry in ctx.declared.payloads:
        key = ctx.key(entry.path)
        there = bucket.stat(key)
        if there is not None and entry.matches(there):
            ctx.skipped += 1
            continue
        bucket.upload_from(key, ctx.artifacts, f"{ctx.iter_dir}/{entry.path}")
        ctx.uploaded += 1
        ctx.bytes_uploaded += entry.size


def _verify(ctx: PublishContext, entry: ArchiveEntry) -> None:
    there = ctx.destination.bucket.stat(ctx.key(entry.path))
    if there is None:
        raise ArchiveError(
            ctx.uri(entry.path),
            "is missing right after its upload",
            "Nothing was committed and no receipt written; publish again.",
        )
    if not entry.matches(there):
        raise ArchiveError(
            ctx.uri(entry.path),
            f"is {there.size} bytes with stored sha256 {there.sha256 or '(none)'}, declared "
            f"{entry.size} bytes with sha256 {entry.sha256}",
            "Nothing was committed and no receipt written; the object was altered by another "
            "writer or the local file changed during the upload. Publish again.",
        )


@effect(role=Role.COORDINATOR)
def verify_payloads(ctx: PublishContext) -> None:
    """A HEAD of every payload must report its declared size and stored sha256.

    Raises:
        ArchiveError: an object is missing or differs (nothing committed).
    """
    for entry in ctx.declared.payloads:
        _verify(ctx, entry)


def _compare_manifest(ctx: PublishContext, data: bytes) -> None:
    if data != ctx.manifest_bytes:
        raise ArchiveMismatchError(
            ctx.uri(ARTIFACT_MANIFEST_NAME),
            f"is a committed artifact manifest of other bytes than {ctx.where}'s own",
            "The remote archive is committed and immutable; publish to another prefix.",
        )


@effect(role=Role.COORDINATOR)
def commit_manifest(ctx: PublishContext) -> None:
    """Commit the artifact manifest remotely by ``If-None-Match: *``, after every payload was
    verified; identical bytes already there are fine. Then verify it like a payload.

    Raises:
        ArchiveMismatchError: another manifest is committed there.
        ObjectRequestError: the request failed and the object is not there.
        ArchiveError: the committed object does not match its declared size and sha256.
    """
    bucket, key = ctx.destination.bucket, ctx.key(ARTIFACT_MANIFEST_NAME)
    if bucket.stat(key) is not None:
        _compare_manifest(ctx, bucket.get(key))
        ctx.skipped += 1
    else:
        try:
            bucket.put(key, ctx.manifest_bytes, if_none_match=True)
            ctx.uploaded += 1
            ctx.bytes_uploaded += len(ctx.manifest_bytes)
        except PreconditionFailed:
            _compare_manifest(ctx, bucket.get(key))
        except ObjectRequestError:
            if bucket.stat(key) is None:
                raise
            _compare_manifest(ctx, bucket.get(key))
    _verify(ctx, ctx.declared.manifest_entry)


@effect(role=Role.COORDINATOR)
def write_receipt(ctx: PublishContext) -> None:
    """Write ``checkpoint_artifacts/iter_N/.uploaded`` (kind ``artifact``, every entry with
    sha256) atomically and durably: the only local write of a publish."""
    if ctx.lease is not None:
        ctx.lease.check()
    marker = UploadedMarker(
        kind="artifact",
        iteration=ctx.iteration,
        destination=ctx.destination.record(ctx.remote_prefix),
        files=ctx.declared.files,
    )
    write_marker(ctx.artifacts, ctx.iter_dir, marker)
    ctx.marker = marker


@effect(role=Role.COORDINATOR)
def refuse_uncommitted(ctx: PublishContext) -> None:
    """The local artifact is absent or not committed: nothing to publish.

    Raises:
        ArchiveError: always; nothing was requested or written.
    """
    raise ArchiveError(
        ctx.where,
        f"is not a committed artifact ({ctx.problem or 'no artifact manifest'}); nothing was "
        "uploaded",
        "Publish only an artifact whose save committed (its "
        f"{ARTIFACT_MANIFEST_NAME} exists); an interrupted save is never archived.",
    )


def publish_bindings() -> Bindings:
    """The bindings of this module's table, collected from the tags above."""
    return collect_bindings(sys.modules[__name__])
