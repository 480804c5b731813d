"""Model-validation records: the identity and stage saved in ``trainer.pt``, and the
append-only visibility records that advance a committed checkpoint's validation stage.

A durable validation checkpoint is a full checkpoint whose ``trainer.pt`` records
``validation.stage = "evaluation_pending"``. Its later stages are never a rewrite of committed
files: each is a new record beside the manifest, published by exclusive create::

    iter_<9 digits>/.validation-publication-evaluated.json   evaluation succeeded (metrics)
    iter_<9 digits>/.validation-publication-published.json   publication completed

    stage of a checkpoint        trainer.pt stage      evaluated record   published record
    committed (no validation)    none                  -                  -
    evaluation-pending           evaluation_pending    absent             absent
    publication-pending          evaluation_pending    valid              absent
    published                    evaluation_pending    valid              valid

A published record without a valid evaluated record does not publish (fail closed: the stage
stays evaluation-pending, with a note). Records on a checkpoint saved with stage ``none`` are
ignored, with a note.
"""

from __future__ import annotations

# Any: raw JSON of the metrics before it is checked, and one codec table of two record types.
from typing import Any

import attrs

from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.checkpoint.kernel.records import RecordCodec, RecordProblem, record_codec
from statecraft.checkpoint.state.validation_state import (
    VALIDATION_STATE_SCHEMA,
    ValidationIdentity,
    ValidationStage,
    ValidationState,
    metrics_problems,
)
from statecraft.errors import CheckpointCorruptError
from statecraft.storage.base import Store

__all__ = [
    "EVALUATED_RECORD",
    "EVALUATED_SCHEMA",
    "PUBLISHED_RECORD",
    "PUBLISHED_SCHEMA",
    "VALIDATION_STATE_SCHEMA",
    "EvaluatedRecord",
    "PublishedRecord",
    "StageReading",
    "ValidationIdentity",
    "ValidationStage",
    "ValidationState",
    "check_validation_identity",
    "metrics_problems",
    "read_stage",
]

EVALUATED_SCHEMA = "statecraft.validation-evaluated.v1"
PUBLISHED_SCHEMA = "statecraft.validation-published.v1"
EVALUATED_RECORD = ".validation-publication-evaluated.json"
PUBLISHED_RECORD = ".validation-publication-published.json"


@attrs.frozen
class EvaluatedRecord:
    """``.validation-publication-evaluated.json``: evaluation of ``iteration`` succeeded."""

    iteration: int
    metrics: dict[str, float]
    identity: ValidationIdentity
    schema: str = EVALUATED_SCHEMA

    def encode(self) -> bytes:
        return _CODECS[type(self)].encode(self, what=type(self).__name__)


@attrs.frozen
class PublishedRecord:
    """``.validation-publication-published.json``: publication of ``iteration`` completed."""

    iteration: int
    schema: str = PUBLISHED_SCHEMA

    def encode(self) -> bytes:
        return _CODECS[type(self)].encode(self, what=type(self).__name__)


def _metrics_as_written(raw: dict[str, Any]) -> dict[str, Any]:
    """Refuse an evaluated record whose metrics are not finite numbers, as written."""
    problems = metrics_problems(raw.get("metrics"))
    if problems:
        raise RecordProblem("values are invalid: " + "; ".join(problems))
    return raw


_FIX = "Move it aside: the validation stage it claims is not trusted."
_CODECS: dict[type, RecordCodec[Any]] = {
    EvaluatedRecord: record_codec(
        EvaluatedRecord, schema=EVALUATED_SCHEMA, fix=_FIX, upgrade=_metrics_as_written
    ),
    PublishedRecord: record_codec(PublishedRecord, schema=PUBLISHED_SCHEMA, fix=_FIX),
}


def _decode(store: Store, path: str, kind: type, iteration: int) -> Any:
    """The record of ``kind`` at ``path``, which must be of ``iteration``.

    Raises:
        FileNotFoundError: none there.
        CheckpointCorruptError: anything else that does not read as such a record.
    """
    record = _CODECS[kind].read(store, path, unreadable_is_damage=True)
    if record.iteration != iteration:
        raise CheckpointCorruptError(
            f"{store.describe()}/{path}", f"names iteration {record.iteration}", _FIX
        )
    return record


@attrs.frozen
class StageReading:
    """A checkpoint's validation stage as its files say, with the evaluated metrics (when
    evaluated) and notes on records that were ignored."""

    stage: ValidationStage
    metrics: dict[str, float] | None = None
    notes: tuple[str, ...] = ()


def read_stage(store: Store, iteration: int, saved: ValidationState | None) -> StageReading:
    """The validation stage of committed ``iteration`` of ``store`` (a checkpoints root),
    from its ``trainer.pt`` state ``saved`` (``None``: saved before validation records
    existed, stage ``NONE``) and the visibility records beside its manifest. Never raises for
    a damaged record: it is ignored (the stage stays behind it) and noted."""
    name = iter_dirname(iteration)
    present = set(store.list(name)) if store.stat(name) is not None else set()
    if saved is None or saved.stage is ValidationStage.NONE:
        stray = sorted(present & {EVALUATED_RECORD, PUBLISHED_RECORD})
        ignored = tuple(
            f"{name}/{r} ignored: {name} was saved without a pending validation" for r in stray
        )
        return StageReading(ValidationStage.NONE, None, ignored)
    notes: list[str] = []
    evaluated: EvaluatedRecord | None = None
    if EVALUATED_RECORD in present:
        try:
            evaluated = _decode(store, f"{name}/{EVALUATED_RECORD}", EvaluatedRecord, iteration)
        except (FileNotFoundError, CheckpointCorruptError) as exc:
            notes.append(f"ignored: {exc}")
    if evaluated is None:
        if PUBLISHED_RECORD in present:
            notes.append(
                f"{name}/{PUBLISHED_RECORD} ignored: no valid evaluated record "
                "precedes it (a checkpoint is published only after its evaluation)"
            )
        return StageReading(ValidationStage.EVALUATION_PENDING, None, tuple(notes))
    if PUBLISHED_RECORD in present:
        try:
            _decode(store, f"{name}/{PUBLISHED_RECORD}", PublishedRecord, iteration)
            return StageReading(ValidationStage.PUBLISHED, evaluated.metrics, tuple(notes))
        except (FileNotFoundError, CheckpointCorruptError) as exc:
            notes.append(f"ignored: {exc}")
    return StageReading(ValidationStage.PUBLICATION_PENDING, evaluated.metrics, tuple(notes))


def check_validation_identity(
    saved: ValidationState | None, current: ValidationIdentity, *, source: str
) -> None:
    """Refuse an exact resume whose recorded validation identity differs from this run's
    (``saved=None``: a checkpoint written before validation identities, recorded as
    disabled).

    Raises:
        ValidationIdentityError: naming ``source`` (the ``trainer.pt``) and every differing
            field, with the fix.
    """
    from statecraft.errors import ValidationIdentityError

    recorded = saved.identity if saved is not None else ValidationIdentity()
    problems = recorded.differences(current)
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise ValidationIdentityError(
            f"{source}: the checkpoint was saved under another validation setup:\n{lines}\n"
            "Exact resume needs the same validation (source, knobs, enabled); restore them, "
            "or start a new attempt (resume=off) and warm-start from the weights with "
            "statecraft.load_weights",
            source=source,
            problems=problems,
        )
