"""The checkpoint catalog: which checkpoints an attempt holds, and in what state.

One :func:`scan` of a checkpoints store answers every "what is on disk" question the library
asks: the save transaction's observation, resume's candidate list and auto-pick, ``statecraft
inspect`` and the demo. It lists the ``iter_*`` directories and reads ``latest_checkpoint.txt``
up front; each iteration is verified on demand (newest first) and the result is kept, so resume
hashes only the checkpoints it tries.

::

    catalog = scan(store, level="digest")
    catalog.latest.state                 # LatestState.OK / MISSING / GARBAGE / DANGLING
    catalog.entry(100).state             # CheckpointState.COMMITTED / CORRUPT / PARTIAL / ABSENT
                                         # / EVALUATION_PENDING / PUBLICATION_PENDING / PUBLISHED
                                         # / WEIGHTS_ONLY / INVALIDATED (retention's markers)
    pick = catalog.pick()                # newest adoptable, with every newer one passed over

The partial artifacts beside the checkpoints (``checkpoint_artifacts/``) have their own
catalog, :mod:`statecraft.checkpoint.kernel.artifact_catalog`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator

import attrs

from statecraft.checkpoint.kernel.layout import (
    LATEST_POINTER,
    MANIFEST_NAME,
    iter_dirname,
    parse_latest,
)
from statecraft.checkpoint.kernel.retention_marks import Mark, MarkKind, read_mark
from statecraft.checkpoint.kernel.validation_records import ValidationStage, read_stage
from statecraft.checkpoint.kernel.verify import (
    LEVELS,
    VerifiedCheckpoint,
    list_iterations,
    verify_checkpoint,
)
from statecraft.errors import CheckpointCorruptError, CheckpointError
from statecraft.storage.base import Store
from statecraft.writers.base import Writer

__all__ = [
    "Catalog",
    "CatalogEntry",
    "CheckpointState",
    "LatestPointer",
    "LatestState",
    "PassedOver",
    "Pick",
    "classify",
    "read_latest",
    "scan",
]


class CheckpointState(enum.Enum):
    """The state of one iteration of an attempt.

    Today's states:

    - ``ABSENT``: no ``iter_N`` directory.
    - ``PARTIAL``: ``iter_N`` exists without a manifest (an interrupted save; never adopted).
    - ``CORRUPT``: a manifest exists but the checkpoint does not verify (manifest unreadable,
      files missing / wrong size / wrong digest, a file that does not deserialize with
      ``torch.load(weights_only=True)``, ``trainer.pt`` malformed, clocks disagree, not the
      full plan); :attr:`CatalogEntry.reason` says which.
    - ``COMMITTED``: the manifest is the commit and the checkpoint verifies at the scan level
      (and, at levels ``size`` / ``digest``, was saved without a pending validation). At level
      ``"manifest"`` every readable commit is ``COMMITTED``: its ``trainer.pt`` is not read, so
      its validation stage is not known (the save machine's observation relies on this).
    - ``EVALUATION_PENDING``: committed, saved by a durable validation whose evaluation has
      not succeeded yet (``trainer.pt`` ``validation.stage``; no valid evaluated record).
    - ``PUBLICATION_PENDING``: committed, evaluated (a valid
      ``.validation-publication-evaluated.json``, its metrics in
      :attr:`CatalogEntry.metrics`), not yet published.
    - ``PUBLISHED``: committed, evaluated and published (a valid
      ``.validation-publication-published.json`` after the evaluated record).

    The three validation stages are read by
    :func:`~statecraft.checkpoint.kernel.validation_records.read_stage`; a damaged visibility record
    never advances a stage (fail closed) and is noted in :attr:`CatalogEntry.notes`. Every
    committed state is adoptable: a pending checkpoint advances ``resume=auto`` (the resumed
    run retries its pending stage).

    - ``WEIGHTS_ONLY``: committed, but retention removed (or is removing) its optimizer
      component (``.retention-weights-only.json`` present): model and trainer state verify
      (the optimizer entries are not required), it loads for evaluation, it is never a resume
      source. Its reason names the policy from the marker (``latest 1``). At every level,
      ``"manifest"`` included.
    - ``INVALIDATED``: retention is deleting it (``.retention-invalidated.json`` present,
      whatever else is left, manifest or not): never adoptable, finished by the next
      retention pass. Its reason names the policy from the marker.

    A damaged marker still counts (fail closed; its problem is in the reason). Neither marked
    state is adoptable: ``resume=auto`` passes over them with the reason.

    Later issues add members here without reshaping the catalog (each with its reason):
    ``UPLOADED``.
    """

    ABSENT = "absent"
    PARTIAL = "partial"
    CORRUPT = "corrupt"
    COMMITTED = "committed"
    EVALUATION_PENDING = "evaluation_pending"
    PUBLICATION_PENDING = "publication_pending"
    PUBLISHED = "published"
    WEIGHTS_ONLY = "weights_only"
    INVALIDATED = "invalidated"

    @property
    def adoptable(self) -> bool:
        """Resume may adopt a checkpoint in this state (every committed one)."""
        return self in _ADOPTABLE

    @property
    def validation_stage(self) -> ValidationStage:
        """The validation stage this state stands for (``NONE`` unless a validation state)."""
        return _STAGE_OF.get(self, ValidationStage.NONE)

    @classmethod
    def of_stage(cls, stage: ValidationStage) -> CheckpointState:
        """The committed state of a checkpoint at validation ``stage``."""
        return _STATE_OF[stage]


_STATE_OF = {
    ValidationStage.NONE: CheckpointState.COMMITTED,
    ValidationStage.EVALUATION_PENDING: CheckpointState.EVALUATION_PENDING,
    ValidationStage.PUBLICATION_PENDING: CheckpointState.PUBLICATION_PENDING,
    ValidationStage.PUBLISHED: CheckpointState.PUBLISHED,
}
_STAGE_OF = {state: stage for stage, state in _STATE_OF.items()}
_ADOPTABLE = frozenset(_STATE_OF.values())


class LatestState(enum.Enum):
    """What ``latest_checkpoint.txt`` says."""

    OK = "ok"  # names an iteration that exists
    MISSING = "missing"  # no pointer
    GARBAGE = "garbage"  # not one ``iter_<9 digits>`` line
    DANGLING = "dangling"  # names an iteration that has no directory


@attrs.frozen
class LatestPointer:
    """The pointer's state, the iteration it names (``OK`` / ``DANGLING``), a note for the
    log when it is ignored (``GARBAGE`` / ``DANGLING``) and, for ``GARBAGE``, why it does not
    parse."""

    state: LatestState
    iteration: int | None = None
    note: str | None = None
    problem: str | None = None


@attrs.frozen
class CatalogEntry:
    """One iteration's state and why; ``verified`` holds the proof when adoptable, and
    ``error`` the verification error behind the reason otherwise (resume re-raises it).

    Attributes:
        kind: ``"checkpoint"`` (the artifact catalog's entries say ``"artifact"``).
        metrics: the evaluated metrics of a ``PUBLICATION_PENDING`` / ``PUBLISHED``
            checkpoint, else ``None``.
        notes: visibility records that were ignored, and why (a damaged record, a record on
            a checkpoint saved without a pending validation); for a marked iteration that
            does not verify (``CORRUPT``), the marker's reason.
        mark: retention's marker on the iteration (``WEIGHTS_ONLY`` / ``INVALIDATED``, and a
            ``CORRUPT`` or ``PARTIAL`` one that holds a marker), else ``None``.
    """

    iteration: int
    state: CheckpointState
    reason: str = ""
    verified: VerifiedCheckpoint | None = None
    error: Exception | None = attrs.field(default=None, eq=False, repr=False)
    kind: str = "checkpoint"
    metrics: dict[str, float] | None = attrs.field(default=None, hash=False)
    notes: tuple[str, ...] = ()
    mark: Mark | None = None

    @property
    def name(self) -> str:
        return iter_dirname(self.iteration)

    @property
    def policy(self) -> str | None:
        """The retention policy named by the iteration's marker, if any."""
        return self.mark.policy if self.mark is not None else None


@attrs.frozen
class PassedOver:
    """A candidate resume did not adopt, and why."""

    name: str
    reason: str


@attrs.frozen
class Pick:
    """The auto-pick: the newest adoptable iteration (``None`` when there is none) and every
    newer one passed over, newest first."""

    chosen: CatalogEntry | None
    passed_over: tuple[PassedOver, ...]


def _reason(exc: Exception) -> str:
    return str(exc) if isinstance(exc, CheckpointError) else f"{type(exc).__name__}: {exc}"


@attrs.define
class Catalog:
    """The iterations of one checkpoints store, classified on demand (see :func:`scan`).

    Attributes:
        store: the checkpoints root of one attempt.
        level: the verification level a ``COMMITTED`` entry has passed.
        iterations: every ``iter_*`` directory's iteration, newest first.
        latest: what ``latest_checkpoint.txt`` says.
        keep_payloads: committed entries keep the components verification parsed (resume
            loads them); ``False`` for a reader that only classifies.
    """

    store: Store
    level: str
    iterations: tuple[int, ...]
    latest: LatestPointer
    writer: Writer | None = None
    keep_payloads: bool = True
    _entries: dict[int, CatalogEntry] = attrs.field(factory=dict, repr=False)

    def entry(self, iteration: int) -> CatalogEntry:
        """Classify ``iteration`` (verified once, then remembered). Never raises for a bad
        checkpoint: the problem is the entry's ``reason``."""
        if iteration not in self._entries:
            self._entries[iteration] = classify(
                self.store,
                iteration,
                level=self.level,
                writer=self.writer,
                keep_payloads=self.keep_payloads,
            )
        return self._entries[iteration]

    def entries(self) -> Iterator[CatalogEntry]:
        """Every listed iteration's entry, newest first (each verified as it is reached)."""
        for iteration in self.iterations:
            yield self.entry(iteration)

    def pick(self) -> Pick:
        """Resume's auto-pick: verify newest first, stop at the first adoptable one."""
        passed: list[PassedOver] = []
        for entry in self.entries():
            if entry.state.adoptable:
                return Pick(entry, tuple(passed))
            passed.append(PassedOver(entry.name, entry.reason))
        return Pick(None, tuple(passed))


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


def read_latest(store: Store, iterations: tuple[int, ...] | list[int]) -> LatestPointer:
    """Classify ``latest_checkpoint.txt`` against the listed iterations."""
    if store.stat(LATEST_POINTER) is None:
        return LatestPointer(LatestState.MISSING)
    try:
        latest = parse_latest(store.read_bytes(LATEST_POINTER))
    except FileNotFoundError:
        return LatestPointer(LatestState.MISSING)
    except ValueError as exc:
        return LatestPointer(
            LatestState.GARBAGE,
            None,
            f"{store.describe()}/{LATEST_POINTER} is unreadable ({exc}); "
            "ignoring it and selecting by verified manifests",
            str(exc),
        )
    if latest not in iterations:
        return LatestPointer(
            LatestState.DANGLING,
            latest,
            f"{store.describe()}/{LATEST_POINTER} names {iter_dirname(latest)}, "
            "which does not exist; ignoring it and selecting by verified manifests",
        )
    return LatestPointer(LatestState.OK, latest)


def scan(
    store: Store,
    *,
    level: str = "digest",
    writer: Writer | None = None,
    keep_payloads: bool = True,
) -> Catalog:
    """List the attempt in ``store`` and read its latest pointer; iterations are verified at
    ``level`` (``"manifest"``, ``"size"``, ``"digest"``) when first asked for.

    Args:
        keep_payloads: committed entries keep their parsed components (resume); pass
            ``False`` to classify only (``statecraft inspect``: nothing stays mapped).

    Raises:
        CheckpointError: ``level`` is not a verification level.
    """
    if level not in LEVELS:
        raise CheckpointError(f"catalog level must be one of {list(LEVELS)}, got {level!r}")
    iterations = tuple(list_iterations(store))
    return Catalog(store, level, iterations, read_latest(store, iterations), writer, keep_payloads)
