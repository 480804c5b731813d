"""The durable records retention leaves beside a checkpoint, and their names.

Retention never rewrites a committed file; it only *adds* a record (exclusive create) before it
removes anything, so a crash at any point leaves an iteration that is either whole, or marked,
never one that looks complete but lacks a file:

::

    iter_N/.retention-weights-only.json   written BEFORE optim.pt / optim/ is removed: iter_N is
                                          a weights-only checkpoint from then on (model and
                                          trainer state kept; never a resume source)
    iter_N/.retention-invalidated.json    written BEFORE the manifest is removed and then every
                                          file: iter_N is invalidated (never adoptable), whatever
                                          is still left of it
    iter_N/.uploaded                      the archive marker (upload, a later issue): with
                                          ``require_uploaded`` only iterations holding it are
                                          pruned (the only copy is never deleted)
    checkpoints/.retention-decision.json  the last retention pass's decision, one row per
                                          iteration with the policies that keep it (for
                                          ``statecraft inspect``; informational, replaced
                                          atomically, never read by resume)

A marker's content is checked when it is read (schema name, iteration); a damaged marker still
counts as present for safety (an iteration with any ``.retention-*`` marker is never adopted).
"""

from __future__ import annotations

import enum

# Any: one codec table holds codecs of three record types (``RecordCodec[Any]``); each
# lookup is by the record's own type, so the decoded value is that type.
from typing import Any

import attrs

from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.checkpoint.kernel.records import RecordCodec, record_codec
from statecraft.errors import CheckpointCorruptError
from statecraft.storage.base import Store

__all__ = [
    "DECISION_SCHEMA",
    "INVALIDATED_MARKER",
    "INVALIDATED_SCHEMA",
    "RETENTION_DECISION",
    "UPLOADED_MARKER",
    "WEIGHTS_ONLY_MARKER",
    "WEIGHTS_ONLY_SCHEMA",
    "DecisionRow",
    "InvalidatedRecord",
    "RetentionAction",
    "RetentionDecision",
    "WeightsOnlyRecord",
    "read_decision",
    "read_invalidated",
    "read_weights_only",
]

WEIGHTS_ONLY_MARKER = ".retention-weights-only.json"
INVALIDATED_MARKER = ".retention-invalidated.json"
UPLOADED_MARKER = ".uploaded"
RETENTION_DECISION = ".retention-decision.json"

WEIGHTS_ONLY_SCHEMA = "statecraft.retention-weights-only.v1"
INVALIDATED_SCHEMA = "statecraft.retention-invalidated.v1"
DECISION_SCHEMA = "statecraft.retention-decision.v1"


class RetentionAction(enum.Enum):
    """What a retention pass does to one committed full checkpoint."""

    KEEP = "keep"  # whole: every file stays
    WEIGHTS_ONLY = "weights_only"  # the optimizer component is removed (marker first)
    DELETE = "delete"  # the whole directory is removed (invalidated first)


@attrs.frozen
class WeightsOnlyRecord:
    """``iter_N/.retention-weights-only.json``: the optimizer component of ``iteration`` was
    (or is being) removed by retention.

    Attributes:
        pruned: the entry names removed (``("optim.pt",)``; ``optim/`` for DCP later).
        policy: the optimizer policy that did not keep it (``"latest 1"``), for ``inspect``
            and the refusal of a resume from it.
    """

    iteration: int
    pruned: tuple[str, ...]
    policy: str
    schema: str = WEIGHTS_ONLY_SCHEMA

    def encode(self) -> bytes:
        return _CODECS[type(self)].encode(self, what=type(self).__name__)


@attrs.frozen
class InvalidatedRecord:
    """``iter_N/.retention-invalidated.json``: ``iteration`` is being deleted by retention;
    ``policy`` is the model policy that did not keep it."""

    iteration: int
    policy: str
    schema: str = INVALIDATED_SCHEMA

    def encode(self) -> bytes:
        return _CODECS[type(self)].encode(self, what=type(self).__name__)


@attrs.frozen
class DecisionRow:
    """One iteration of a retention decision.

    Attributes:
        action: what the pass did (or left: ``KEEP``).
        kept_by: the policies that keep the iteration (``"latest 2"``, ``"best 3 by val_loss
            (min)"``, ``"newest committed"``, ``"not uploaded"``); empty for ``DELETE``.
        reason: one line saying why (``"beyond keep_optim_last=1"``).
    """

    iteration: int
    action: RetentionAction
    kept_by: tuple[str, ...] = ()
    reason: str = ""


@attrs.frozen
class RetentionDecision:
    """``checkpoints/.retention-decision.json``: the last pass, after the save of
    ``saved_iteration``, under ``policy`` (its description), one row per committed full
    checkpoint it considered (newest first)."""

    saved_iteration: int
    policy: str
    rows: tuple[DecisionRow, ...]
    schema: str = DECISION_SCHEMA

    def encode(self) -> bytes:
        return _CODECS[type(self)].encode(self, what=type(self).__name__)


def _codec(kind: type, schema: str) -> RecordCodec[Any]:
    return record_codec(
        kind,
        schema=schema,
        fix="Move it aside; the iteration is not adopted while it is there.",
        not_json="is not JSON",
    )


_CODECS: dict[type, RecordCodec[Any]] = {
    WeightsOnlyRecord: _codec(WeightsOnlyRecord, WEIGHTS_ONLY_SCHEMA),
    InvalidatedRecord: _codec(InvalidatedRecord, INVALIDATED_SCHEMA),
    RetentionDecision: _codec(RetentionDecision, DECISION_SCHEMA),
}


def _read_marker(store: Store, iteration: int, kind: type, marker: str) -> Any:
    """The marker ``marker`` of ``iteration``, any file there that does not read as a record
    of ``kind`` of this iteration refused (it still counts)."""
    path = f"{iter_dirname(iteration)}/{marker}"
    record = _CODECS[kind].read(store, path, unreadable_is_damage=True)
    if record.iteration != iteration:
        raise CheckpointCorruptError(
            f"{store.describe()}/{path}", f"names iteration {record.iteration}", "Move it aside."
        )
    return record


def read_weights_only(store: Store, iteration: int) -> WeightsOnlyRecord:
    """The weights-only marker of ``iteration`` of the checkpoints root ``store``.

    Raises:
        FileNotFoundError: no marker.
        CheckpointCorruptError: the marker is not a valid record (or names another
            iteration); the caller still treats the iteration as weights-only.
    """
    record: WeightsOnlyRecord = _read_marker(
        store, iteration, WeightsOnlyRecord, WEIGHTS_ONLY_MARKER
    )
    return record


def read_invalidated(store: Store, iteration: int) -> InvalidatedRecord:
    """The invalidation marker of ``iteration`` (raises like :func:`read_weights_only`)."""
    record: InvalidatedRecord = _read_marker(
        store, iteration, InvalidatedRecord, INVALIDATED_MARKER
    )
    return record


def read_decision(store: Store) -> RetentionDecision | None:
    """The last retention decision of the checkpoints root ``store``; ``None`` when there is
    none or it does not parse (it is informational only)."""
    try:
        record: RetentionDecision = _CODECS[RetentionDecision].read(
            store, RETENTION_DECISION, unreadable_is_damage=True
        )
    except (FileNotFoundError, CheckpointCorruptError):
        return None
    return record
