"""Retention's own cheap reading of a checkpoints root: what each ``iter_N`` is, for the
purpose of deciding what may be removed.

No bulk file is opened or hashed: per iteration one listing, the manifest, a ``stat`` of every
recorded file, and (``deep``) the small ``trainer.pt`` for the validation stage and the
evaluated record for the metrics
(:func:`~statecraft.checkpoint.kernel.validation_records.read_stage`).
Anything that does not read as a whole committed full checkpoint is never counted and never
touched (``OTHER``), except what retention itself left half done (``INVALIDATED``) and
interrupted saves (``PARTIAL``, garbage when older than the saved iteration).

This is not the catalog (:mod:`statecraft.checkpoint.kernel.catalog`, which verifies digests for
resume and ``inspect``); it fails the same way, closed: doubt means "keep".
"""

from __future__ import annotations

import enum

import attrs

from statecraft.checkpoint.kernel.layout import (
    LATEST_POINTER,
    MANIFEST_NAME,
    iter_dirname,
    parse_latest,
)
from statecraft.checkpoint.kernel.manifest import Manifest, decode_manifest
from statecraft.checkpoint.kernel.plan import PLANS, TRAINER_ENTRY, entry_of
from statecraft.checkpoint.kernel.retention_records import (
    INVALIDATED_MARKER,
    UPLOADED_MARKER,
    WEIGHTS_ONLY_MARKER,
    read_invalidated,
    read_weights_only,
)
from statecraft.checkpoint.kernel.validation_records import (
    ValidationStage,
    ValidationState,
    read_stage,
)
from statecraft.checkpoint.kernel.verify import OPTIMIZER_ENTRIES as VERIFY_OPTIMIZER_ENTRIES
from statecraft.checkpoint.kernel.verify import (
    list_iterations,
    plan_problems,
    read_manifest,
    writer_for,
)
from statecraft.checkpoint.retention.policies import RetentionCandidate
from statecraft.checkpoint.state import TrainerState
from statecraft.errors import CheckpointCorruptError
from statecraft.storage.base import Store
from statecraft.writers.consolidated import ConsolidatedWriter

__all__ = [
    "OPTIMIZER_ENTRIES",
    "RetentionScan",
    "ScanKind",
    "ScannedIteration",
    "scan_for_retention",
]

#: the entries of the optimizer component in every format (what a weights-only pass removes:
#: ``optim.pt``, or DCP's ``optim/`` directory)
OPTIMIZER_ENTRIES: tuple[str, ...] = VERIFY_OPTIMIZER_ENTRIES


#: (size, digest algorithm, digest value) of a committed trainer.pt, as its manifest records
#: it -> (optimizer_step, validation state) parsed from it; and a manifest's bytes -> the
#: manifest. A committed file is immutable, so a pass parses each trainer.pt and manifest once
#: per process, not once per save (the scan stays cheap as weights-only iterations
#: accumulate); the oldest entries are dropped beyond the size.
_TRAINER_MEMO: dict[tuple[int, str, str], tuple[int, ValidationState | None]] = {}
_MANIFEST_MEMO: dict[bytes, Manifest] = {}
_MEMO_SIZE = 4096


class ScanKind(enum.Enum):
    """What retention makes of one ``iter_N``."""

    CANDIDATE = "candidate"  # committed whole (stage none or published): counted
    WEIGHTS_ONLY = "weights_only"  # committed, weights-only marker present: model policy only
    PENDING = "pending"  # committed, validation pending: never counted, never touched
    INVALIDATED = "invalidated"  # retention started deleting it: finished
    PARTIAL = "partial"  # no manifest (an interrupted save): garbage when older than the save
    OTHER = "other"  # corrupt, not a full checkpoint, or not read: never touched
    UNREAD = "unread"  # a manifest is there; not read (no policy needs it): never touched


@attrs.frozen
class ScannedIteration:
    """One iteration as retention read it.

    Attributes:
        names: its directory listing.
        metrics: the evaluated validation metrics (published checkpoints), else ``None``.
        uploaded: ``.uploaded`` is present.
        policy: the policy a retention marker records (``""`` without one, or when the marker
            does not parse: it still counts as present).
        note: why an ``OTHER`` one is not counted.
    """

    iteration: int
    kind: ScanKind
    names: tuple[str, ...] = ()
    metrics: dict[str, float] | None = attrs.field(default=None, hash=False)
    uploaded: bool = False
    policy: str = ""
    note: str = ""

    @property
    def name(self) -> str:
        return iter_dirname(self.iteration)

    def candidate(self) -> RetentionCandidate:
        return RetentionCandidate(self.iteration, self.metrics, self.uploaded)


@attrs.frozen
class RetentionScan:
    """Every ``iter_*`` of the root (newest first) and what ``latest`` names (``None``: absent
    or garbage)."""

    entries: tuple[ScannedIteration, ...]
    latest: int | None

    def of_kind(self, *kinds: ScanKind) -> tuple[ScannedIteration, ...]:
        return tuple(e for e in self.entries if e.kind in kinds)

    @property
    def committed(self) -> tuple[int, ...]:
        """Iterations that read as committed (counted, weights-only or pending), newest first."""
        kinds = (ScanKind.CANDIDATE, ScanKind.WEIGHTS_ONLY, ScanKind.PENDING)
        return tuple(e.iteration for e in self.of_kind(*kinds))


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


def _latest(store: Store) -> int | None:
    try:
        return parse_latest(store.read_bytes(LATEST_POINTER))
    except (FileNotFoundError, ValueError):
        return None


def _marker_policy(store: Store, iteration: int, invalidated: bool) -> str:
    try:
        if invalidated:
            return read_invalidated(store, iteration).policy
        return read_weights_only(store, iteration).policy
    except (FileNotFoundError, CheckpointCorruptError):
        return ""


def _committed(
    store: Store, iteration: int, names: tuple[str, ...], *, deep: bool, need_weights_only: bool
) -> ScannedIteration:
    name = iter_dirname(iteration)
    uploaded = UPLOADED_MARKER in names
    marked = WEIGHTS_ONLY_MARKER in names
    if not deep:
        return ScannedIteration(iteration, ScanKind.UNREAD, names, uploaded=uploaded)
    if marked and not need_weights_only:
        # Weights-only for good (a marker is never withdrawn) and judged by no policy: only
        # a leftover optim.pt is removed again. Nothing more is read, so the weights-only
        # iterations a run accumulates cost one listing each per pass.
        return ScannedIteration(iteration, ScanKind.WEIGHTS_ONLY, names, None, uploaded)

    def other(note: str) -> ScannedIteration:
        return ScannedIteration(iteration, ScanKind.OTHER, names, uploaded=uploaded, note=note)

    try:
        manifest = _read_manifest(store, iteration)
    except Exception as exc:  # unreadable: never counted, never touched
        return other(f"manifest: {exc}")
    # a DCP checkpoint is judged by its own plan (model/ and optim/ directories)
    writer = writer_for(manifest.format) if manifest.format in PLANS else ConsolidatedWriter()
    problems = plan_problems(manifest, writer)
    if problems:
        return other("; ".join(problems))
    for file_name, entry in manifest.files.items():
        if marked and entry_of(file_name) in OPTIMIZER_ENTRIES:
            continue
        stat = store.stat(f"{name}/{file_name}")
        if stat is None or stat.kind != "file" or stat.size != entry.size:
            return other(f"{file_name} is missing or not of its recorded size")
    policy = _marker_policy(store, iteration, invalidated=False) if marked else ""
    recorded = manifest.files.get(TRAINER_ENTRY)
    key = (recorded.size, recorded.digest.algorithm, recorded.digest.value) if recorded else None
    if key is None or key not in _TRAINER_MEMO:
        try:
            payload = ConsolidatedWriter().read(store, f"{name}/{TRAINER_ENTRY}", mmap=False)
            trainer = TrainerState.from_payload(payload, source=f"{name}/{TRAINER_ENTRY}")
        except Exception as exc:  # a trainer.pt that does not parse: never counted
            return other(f"{TRAINER_ENTRY}: {exc}")
        if key is not None:
            if len(_TRAINER_MEMO) >= _MEMO_SIZE:
                _TRAINER_MEMO.pop(next(iter(_TRAINER_MEMO)))
            _TRAINER_MEMO[key] = (trainer.optimizer_step, trainer.validation)
        step, validation = trainer.optimizer_step, trainer.validation
    else:
        step, validation = _TRAINER_MEMO[key]
    if step != iteration:
        return other(f"{TRAINER_ENTRY} records optimizer_step {step}")
    reading = read_stage(store, iteration, validation)
    if marked:
        kind = ScanKind.WEIGHTS_ONLY
    elif reading.stage in (ValidationStage.NONE, ValidationStage.PUBLISHED):
        kind = ScanKind.CANDIDATE
    else:
        kind = ScanKind.PENDING
    return ScannedIteration(iteration, kind, names, reading.metrics, uploaded, policy)


def scan_for_retention(
    store: Store, *, deep: bool, need_weights_only: bool = True
) -> RetentionScan:
    """Read the checkpoints root ``store`` for a retention pass (see the module docstring).

    Args:
        deep: read manifests and ``trainer.pt`` (a plan with a policy); ``False`` finds only
            invalidated leftovers and partial directories (every committed one is ``UNREAD``).
        need_weights_only: also read weights-only iterations (manifest, ``trainer.pt``: the
            model policy judges them, maybe by metric); ``False``: one listing each.

    Never raises for a damaged iteration: it is ``OTHER`` with the reason.
    """
    entries = []
    for iteration in list_iterations(store):
        name = iter_dirname(iteration)
        stat = store.stat(name)
        if stat is None or not stat.is_dir or stat.link:
            entries.append(ScannedIteration(iteration, ScanKind.OTHER, note="not a directory"))
            continue
        names = tuple(store.list(name))
        if INVALIDATED_MARKER in names:
            policy = _marker_policy(store, iteration, invalidated=True)
            entries.append(ScannedIteration(iteration, ScanKind.INVALIDATED, names, policy=policy))
        elif MANIFEST_NAME not in names:
            entries.append(ScannedIteration(iteration, ScanKind.PARTIAL, names))
        else:
            entries.append(
                _committed(store, iteration, names, deep=deep, need_weights_only=need_weights_only)
            )
    return RetentionScan(tuple(entries), _latest(store))
