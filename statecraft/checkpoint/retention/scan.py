"""Retention's view of the checkpoint catalog: what each ``iter_N`` is, for the purpose of
deciding what may be removed.

The reading is the catalog's (:func:`~statecraft.checkpoint.kernel.catalog.scan`) at its cheap
depths (:mod:`statecraft.checkpoint.kernel.catalog_cheap`): no bulk file is opened or hashed;
per iteration one listing, the manifest, a ``stat`` of every recorded file, and (``deep``) the
small ``trainer.pt`` for the validation stage and the evaluated record for the metrics.
Anything that does not read as a whole committed full checkpoint is never counted and never
touched (``OTHER``), except what retention itself left half done (``INVALIDATED``) and
interrupted saves (``PARTIAL``, garbage when older than the saved iteration). It fails
closed: doubt means "keep".
"""

from __future__ import annotations

import enum

import attrs

from statecraft.checkpoint.kernel.catalog import CatalogEntry, CheckpointState, Depth, scan
from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.checkpoint.kernel.verify import OPTIMIZER_ENTRIES as VERIFY_OPTIMIZER_ENTRIES
from statecraft.checkpoint.retention.policies import RetentionCandidate
from statecraft.storage.base import Store

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


#: the retention kind of each catalog state (``ABSENT``: it vanished after the listing)
_KIND_OF = {
    CheckpointState.COMMITTED: ScanKind.CANDIDATE,
    CheckpointState.PUBLISHED: ScanKind.CANDIDATE,
    CheckpointState.EVALUATION_PENDING: ScanKind.PENDING,
    CheckpointState.PUBLICATION_PENDING: ScanKind.PENDING,
    CheckpointState.WEIGHTS_ONLY: ScanKind.WEIGHTS_ONLY,
    CheckpointState.INVALIDATED: ScanKind.INVALIDATED,
    CheckpointState.PARTIAL: ScanKind.PARTIAL,
    CheckpointState.CORRUPT: ScanKind.OTHER,
    CheckpointState.ABSENT: ScanKind.OTHER,
    CheckpointState.UNREAD: ScanKind.UNREAD,
}


def _scanned(entry: CatalogEntry) -> ScannedIteration:
    kind = _KIND_OF[entry.state]
    return ScannedIteration(
        entry.iteration,
        kind,
        entry.names,
        entry.metrics,
        entry.uploaded,
        entry.policy or "",
        entry.reason if kind is ScanKind.OTHER else "",
    )


def scan_for_retention(
    store: Store, *, deep: bool, need_weights_only: bool = True
) -> RetentionScan:
    """Read the checkpoints root ``store`` for a retention pass (see the module docstring):
    the catalog at depth ``STAT`` (``deep``) or ``LISTING``.

    Args:
        deep: read manifests and ``trainer.pt`` (a plan with a policy); ``False`` finds only
            invalidated leftovers and partial directories (every committed one is ``UNREAD``).
        need_weights_only: also read weights-only iterations (manifest, ``trainer.pt``: the
            model policy judges them, maybe by metric); ``False``: one listing each.

    Never raises for a damaged iteration: it is ``OTHER`` with the reason.
    """
    depth = Depth.STAT if deep else Depth.LISTING
    catalog = scan(store, depth=depth, read_weights_only=need_weights_only)
    entries = tuple(_scanned(entry) for entry in catalog.entries())
    return RetentionScan(entries, catalog.latest.iteration)
