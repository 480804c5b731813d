"""The validation stage records: what ``read_stage`` concludes from ``trainer.pt``'s saved
state and the append-only records beside the manifest (never raising, failing closed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statecraft.checkpoint.kernel.validation_records import (
    EVALUATED_RECORD,
    PUBLISHED_RECORD,
    EvaluatedRecord,
    PublishedRecord,
    ValidationIdentity,
    ValidationStage,
    ValidationState,
    check_validation_identity,
    read_stage,
)
from statecraft.errors import ValidationIdentityError
from statecraft.storage.local import LocalStore

IDENTITY = ValidationIdentity(True, "heldout", "abc")
PENDING = ValidationState(IDENTITY, ValidationStage.EVALUATION_PENDING)
DIR = "iter_000000004"


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    store = LocalStore(tmp_path / "checkpoints")
    store.make_dirs(DIR)
    return store


def put(store: LocalStore, name: str, data: bytes) -> None:
    store.write_atomic(f"{DIR}/{name}", data)


def evaluated(metrics: object = None) -> bytes:
    return EvaluatedRecord(4, {"val_loss": 0.5} if metrics is None else metrics, IDENTITY).encode()  # type: ignore[arg-type]


def test_the_stages_follow_the_records(store: LocalStore) -> None:
    """No record: evaluation-pending; evaluated: publication-pending with its metrics; both:
    published."""
    assert read_stage(store, 4, PENDING).stage is ValidationStage.EVALUATION_PENDING
    put(store, EVALUATED_RECORD, evaluated())
    reading = read_stage(store, 4, PENDING)
    assert (reading.stage, reading.metrics) == (
        ValidationStage.PUBLICATION_PENDING,
        {"val_loss": 0.5},
    )
    put(store, PUBLISHED_RECORD, PublishedRecord(4).encode())
    assert read_stage(store, 4, PENDING).stage is ValidationStage.PUBLISHED


def test_published_without_evaluated_does_not_publish(store: LocalStore) -> None:
    """A published record alone leaves the checkpoint evaluation-pending, with a note."""
    put(store, PUBLISHED_RECORD, PublishedRecord(4).encode())
    reading = read_stage(store, 4, PENDING)
    assert reading.stage is ValidationStage.EVALUATION_PENDING
    assert "no valid evaluated record" in reading.notes[0]


@pytest.mark.parametrize(
    "data",
    [
        b"{not json",
        json.dumps({"schema": "statecraft.validation-evaluated.v1", "iteration": 4}).encode(),
        evaluated({"val_loss": "0.5"}),
        evaluated({"val_loss": float("nan")}),
        EvaluatedRecord(6, {"val_loss": 0.5}, IDENTITY).encode(),
        evaluated().replace(b'"enabled": true', b'"enabled": 1'),
        evaluated().replace(b'"iteration": 4', b'"iteration": "4"'),
    ],
    ids=[
        "garbage",
        "fields-missing",
        "metric-as-text",
        "nan-metric",
        "other-iteration",
        "flag-as-number",
        "iteration-as-text",
    ],
)
def test_a_damaged_evaluated_record_is_ignored(store: LocalStore, data: bytes) -> None:
    """A damaged evaluated record (even with a published one beside it) is not trusted: the
    stage stays evaluation-pending and a note says why."""
    put(store, EVALUATED_RECORD, data)
    put(store, PUBLISHED_RECORD, PublishedRecord(4).encode())
    reading = read_stage(store, 4, PENDING)
    assert reading.stage is ValidationStage.EVALUATION_PENDING
    assert any(EVALUATED_RECORD in note for note in reading.notes)


def test_records_on_a_checkpoint_saved_without_pending_validation_are_ignored(
    store: LocalStore,
) -> None:
    """A regular checkpoint (stage none, or written before validation states) stays
    committed whatever records sit beside it, with a note naming them."""
    put(store, EVALUATED_RECORD, evaluated())
    for saved in (None, ValidationState(IDENTITY, ValidationStage.NONE)):
        reading = read_stage(store, 4, saved)
        assert reading.stage is ValidationStage.NONE
        assert EVALUATED_RECORD in reading.notes[0]


def test_a_changed_identity_is_refused_naming_each_field() -> None:
    """check_validation_identity names every differing field and the fix; an older
    checkpoint without a state counts as validation disabled."""
    other = ValidationIdentity(True, "heldout-v2", "abc")
    with pytest.raises(ValidationIdentityError, match="source: checkpoint recorded 'heldout'"):
        check_validation_identity(PENDING, other, source="x/trainer.pt")
    check_validation_identity(None, ValidationIdentity(), source="x/trainer.pt")
    with pytest.raises(ValidationIdentityError, match="enabled") as caught:
        check_validation_identity(None, IDENTITY, source="x/trainer.pt")
    assert "resume=off" in str(caught.value)
