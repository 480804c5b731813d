"""Publish one committed artifact to its archive: :func:`publish_artifact`, the one operation
the trainer and ``statecraft archive publish`` use. It runs the ``publish`` machine
(``machines/publish.toml``; its effects are :mod:`.publish_bindings`) and reports what was sent.
"""

from __future__ import annotations

import logging
import time

from statecraft.checkpoint.archive.destination import ArchiveDestination
from statecraft.checkpoint.archive.publish_context import PublishContext, PublishReport
from statecraft.checkpoint.fencing.lease import WriterLease
from statecraft.errors import ArchiveError
from statecraft.storage.base import Store

__all__ = ["publish_artifact"]

log = logging.getLogger("statecraft.publish")


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
