"""The catalog's records: the state of one iteration and why (:class:`CatalogEntry`), what the
latest pointer says (:class:`LatestPointer`) and resume's auto-pick (:class:`Pick`).

Every reader of the checkpoint catalog (:mod:`statecraft.checkpoint.kernel.catalog`) gets these;
the classifications that produce them are
:mod:`statecraft.checkpoint.kernel.catalog_verified` (the verification levels) and
:mod:`statecraft.checkpoint.kernel.catalog_cheap` (the cheap depths retention reads at), as
:class:`Depth` says.
"""

from __future__ import annotations

import enum

import attrs

from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.checkpoint.kernel.retention_marks import Mark
from statecraft.checkpoint.kernel.validation_records import ValidationStage
from statecraft.checkpoint.kernel.verify import VerifiedCheckpoint

__all__ = [
    "CatalogEntry",
    "CheckpointState",
    "Depth",
    "LatestPointer",
    "LatestState",
    "PassedOver",
    "Pick",
]


class Depth(enum.Enum):
    """How deep a catalog reads each iteration, cheapest first."""

    #: one ``stat`` and one listing: ``INVALIDATED``, ``PARTIAL``, else ``UNREAD``
    LISTING = "listing"
    #: also the manifest, a ``stat`` of each recorded file, ``trainer.pt`` and the validation
    #: records; no bulk file is opened or hashed (retention's reading)
    STAT = "stat"
    #: proven by :func:`~statecraft.checkpoint.kernel.verify.verify_checkpoint` at the
    #: catalog's verification level (resume, ``statecraft inspect``, the machines)
    VERIFY = "verify"


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

    - ``UNREAD``: only at depth :attr:`Depth.LISTING` (a retention pass with no policy):
      a manifest is listed, nothing was read; never adoptable, never counted.

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
    UNREAD = "unread"

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
            ``CORRUPT`` or ``PARTIAL`` one that holds a marker), else ``None``. At depth
            ``STAT`` a weights-only iteration the scan was told not to read has none.
        names: the iteration's directory listing (depths ``LISTING`` and ``STAT`` list it;
            ``()`` at depth ``VERIFY``).
        uploaded: ``.uploaded`` is listed in a committed iteration (depths ``LISTING`` and
            ``STAT`` only).
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
    names: tuple[str, ...] = ()
    uploaded: bool = False

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
