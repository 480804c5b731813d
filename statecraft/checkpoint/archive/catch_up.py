"""The archive upload a save runs (:func:`archive_saved`): the saved ``iter_N`` first, then,
once that succeeded, a bounded catch-up of the committed iterations an archive outage left
without a receipt, oldest first, so retention can release them; then, with
``upload.keep_last``, remote retention
(:func:`~statecraft.checkpoint.archive.remote_retention.prune_remote`).

Why: retention never prunes an iteration without ``iter_N/.uploaded`` (nothing committed is
lost), so after an outage the iterations whose upload failed would otherwise stay on disk
forever, never archived. Each save now uploads its own checkpoint and then at most
``upload.catch_up_per_save`` of those (``0``: none), stopping at the first failure: the archive
is likely down again, and the next save tries again.

Logging: one WARNING per failed upload, summarising it (the iteration, the destination, the
error, and how many requests were retried on the way); the per-request retry lines of the
bucket client (``statecraft.storage.s3``) are demoted to DEBUG while this thread uploads
(:func:`summarised_retries`). After the catch-up, a WARNING when the committed iterations
still without a receipt hold more than ``upload.pending_disk_share`` of the disk of the
checkpoints root.

Example::

    outcome = archive_saved(store, 6, destination, lease=lease)
    outcome.report          # the UploadReport of iter_6 (None: it failed, outcome.error)
    outcome.caught_up       # (2, 4): older iterations archived by this save
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
from collections.abc import Iterator

import attrs

from statecraft.checkpoint.archive.destination import ArchiveDestination
from statecraft.checkpoint.archive.inventory import archived_files
from statecraft.checkpoint.archive.remote_retention import prune_remote
from statecraft.checkpoint.archive.upload_bindings import (
    UploadContext,
    UploadReport,
    observe_upload,
    upload_checkpoint,
)
from statecraft.checkpoint.fencing.lease import WriterLease
from statecraft.checkpoint.kernel.catalog import CheckpointState, classify, list_directories
from statecraft.checkpoint.kernel.layout import LATEST_POINTER, iter_dirname, parse_latest
from statecraft.errors import UploadRefusedError
from statecraft.storage.base import Store

__all__ = ["ArchiveOutcome", "archive_saved", "pending_uploads", "summarised_retries"]

log = logging.getLogger("statecraft.upload")

#: the bucket client's logger, whose per-request retry lines an upload summarises
BUCKET_LOGGER = "statecraft.storage.s3"


@attrs.frozen
class ArchiveOutcome:
    """What the archive upload of one save did.

    Attributes:
        report: the saved iteration's upload (``None``: it failed, see ``error``).
        error: why the saved iteration's upload failed (``None``: it did not).
        caught_up: older iterations archived by this save's catch-up, oldest first.
        catch_up_error: why the catch-up stopped early (``None``: it did not).
        pending: committed iterations still without a receipt, oldest first.
        pending_bytes: their bytes on disk.
        pruned: iterations remote retention (``upload.keep_last``) removed from the bucket.
        prune_error: why remote retention failed (``None``: it did not, or was off).
    """

    report: UploadReport | None
    error: Exception | None = None
    caught_up: tuple[int, ...] = ()
    catch_up_error: Exception | None = None
    pending: tuple[int, ...] = ()
    pending_bytes: int = 0
    pruned: tuple[int, ...] = ()
    prune_error: Exception | None = None


class _RetryDemoter(logging.Filter):
    """Counts and demotes to DEBUG the bucket client's WARNING lines logged by one thread."""

    def __init__(self, thread: int) -> None:
        super().__init__()
        self.thread = thread
        self.retries = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.thread == self.thread and record.levelno == logging.WARNING:
            self.retries += 1
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


@contextlib.contextmanager
def summarised_retries() -> Iterator[_RetryDemoter]:
    """While the block runs, the bucket client's per-request WARNING lines (a retried request)
    from this thread are counted and logged at DEBUG instead; the caller logs one summary."""
    demoter = _RetryDemoter(threading.get_ident())
    bucket_log = logging.getLogger(BUCKET_LOGGER)
    bucket_log.addFilter(demoter)
    try:
        yield demoter
    finally:
        bucket_log.removeFilter(demoter)


def _retried(count: int) -> str:
    return f" after {count} retried request{'s' if count != 1 else ''}" if count else ""


def pending_uploads(
    store: Store, destination: ArchiveDestination, *, exclude: int | None = None
) -> list[int]:
    """The committed iterations of ``store`` without a receipt binding ``destination``,
    oldest first (``exclude``: one left out, the save in progress). Reads only: a listing, a
    stat of each receipt, and the manifest of each iteration without one."""
    found = []
    for iteration in sorted(list_directories(store)):
        if iteration == exclude:
            continue
        ctx = UploadContext(store, iteration, destination)
        if observe_upload(ctx) == "uploaded":
            continue
        entry = classify(store, iteration, level="manifest")
        if entry.state is CheckpointState.COMMITTED:
            found.append(iteration)
    return found


def _bytes_of(store: Store, iterations: list[int]) -> int:
    total = 0
    for iteration in iterations:
        try:
            total += sum(size for _, size in archived_files(store, iter_dirname(iteration)))
        except FileNotFoundError:
            continue
    return total


def _warn_disk_share(store: Store, pending: list[int], pending_bytes: int, share: float) -> None:
    local = store.local_path("")
    if local is None or not pending:
        return
    disk = shutil.disk_usage(local).total
    if disk <= 0 or pending_bytes <= share * disk:
        return
    log.warning(
        "%s: %d committed checkpoint(s) without an archive receipt (%s) hold %d bytes, %.1f%% "
        "of the disk (more than upload.pending_disk_share=%g): retention keeps them until "
        "they are archived. Check that the archive destination answers; each save uploads "
        "up to upload.catch_up_per_save of them",
        store.describe(), len(pending), ", ".join(iter_dirname(n) for n in pending[:8]),
        pending_bytes, 100.0 * pending_bytes / disk, share,
    )  # fmt: skip


def archive_saved(
    store: Store,
    iteration: int,
    destination: ArchiveDestination,
    *,
    lease: WriterLease | None = None,
    catch_up: int | None = None,
    pending_disk_share: float | None = None,
) -> ArchiveOutcome:
    """Upload the saved ``iter_N``, then (only when that succeeded) up to ``catch_up``
    committed iterations still without a receipt, oldest first. Best effort: no upload error
    is raised (each failure is one WARNING and lands in the outcome); the local checkpoints
    are never touched but for their receipts.

    Args:
        catch_up: iterations archived besides ``iter_N`` at most (default: the
            destination's ``catch_up_per_save``).
        pending_disk_share: warn when the iterations still without a receipt hold more than
            this share of the disk (default: the destination's).

    A :class:`~statecraft.errors.WriterLeaseError` (another process took the attempt over)
    fails the saved iteration's upload like any other error, and stops the catch-up.
    """
    limit = destination.catch_up_per_save if catch_up is None else catch_up
    share = destination.pending_disk_share if pending_disk_share is None else pending_disk_share
    where = destination.uri(destination.iteration_prefix(iteration))
    with summarised_retries() as retries:
        try:
            report = upload_checkpoint(store, iteration, destination, lease=lease)
        except Exception as exc:  # best effort: the checkpoint is durable locally and kept
            log.warning(
                "the upload of %s to %s failed%s (the local checkpoint is kept and retention "
                "will not prune it; a later save uploads it once the archive answers): %s",
                iter_dirname(iteration), where, _retried(retries.retries), exc,
            )  # fmt: skip
            pending, pending_bytes = _still_pending(store, destination, share)
            return ArchiveOutcome(None, exc, pending=pending, pending_bytes=pending_bytes)
        caught_up: list[int] = []
        failed: Exception | None = None
        try:
            candidates = pending_uploads(store, destination, exclude=iteration) if limit else []
        except Exception as exc:  # reading the root failed: no catch-up this time
            log.warning("the archive catch-up could not list %s: %s", store.describe(), exc)
            candidates = []
        for older in candidates:  # a refused one (validation pending) uses no slot
            if len(caught_up) >= limit:
                break
            before = retries.retries
            try:
                upload_checkpoint(store, older, destination, lease=lease)
            except UploadRefusedError as exc:  # pending validation, weights-only: not ours
                log.debug("catch-up skips %s: %s", iter_dirname(older), exc)
                continue
            except Exception as exc:
                failed = exc
                log.warning(
                    "the catch-up upload of %s to %s failed%s (kept locally; the next save "
                    "tries again): %s",
                    iter_dirname(older), destination.uri(destination.iteration_prefix(older)),
                    _retried(retries.retries - before), exc,
                )  # fmt: skip
                break
            caught_up.append(older)
        if caught_up:
            log.info(
                "caught up the archive of %s (committed before an archive outage)",
                ", ".join(iter_dirname(n) for n in caught_up),
            )
        pruned, prune_error = _remote_retention(store, destination)
    pending, pending_bytes = _still_pending(store, destination, share)
    return ArchiveOutcome(
        report, None, tuple(caught_up), failed, pending, pending_bytes, pruned, prune_error
    )


def _local_latest(store: Store) -> int | None:
    try:
        return parse_latest(store.read_bytes(LATEST_POINTER))
    except (OSError, ValueError):
        return None


def _remote_retention(
    store: Store, destination: ArchiveDestination
) -> tuple[tuple[int, ...], Exception | None]:
    """``upload.keep_last`` after a successful upload: remove the published iterations beyond
    the newest N (never the newest, never the one the local ``latest`` names). Best effort:
    one WARNING on failure (the next save's pass finishes a removal this one left)."""
    if destination.keep_last < 1:
        return (), None
    latest = _local_latest(store)
    protected = {latest: "named by the local latest"} if latest is not None else {}
    try:
        report = prune_remote(
            destination.bucket, destination.prefix, destination.keep_last, protected=protected
        )
    except Exception as exc:
        log.warning(
            "remote retention (upload.keep_last=%d) of %s failed (an iteration it was removing "
            "is whole or unpublished; the next save finishes it): %s",
            destination.keep_last, destination.uri(destination.prefix), exc,
        )  # fmt: skip
        return (), exc
    return report.deleted, None


def _still_pending(
    store: Store, destination: ArchiveDestination, share: float
) -> tuple[tuple[int, ...], int]:
    """The iterations still without a receipt and their bytes, warning past ``share`` of the
    disk (best effort: a failure to read is logged at DEBUG, never raised)."""
    try:
        pending = pending_uploads(store, destination)
        pending_bytes = _bytes_of(store, pending)
        _warn_disk_share(store, pending, pending_bytes, share)
    except Exception as exc:
        log.debug("could not measure the checkpoints without a receipt: %s", exc)
        return (), 0
    return tuple(pending), pending_bytes
