"""The effect bindings of the ``publish`` machine (``machines/publish.toml``), and
:func:`publish_artifact`, the one operation the trainer and ``statecraft archive publish`` use.

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
import time

import attrs

from statecraft.checkpoint.archive.declaration import (
    DECLARATION_NAME,
    ArchiveDeclaration,
    decode_declaration,
)
from statecraft.checkpoint.archive.destination import ArchiveDestination
from statecraft.checkpoint.archive.inventory import ArchiveEntry, archived_files
from statecraft.checkpoint.archive.marker import UploadedMarker, marker_path, write_marker
from statecraft.checkpoint.fencing.lease import WriterLease
from statecraft.checkpoint.kernel.artifact_manifest import decode_artifact_manifest
from statecraft.checkpoint.kernel.layout import ARTIFACT_MANIFEST_NAME, iter_dirname
from statecraft.engine import Bindings
from statecraft.engine.tagging import Role, collect_bindings, effect, observer
from statecraft.errors import (
    ArchiveError,
    ArchiveMismatchError,
    ObjectRequestError,
    PreconditionFailed,
)
from statecraft.storage.base import Store
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


@attrs.frozen
class PublishReport:
    """A completed publish.

    Attributes:
        iteration: the artifact's ``iter_N``.
        files: archived files (the manifest included).
        uploaded / skipped: payloads PUT by this run / found remotely with the declared size
            and sha256 (the manifest counts as uploaded when this run created it).
        bytes_uploaded: bytes this run sent.
        seconds: wall time.
        remote_prefix: the archive's key prefix (``<artifacts prefix>/iter_N``).
        marker: the receipt written locally.
    """

    iteration: int
    files: int
    uploaded: int
    skipped: int
    bytes_uploaded: int
    seconds: float
    remote_prefix: str
    marker: UploadedMarker


@attrs.define
class PublishContext:
    """One publish of artifact ``iteration``.

    Attributes:
        artifacts: the ``checkpoint_artifacts`` root store.
        destination: the bucket and the checkpoints-root prefix.
        lease: this process's writer lease, checked before the receipt is written.
        entries: every local file with size and sha256 (filled by ``hash_local``).
        manifest_bytes: the local artifact manifest's bytes (filled by ``hash_local``).
        declaration: the inventory, as declared (filled by ``hash_local``).
        resumed: the declaration already existed (an earlier run declared it).
        observed / problem: what ``observe_publish`` found, and why when uncommitted.
        uploaded / skipped / bytes_uploaded: this run's counters.
        marker: the receipt, once written.
    """

    artifacts: Store
    iteration: int
    destination: ArchiveDestination
    lease: WriterLease | None = None
    entries: tuple[ArchiveEntry, ...] = ()
    manifest_bytes: bytes = b""
    declaration: ArchiveDeclaration | None = None
    resumed: bool = False
    observed: str = ""
    problem: str = ""
    uploaded: int = 0
    skipped: int = 0
    bytes_uploaded: int = 0
    marker: UploadedMarker | None = None

    @property
    def iter_dir(self) -> str:
        return iter_dirname(self.iteration)

    @property
    def where(self) -> str:
        return f"{self.artifacts.describe()}/{self.iter_dir}"

    @property
    def remote_prefix(self) -> str:
        return self.destination.artifact_prefix(self.iteration)

    def key(self, relative: str) -> str:
        return f"{self.remote_prefix}/{relative}"

    def uri(self, relative: str = "") -> str:
        return self.destination.uri(self.key(relative) if relative else self.remote_prefix)

    @property
    def declared(self) -> ArchiveDeclaration:
        if self.declaration is None:
            raise ArchiveError(
                self.where, "a publish step ran before hash_local", "This is a bug in the table."
            )
        return self.declaration


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


def publish_artifact(
    artifacts: Store,
    iteration: int,
    destination: ArchiveDestination,
    *,
    lease: WriterLease | None = None,
) -> PublishReport:
    """Archive the committed artifact ``iteration`` of ``artifacts`` (the
    ``checkpoint_artifacts`` root) to ``destination.artifact_prefix(iteration)`` by the
    ``publish`` machine, and write its local ``.uploaded`` receipt.

    Idempotent: a rerun after any failure or crash resumes the same archive (skipping what is
    verified there) and finishes it.

    Raises:
        ArchiveError: the local artifact is not committed or not intact; the server does not
            honour conditional writes; a remote object is missing or differs.
        ArchiveMismatchError: the destination declares (or committed) a different inventory;
            nothing was touched.
        CheckpointCorruptError: the local manifest or the remote declaration is malformed.
        ObjectRequestError: a request failed after the bounded retries (run it again).
        WriterLeaseError: the lease was taken over before the receipt.
    """
    from statecraft.checkpoint.kernel.machines import shipped_machine

    started = time.monotonic()
    ctx = PublishContext(artifacts, iteration, destination, lease=lease)
    shipped_machine("publish").recover(ctx).raise_for_failure()
    if ctx.marker is None:  # pragma: no cover - the table ends in published only after it
        raise ArchiveError(ctx.where, "the publish ended without a receipt", "Publish again.")
    report = PublishReport(
        iteration=iteration,
        files=len(ctx.declared.files),
        uploaded=ctx.uploaded,
        skipped=ctx.skipped,
        bytes_uploaded=ctx.bytes_uploaded,
        seconds=time.monotonic() - started,
        remote_prefix=ctx.remote_prefix,
        marker=ctx.marker,
    )
    log.info(
        "published %s to %s: %d files, %d uploaded, %d already there, %d bytes in %.2fs",
        ctx.where,
        ctx.uri(),
        report.files,
        report.uploaded,
        report.skipped,
        report.bytes_uploaded,
        report.seconds,
    )
    return report
