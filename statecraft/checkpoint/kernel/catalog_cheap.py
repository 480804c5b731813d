"""The catalog's cheap depths, what a retention pass reads (:attr:`~.Depth.LISTING`,
:attr:`~.Depth.STAT`): what an ``iter_N`` is, for the purpose of deciding what may be removed.

No bulk file is opened or hashed: per iteration one ``stat`` and one listing, then (depth
``STAT``) the manifest, a ``stat`` of every recorded file, the small ``trainer.pt`` for the
validation stage and the evaluated record for the metrics
(:func:`~statecraft.checkpoint.kernel.validation_records.read_stage`), and a listed retention
marker (:func:`~statecraft.checkpoint.kernel.retention_marks.read_mark`). Anything that does not
read as a whole committed full checkpoint is ``CORRUPT`` (never counted, never touched), except
what retention itself left half done (``INVALIDATED``) and interrupted saves (``PARTIAL``).
At depth ``LISTING`` a listed manifest is not read: ``UNREAD``. Bit flips inside a file of
the recorded size are not seen (that is the ``"digest"`` level's job,
:mod:`statecraft.checkpoint.kernel.catalog_verified`); doubt means "keep".
"""

from __future__ import annotations

from statecraft.checkpoint.kernel.catalog_entries import CatalogEntry, CheckpointState, Depth
from statecraft.checkpoint.kernel.layout import MANIFEST_NAME, iter_dirname
from statecraft.checkpoint.kernel.manifest import Manifest, decode_manifest
from statecraft.checkpoint.kernel.plan import PLANS, TRAINER_ENTRY, entry_of
from statecraft.checkpoint.kernel.required_files import omitted_problem
from statecraft.checkpoint.kernel.retention_marks import Mark, read_mark
from statecraft.checkpoint.kernel.retention_records import (
    INVALIDATED_MARKER,
    UPLOADED_MARKER,
    WEIGHTS_ONLY_MARKER,
)
from statecraft.checkpoint.kernel.validation_records import ValidationState, read_stage
from statecraft.checkpoint.kernel.verify import (
    OPTIMIZER_ENTRIES,
    plan_problems,
    read_manifest,
    writer_for,
)
from statecraft.checkpoint.state import TrainerState
from statecraft.storage.base import Store
from statecraft.writers.consolidated import ConsolidatedWriter

__all__ = ["classify_cheaply"]

#: (size, digest algorithm, digest value) of a committed trainer.pt, as its manifest records
#: it -> (optimizer_step, validation state) parsed from it; and a manifest's bytes -> the
#: manifest. A committed file is immutable, so a pass parses each trainer.pt and manifest once
#: per process, not once per save (the scan stays cheap as weights-only iterations
#: accumulate); the oldest entries are dropped beyond the size.
_TRAINER_MEMO: dict[tuple[int, str, str], tuple[int, ValidationState | None]] = {}
_MANIFEST_MEMO: dict[bytes, Manifest] = {}
_MEMO_SIZE = 4096


def _read_manifest(store: Store, iteration: int) -> Manifest:
    """:func:`~statecraft.checkpoint.kernel.verify.read_manifest`, with the schema-checked decoding
    memoized by the manifest's bytes (a commit is immutable; each pass reads every manifest)."""
    name = f"{iter_dirname(iteration)}/{MANIFEST_NAME}"
    raw = store.read_bytes(name)
    manifest = _MANIFEST_MEMO.get(raw)
    if manifest is None:
        manifest = decode_manifest(raw, source=f"{store.describe()}/{name}")
        if len(_MANIFEST_MEMO) >= _MEMO_SIZE:
            _MANIFEST_MEMO.pop(next(iter(_MANIFEST_MEMO)))
        _MANIFEST_MEMO[raw] = manifest
    if manifest.iteration != iteration:
        return read_manifest(store, iteration)  # raises, naming the mismatch
    return manifest


def _trainer_clocks(
    store: Store, name: str, manifest: Manifest
) -> tuple[int, ValidationState | None]:
    """``trainer.pt``'s optimizer step and validation state, memoized by its recorded digest.

    Raises:
        Exception: whatever reading or parsing it raises (the caller makes it ``CORRUPT``).
    """
    recorded = manifest.files.get(TRAINER_ENTRY)
    key = (recorded.size, recorded.digest.algorithm, recorded.digest.value) if recorded else None
    if key is not None and key in _TRAINER_MEMO:
        return _TRAINER_MEMO[key]
    payload = ConsolidatedWriter().read(store, f"{name}/{TRAINER_ENTRY}", mmap=False)
    trainer = TrainerState.from_payload(payload, source=f"{name}/{TRAINER_ENTRY}")
    if key is not None:
        if len(_TRAINER_MEMO) >= _MEMO_SIZE:
            _TRAINER_MEMO.pop(next(iter(_TRAINER_MEMO)))
        _TRAINER_MEMO[key] = (trainer.optimizer_step, trainer.validation)
    return trainer.optimizer_step, trainer.validation


def _committed(
    store: Store,
    iteration: int,
    names: tuple[str, ...],
    *,
    depth: Depth,
    read_weights_only: bool,
) -> CatalogEntry:
    """A listed iteration holding a manifest, read at ``depth``."""
    name = iter_dirname(iteration)
    uploaded = UPLOADED_MARKER in names
    marked = WEIGHTS_ONLY_MARKER in names

    def entry(
        state: CheckpointState,
        reason: str = "",
        metrics: dict[str, float] | None = None,
        notes: tuple[str, ...] = (),
        mark: Mark | None = None,
    ) -> CatalogEntry:
        return CatalogEntry(
            iteration,
            state,
            reason,
            metrics=metrics,
            notes=notes,
            mark=mark,
            names=names,
            uploaded=uploaded,
        )

    if depth is Depth.LISTING:
        return entry(CheckpointState.UNREAD, f"{name}: a manifest is listed, not read")
    if marked and not read_weights_only:
        # Weights-only for good (a marker is never withdrawn) and judged by no policy: only
        # a leftover optim.pt is removed again. Nothing more is read, so the weights-only
        # iterations a run accumulates cost one listing each per pass.
        return entry(CheckpointState.WEIGHTS_ONLY, f"{name}: weights-only (marker not read)")

    def corrupt(reason: str) -> CatalogEntry:
        return entry(CheckpointState.CORRUPT, reason)

    try:
        manifest = _read_manifest(store, iteration)
    except Exception as exc:  # unreadable: never counted, never touched
        return corrupt(f"manifest: {exc}")
    # a DCP checkpoint is judged by its own plan (model/ and optim/ directories)
    writer = writer_for(manifest.format) if manifest.format in PLANS else ConsolidatedWriter()
    problems = plan_problems(manifest, writer)
    omitted = omitted_problem(store, name, manifest, names=names)
    if omitted is not None:
        problems.append(omitted)
    if problems:
        return corrupt("; ".join(problems))
    for file_name, recorded in manifest.files.items():
        if marked and entry_of(file_name) in OPTIMIZER_ENTRIES:
            continue
        stat = store.stat(f"{name}/{file_name}")
        if stat is None or stat.kind != "file" or stat.size != recorded.size:
            return corrupt(f"{file_name} is missing or not of its recorded size")
    mark = read_mark(store, iteration) if marked else None
    try:
        step, validation = _trainer_clocks(store, name, manifest)
    except Exception as exc:  # a trainer.pt that does not parse: never counted
        return corrupt(f"{TRAINER_ENTRY}: {exc}")
    if step != iteration:
        return corrupt(f"{TRAINER_ENTRY} records optimizer_step {step}")
    reading = read_stage(store, iteration, validation)
    if marked:  # a marker that vanished while read still counts (fail closed)
        reason = mark.reason() if mark is not None else f"{name}: weights-only"
        return entry(CheckpointState.WEIGHTS_ONLY, reason, reading.metrics, mark=mark)
    return entry(CheckpointState.of_stage(reading.stage), "", reading.metrics, reading.notes)


def classify_cheaply(
    store: Store, iteration: int, *, depth: Depth, read_weights_only: bool = True
) -> CatalogEntry:
    """The state of one iteration of ``store`` at the cheap ``depth`` (``LISTING`` or ``STAT``;
    see the module docstring); its ``names`` are the directory's listing.

    The store operations are, in order: ``stat(iter_N)`` (a link or anything but a directory
    is ``CORRUPT``, never followed), ``list(iter_N)``; an invalidation marker listed makes it
    ``INVALIDATED`` (the marker read for its policy), no manifest listed ``PARTIAL``; then
    (depth ``STAT``) the manifest, a ``stat`` of each recorded file (a weights-only
    iteration's optimizer entries skipped), its marker, ``trainer.pt`` and the validation
    records.

    Args:
        read_weights_only: also read weights-only iterations (manifest, ``trainer.pt``: a
            model policy judges them, maybe by metric); ``False``: one listing each, and the
            entry has no ``mark``.

    Never raises for a damaged iteration: it is ``CORRUPT`` with the reason.
    """
    name = iter_dirname(iteration)
    stat = store.stat(name)
    if stat is None:
        return CatalogEntry(iteration, CheckpointState.ABSENT, "not a directory")
    if not stat.is_dir or stat.link:
        return CatalogEntry(iteration, CheckpointState.CORRUPT, "not a directory")
    names = tuple(store.list(name))
    if INVALIDATED_MARKER in names:
        mark = read_mark(store, iteration)
        reason = mark.reason() if mark is not None else f"{name}: invalidated"
        return CatalogEntry(iteration, CheckpointState.INVALIDATED, reason, mark=mark, names=names)
    if MANIFEST_NAME not in names:
        reason = f"{store.describe()}/{name} has no manifest (an interrupted save)"
        return CatalogEntry(iteration, CheckpointState.PARTIAL, reason, names=names)
    return _committed(store, iteration, names, depth=depth, read_weights_only=read_weights_only)
