"""The effect bindings of the ``upload`` machine (``machines/upload.toml``), and
:func:`upload_checkpoint`, the archive upload of one committed full checkpoint.

The table is the order: check the iteration may be archived -> inventory -> every file but the
manifest (HEAD first; same size, and same sha256 when both sides know one, is skipped; else an
unconditional PUT) -> the manifest last -> verify every object by HEAD -> the local receipt
``iter_N/.uploaded``. This module says *how* each step acts on the checkpoints root and the
bucket; it never decides the order. See ``specs/upload.toml`` for the guarantees, proven by
``statecraft crashcheck --machine upload``.

::

    report = upload_checkpoint(store, 100, ArchiveDestination(bucket, prefix))
    report.marker.destination.uri()     # s3://ckpt-bucket/<prefix>/iter_000000100

Failure modes: a refused iteration raises :class:`~statecraft.errors.UploadRefusedError`
before any request; a failed request or verification raises ``ObjectRequestError`` /
``ArchiveError``: no receipt is written, nothing local is changed, and a retry completes it
(what is already remote and matches is skipped). The best-effort catch is the caller's.
"""

from __future__ import annotations

import logging
import sys
import time

import attrs

from statecraft.checkpoint.archive.destination import ArchiveDestination
from statecraft.checkpoint.archive.inventory import (
    ArchiveEntry,
    archived_files,
    sha256_of,
    upload_order,
)
from statecraft.checkpoint.archive.marker import (
    LegacyMarker,
    UploadedMarker,
    marker_path,
    read_marker,
    write_marker,
)
from statecraft.checkpoint.archive.upload_progress import UploadProgress
from statecraft.checkpoint.fencing.lease import WriterLease
from statecraft.checkpoint.kernel.catalog import CheckpointState, classify
from statecraft.checkpoint.kernel.layout import MANIFEST_NAME, iter_dirname
from statecraft.checkpoint.kernel.plan import TRAINER_ENTRY
from statecraft.checkpoint.kernel.validation_records import ValidationStage, read_stage
from statecraft.checkpoint.state import TrainerState
from statecraft.engine import Bindings, RunResult
from statecraft.engine.tagging import Role, collect_bindings, effect, observer
from statecraft.errors import ArchiveError, CheckpointCorruptError, UploadRefusedError
from statecraft.storage.base import Store
from statecraft.storage.digest import file_digest
from statecraft.writers.consolidated import ConsolidatedWriter

__all__ = [
    "CONTROL_FILES",
    "SMALL_FILE_BYTES",
    "UploadContext",
    "UploadReport",
    "upload_bindings",
    "upload_checkpoint",
]

log = logging.getLogger("statecraft.upload")

#: files whose sha256 the inventory always records (small control state and the commit)
CONTROL_FILES = frozenset({MANIFEST_NAME, TRAINER_ENTRY, "data.pt"})
#: any other file up to this size is hashed too (cheap); bulk above it stays ``sha256=None``
SMALL_FILE_BYTES = 1 << 20


@attrs.define
class UploadContext:
    """One upload of ``iter_N`` of a checkpoints root.

    Attributes:
        store: the checkpoints root (``.../<RUN_TS>/checkpoints``); only ``iter_N/.uploaded``
            is ever written there.
        iteration: the checkpoint archived.
        destination: the bucket and checkpoints-root prefix (``<prefix>/iter_N/<rel>``).
        lease: this process's writer lease, checked before the receipt is written (``None``:
            the harness's single writer, tools).
        pending_ok: the validation publication step archives an evaluation- or
            publication-pending checkpoint (otherwise refused).
        hash_limit: files up to this size are hashed (besides :data:`CONTROL_FILES`).
        entries: the inventory (set by ``take_inventory``).
        uploaded / skipped / bytes_uploaded: PUTs sent, objects skipped, bytes PUT.
        marker: the receipt written or found.
    """

    store: Store
    iteration: int
    destination: ArchiveDestination
    lease: WriterLease | None = None
    pending_ok: bool = False
    hash_limit: int = SMALL_FILE_BYTES
    entries: tuple[ArchiveEntry, ...] = ()
    uploaded: int = 0
    skipped: int = 0
    bytes_uploaded: int = 0
    marker: UploadedMarker | None = None

    @property
    def iter_dir(self) -> str:
        return iter_dirname(self.iteration)

    @property
    def where(self) -> str:
        return f"{self.store.describe()}/{self.iter_dir}"

    @property
    def remote_prefix(self) -> str:
        return self.destination.iteration_prefix(self.iteration)

    def key(self, relative: str) -> str:
        return f"{self.remote_prefix}/{relative}"

    def uri(self, relative: str = "") -> str:
        return self.destination.uri(self.key(relative) if relative else self.remote_prefix)


@attrs.frozen
class UploadReport:
    """One completed upload.

    Attributes:
        iteration: the checkpoint archived.
        files: objects in the inventory.
        uploaded: PUTs this run sent; skipped: objects already remote and matching.
        bytes_uploaded: bytes PUT; seconds: wall time.
        marker: the receipt (``iter_N/.uploaded``).
    """

    iteration: int
    files: int
    uploaded: int
    skipped: int
    bytes_uploaded: int
    seconds: float
    marker: UploadedMarker


def upload_checkpoint(
    store: Store,
    iteration: int,
    destination: ArchiveDestination,
    *,
    lease: WriterLease | None = None,
    pending_ok: bool = False,
) -> UploadReport:
    """Archive committed ``iter_N`` of the checkpoints root ``store`` to
    ``destination.iteration_prefix(N)``: run ``machines/upload.toml`` (observe the receipt,
    then upload or settle).

    Returns:
        the report (``uploaded == 0`` when a receipt binding this destination was found, or
        every object was already remote and matching).

    Raises:
        UploadRefusedError: ``iter_N`` is not committed, weights-only, invalidated, or
            evaluation/publication-pending (without ``pending_ok``); nothing was touched.
        ObjectRequestError / ArchiveError: a request or the verification failed; no receipt
            was written and nothing local changed (retry: matching objects are skipped).
        WriterLeaseError: another process took over the attempt before the receipt.
    """
    from statecraft.checkpoint.kernel.machines import shipped_machine

    started = time.perf_counter()
    ctx = UploadContext(store, iteration, destination, lease=lease, pending_ok=pending_ok)
    result: RunResult = shipped_machine("upload").recover(ctx)
    result.raise_for_failure()
    if ctx.marker is None:  # pragma: no cover - every path to "uploaded" sets it
        raise ArchiveError(ctx.where, "the upload ended without a receipt")
    seconds = time.perf_counter() - started
    log.info(
        "archived %s to %s: %d files, %d uploaded (%d bytes), %d skipped in %.2fs",
        ctx.iter_dir, ctx.uri(), len(ctx.marker.files), ctx.uploaded, ctx.bytes_uploaded,
        ctx.skipped, seconds,
    )  # fmt: skip
    return UploadReport(
        iteration,
        len(ctx.marker.files),
        ctx.uploaded,
        ctx.skipped,
        ctx.bytes_uploaded,
        seconds,
        ctx.marker,
    )


def receipt_binds(marker: UploadedMarker | LegacyMarker, ctx: UploadContext) -> bool:
    """``marker`` is a v1 receipt of this checkpoint at this destination."""
    return (
        isinstance(marker, UploadedMarker)
        and marker.kind == "checkpoint"
        and marker.iteration == ctx.iteration
        and marker.destination.binds(ctx.destination.bucket.identity())
        and marker.destination.prefix == ctx.remote_prefix
    )


# ----------------------------------------------------------------------------- observe
@observer()
def observe_upload(ctx: UploadContext) -> str:
    """``uploaded`` when ``iter_N/.uploaded`` is a v1 receipt of this iteration binding this
    destination (endpoint, bucket, prefix), else ``pending`` (absent, legacy, damaged, or
    another destination's: redone). Reads only."""
    if ctx.store.stat(marker_path(ctx.iter_dir)) is None:
        return "pending"
    try:
        marker = read_marker(ctx.store, ctx.iter_dir)
    except (CheckpointCorruptError, OSError):
        return "pending"
    if not receipt_binds(marker, ctx):
        return "pending"
    ctx.marker = marker  # type: ignore[assignment]
    return "uploaded"


# ----------------------------------------------------------------------------- effects
def _refuse(ctx: UploadContext, problem: str) -> UploadRefusedError:
    return UploadRefusedError(
        ctx.where,
        f"{problem}; the upload to {ctx.uri()} was refused and nothing was touched",
        "Only a committed, resumable checkpoint is archived by the upload.",
    )


def _stage(ctx: UploadContext, manifest: object) -> ValidationStage:
    """The validation stage of committed ``iter_N`` (its verified ``trainer.pt`` and the
    visibility records beside it)."""
    path = f"{ctx.iter_dir}/{TRAINER_ENTRY}"
    files = getattr(manifest, "files", {})
    entry = files.get(TRAINER_ENTRY)
    stat = ctx.store.stat(path)
    if entry is None or stat is None or stat.size != entry.size:
        raise _refuse(ctx, f"{TRAINER_ENTRY} does not match its manifest entry")
    if file_digest(ctx.store, path, entry.digest.algorithm) != entry.digest:
        raise _refuse(ctx, f"{TRAINER_ENTRY} does not match its recorded digest")
    payload = ConsolidatedWriter().read(ctx.store, path, mmap=False)
    saved = TrainerState.from_payload(payload, source=f"{ctx.store.describe()}/{path}").validation
    return read_stage(ctx.store, ctx.iteration, saved).stage


@effect(role=Role.COORDINATOR)
def check_eligible(ctx: UploadContext) -> None:
    """Refuse an iteration that may not be archived (no store operation that writes).

    Raises:
        UploadRefusedError: not committed (absent, partial, corrupt), weights-only,
            invalidated, or evaluation/publication-pending without ``pending_ok``.
    """
    entry = classify(ctx.store, ctx.iteration, level="manifest")
    if entry.state is not CheckpointState.COMMITTED or entry.verified is None:
        raise _refuse(ctx, f"it is {entry.state.value} ({entry.reason})")
    if ctx.pending_ok:
        return
    stage = _stage(ctx, entry.verified.manifest)
    if stage in (ValidationStage.EVALUATION_PENDING, ValidationStage.PUBLICATION_PENDING):
        raise _refuse(
            ctx,
            f"its validation is {stage.value} (the validation publication archives it once "
            "evaluated)",
        )


@effect(role=Role.COORDINATOR)
def take_inventory(ctx: UploadContext) -> None:
    """List every archived file of ``iter_N`` with its size, sha256 for the control files and
    the small ones (reads only)."""
    entries = []
    for path, size in archived_files(ctx.store, ctx.iter_dir):
        hashed = path in CONTROL_FILES or size <= ctx.hash_limit
        digest = sha256_of(ctx.store, f"{ctx.iter_dir}/{path}") if hashed else None
        entries.append(ArchiveEntry(path, size, digest))
    if not any(e.path == MANIFEST_NAME for e in entries):
        raise ArchiveError(ctx.where, f"holds no {MANIFEST_NAME} to archive")
    ctx.entries = tuple(entries)


def _put(ctx: UploadContext, entry: ArchiveEntry) -> None:
    """HEAD ``entry``'s object; skip it when it matches, else PUT it (unconditional: the same
    bytes under the same key, so a retry is idempotent)."""
    key = ctx.key(entry.path)
    bucket = ctx.destination.bucket
    there = bucket.stat(key)
    if there is not None and entry.matches(there):
        ctx.skipped += 1
        return
    bucket.upload_from(key, ctx.store, f"{ctx.iter_dir}/{entry.path}", sha256=entry.sha256)
    ctx.uploaded += 1
    ctx.bytes_uploaded += entry.size


def _entries(ctx: UploadContext) -> dict[str, ArchiveEntry]:
    if not ctx.entries:
        raise ArchiveError(ctx.where, "an upload step ran before the inventory was taken")
    return {e.path: e for e in ctx.entries}


@effect(role=Role.COORDINATOR)
def upload_files(ctx: UploadContext) -> None:
    """Every archived file except the manifest, in path order (HEAD, then skip or PUT)."""
    by_path = _entries(ctx)
    progress = UploadProgress(
        f"{ctx.where} to {ctx.uri()}", len(by_path), sum(e.size for e in by_path.values())
    )
    progress.start()
    for path in upload_order(by_path, last=(MANIFEST_NAME,)):
        if path != MANIFEST_NAME:
            _put(ctx, by_path[path])
            progress.advance(by_path[path].size)


@effect(role=Role.COORDINATOR)
def upload_manifest(ctx: UploadContext) -> None:
    """The manifest, after every other file (HEAD, then skip or PUT)."""
    _put(ctx, _entries(ctx)[MANIFEST_NAME])


@effect(role=Role.COORDINATOR)
def verify_remote(ctx: UploadContext) -> None:
    """HEAD every object of the inventory: present, its size, and its stored sha256 where the
    inventory records one.

    Raises:
        ArchiveError: an object is missing or does not match (named, expected vs. found).
    """
    bucket = ctx.destination.bucket
    for entry in _entries(ctx).values():
        there = bucket.stat(ctx.key(entry.path))
        if there is None:
            raise ArchiveError(
                ctx.uri(entry.path), "is missing after its upload", "Retry the upload."
            )
        if not entry.matches(there):
            raise ArchiveError(
                ctx.uri(entry.path),
                f"holds {there.size} bytes (sha256 {there.sha256 or 'unknown'}); expected "
                f"{entry.size} bytes (sha256 {entry.sha256 or 'not recorded'})",
                "Retry the upload (a mismatching object is uploaded again).",
            )


@effect(role=Role.COORDINATOR)
def write_receipt(ctx: UploadContext) -> None:
    """Write ``iter_N/.uploaded`` atomically and durably: this destination and the verified
    inventory (only after ``verify_remote``)."""
    entries = _entries(ctx)
    if ctx.lease is not None:
        ctx.lease.check()
    marker = UploadedMarker(
        kind="checkpoint",
        iteration=ctx.iteration,
        destination=ctx.destination.record(ctx.remote_prefix),
        files=tuple(entries[p] for p in sorted(entries)),
    )
    write_marker(ctx.store, ctx.iter_dir, marker)
    ctx.marker = marker


@effect(role=Role.COORDINATOR)
def settle_receipt(ctx: UploadContext) -> None:
    """A receipt binding this destination was found: make it durable by writing the same
    receipt again (atomically: a killed writer may have left it in the page cache only, and
    after a failed directory fsync no second fsync is known to persist the old entry);
    nothing is uploaded."""
    if ctx.marker is None:
        raise ArchiveError(ctx.where, "settle_receipt ran without a found receipt")
    if ctx.lease is not None:
        ctx.lease.check()
    write_marker(ctx.store, ctx.iter_dir, ctx.marker)


def upload_bindings() -> Bindings:
    """The bindings of this module's table, collected from the tags above."""
    return collect_bindings(sys.modules[__name__])
