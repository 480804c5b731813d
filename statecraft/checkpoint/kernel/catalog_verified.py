"""The catalog's classification at the verification levels (``"manifest"``, ``"size"``,
``"digest"``): one iteration proven with
:func:`~statecraft.checkpoint.kernel.verify.verify_checkpoint`, what resume, ``statecraft
inspect``, the save, validation and upload machines read.
"""

from __future__ import annotations

from statecraft.checkpoint.kernel.catalog_entries import CatalogEntry, CheckpointState
from statecraft.checkpoint.kernel.layout import MANIFEST_NAME, iter_dirname
from statecraft.checkpoint.kernel.retention_marks import MarkKind, read_mark
from statecraft.checkpoint.kernel.validation_records import read_stage
from statecraft.checkpoint.kernel.verify import verify_checkpoint
from statecraft.errors import CheckpointCorruptError, CheckpointError
from statecraft.storage.base import Store
from statecraft.writers.base import Writer

__all__ = ["classify"]


def _reason(exc: Exception) -> str:
    return str(exc) if isinstance(exc, CheckpointError) else f"{type(exc).__name__}: {exc}"


def classify(
    store: Store,
    iteration: int,
    *,
    level: str = "digest",
    writer: Writer | None = None,
    keep_payloads: bool = True,
) -> CatalogEntry:
    """The state of one iteration of ``store``, verified at ``level``.

    The store operations are, in order: ``stat(iter_N)``, the retention markers
    (:func:`~statecraft.checkpoint.kernel.retention_marks.read_mark`: two ``stat`` calls when there
    is none), ``stat(iter_N/<manifest>)``, reading the manifest, then (levels ``size`` /
    ``digest``) the files' stats, digests, ``trainer.pt`` and every other file parsed
    (``keep_payloads``: see :func:`~statecraft.checkpoint.kernel.verify.verify_checkpoint`), and,
    for
    a verified checkpoint at those levels, the listing of ``iter_N`` and its visibility records
    (:func:`~statecraft.checkpoint.kernel.validation_records.read_stage`, from the verified
    ``trainer.pt``'s ``validation`` state). An invalidation marker makes the iteration
    ``INVALIDATED`` before anything else is read; a weights-only marker beside a manifest makes
    a checkpoint that verifies without its optimizer entries ``WEIGHTS_ONLY``. An unreadable
    manifest is ``CORRUPT`` at every level; at level ``"manifest"`` a readable one without a
    marker is ``COMMITTED`` (stage not read).
    """
    name = iter_dirname(iteration)
    if store.stat(name) is None:
        return CatalogEntry(iteration, CheckpointState.ABSENT, f"{name} does not exist")
    mark = read_mark(store, iteration)
    if mark is not None and mark.kind is MarkKind.INVALIDATED:
        return CatalogEntry(iteration, CheckpointState.INVALIDATED, mark.reason(), mark=mark)
    if store.stat(f"{name}/{MANIFEST_NAME}") is None:
        problem = CheckpointCorruptError(
            f"{store.describe()}/{name}",
            "has no manifest (an interrupted save)",
            "It is never adopted; nothing to do.",
        )
        notes = (f"{mark.marker} ignored: {name} has no manifest",) if mark is not None else ()
        return CatalogEntry(
            iteration, CheckpointState.PARTIAL, str(problem), error=problem, notes=notes, mark=mark
        )
    weights_only = mark is not None
    try:
        verified = verify_checkpoint(
            store,
            iteration,
            level=level,
            writer=writer,
            keep_payloads=keep_payloads,
            weights_only=weights_only,
        )
    except Exception as exc:  # anything that fails verification is corrupt, with why
        notes = (mark.reason(),) if mark is not None else ()
        return CatalogEntry(
            iteration, CheckpointState.CORRUPT, _reason(exc), error=exc, notes=notes, mark=mark
        )
    state = CheckpointState.WEIGHTS_ONLY if mark is not None else None
    reason = mark.reason() if mark is not None else ""
    if level == "manifest":
        return CatalogEntry(
            iteration, state or CheckpointState.COMMITTED, reason, verified, mark=mark
        )
    saved = verified.trainer.validation if verified.trainer is not None else None
    reading = read_stage(store, iteration, saved)
    return CatalogEntry(
        iteration,
        state or CheckpointState.of_stage(reading.stage),
        reason,
        verified,
        metrics=reading.metrics,
        notes=reading.notes,
        mark=mark,
    )
