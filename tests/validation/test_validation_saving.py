"""Tests of statecraft.checkpoint.validation.saving: the durable validation over a real
LocalStore with real torch objects, its resumed continuation, and every refusal (message
asserted, committed bytes unchanged)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from checkpoint_runs import NoLockStore

from statecraft.checkpoint.fencing.lease import LEASE_NAME, LEASE_SCHEMA, LeaseRecord, acquire_lease
from statecraft.checkpoint.kernel.evaluation import Evaluation
from statecraft.checkpoint.kernel.machines import load_machine
from statecraft.checkpoint.kernel.validation_records import (
    EVALUATED_RECORD,
    PUBLISHED_RECORD,
    ValidationIdentity,
    ValidationStage,
    read_stage,
)
from statecraft.checkpoint.resume.records import Tracked
from statecraft.checkpoint.save.saving import SaveMachines, SaveTarget, save_full_checkpoint
from statecraft.checkpoint.state import Outcome, TrainerState, UpdateClocks, gather_rng_inventory
from statecraft.checkpoint.validation.saving import (
    ValidationReport,
    finish_pending_validation,
    run_durable_validation,
)
from statecraft.errors import (
    CheckpointCorruptError,
    CheckpointError,
    IterationCommittedError,
    TrackingError,
    ValidationFailedError,
    ValidationIdentityError,
    WriterLeaseError,
)
from statecraft.storage import LocalStore

IDENTITY = ValidationIdentity(True, "heldout", ValidationIdentity.config_digest({"every": 2}))
STEP = 4
ITER = "iter_000000004"


class Evaluator:
    """A deterministic evaluation that counts its calls; ``fail`` makes it raise."""

    def __init__(self, *, fail: bool = False) -> None:
        self.calls: list[int] = []
        self.fail = fail

    def __call__(self, step: int) -> dict[str, float]:
        self.calls.append(step)
        if self.fail:
            raise RuntimeError("held-out shard unavailable")
        return {"val_loss": 0.5, "val_acc": 0.75}


def trained(steps: int = STEP) -> Tracked:
    """Real torch objects after ``steps`` applied optimizer steps."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)
    clocks = UpdateClocks()
    for _ in range(steps):
        model(torch.randn(2, 3)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
        clocks.record(Outcome.APPLIED)
    return Tracked(model=model, optimizer=optimizer, scheduler=scheduler, clocks=clocks)


def validate(
    store: LocalStore, tmp_path: Path, evaluator: Evaluator, **kw: object
) -> ValidationReport:
    target = SaveTarget(
        store,
        kw.pop("lease", None),  # type: ignore[arg-type]
        SaveMachines.of(load_machine("save")),
        str(tmp_path),
    )
    return run_durable_validation(
        trained(),
        target,
        evaluation=Evaluation(evaluator, "heldout"),
        identity=kw.pop("identity", IDENTITY),  # type: ignore[arg-type]
        rng=gather_rng_inventory(rank=0, world_size=1),
        data=None,
        step=STEP,
        machine=load_machine("validation"),
        **kw,  # type: ignore[arg-type]
    )


def finish(
    store: LocalStore, tmp_path: Path, evaluator: Evaluator, **kw: object
) -> ValidationReport:
    return finish_pending_validation(
        store,
        STEP,
        evaluation=Evaluation(evaluator, "heldout"),
        identity=kw.pop("identity", IDENTITY),  # type: ignore[arg-type]
        lease=kw.pop("lease", None),  # type: ignore[arg-type]
        machine=load_machine("validation"),
        location=str(tmp_path),
        **kw,  # type: ignore[arg-type]
    )


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def stage(store: LocalStore) -> ValidationStage:
    payload = torch.load(Path(store.root) / ITER / "trainer.pt", weights_only=True)
    saved = TrainerState.from_payload(payload, source="trainer.pt").validation
    return read_stage(store, STEP, saved).stage


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "checkpoints")


class TestRunDurableValidation:
    def test_saves_pending_evaluates_records_and_publishes(
        self, store: LocalStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The checkpoint is saved evaluation-pending, evaluated once, then published with
        both records, and the publication is announced at INFO."""
        evaluator = Evaluator()
        with caplog.at_level(logging.INFO, logger="statecraft"):
            report = validate(store, tmp_path, evaluator)
        assert (report.iteration, report.stage, report.evaluated) == (
            STEP,
            ValidationStage.PUBLISHED,
            True,
        )
        assert report.metrics == {"val_loss": 0.5, "val_acc": 0.75}
        assert report.save is not None
        assert report.save.iteration == STEP
        assert report.location == f"{tmp_path}/{ITER}"
        assert [e for e, _ in report.effects] == [
            "save_checkpoint",
            "evaluate",
            "record_evaluation",
            "publish",
        ]
        assert evaluator.calls == [STEP]
        root = Path(store.root)
        payload = torch.load(root / ITER / "trainer.pt", weights_only=True)
        assert payload["schema"] == "statecraft.trainer-state.v3"
        assert payload["validation"]["stage"] == "evaluation_pending"
        assert payload["validation"]["identity"] == {
            "enabled": True,
            "source": "heldout",
            "config": IDENTITY.config,
        }
        assert (root / ITER / EVALUATED_RECORD).is_file()
        assert (root / ITER / PUBLISHED_RECORD).is_file()
        assert (root / "latest_checkpoint.txt").read_text() == f"{ITER}\n"
        assert stage(store) is ValidationStage.PUBLISHED
        assert "published iter_000000004 (val_acc=0.75, val_loss=0.5)" in caplog.messages

    def test_failed_evaluation_leaves_the_checkpoint_pending(
        self, store: LocalStore, tmp_path: Path
    ) -> None:
        """A failing evaluation raises ValidationFailedError naming the step, and the
        committed checkpoint stays evaluation-pending with no record."""
        with pytest.raises(ValidationFailedError) as info:
            validate(store, tmp_path, Evaluator(fail=True))
        assert str(info.value) == (
            "evaluation 'heldout' at step 4 of the pending checkpoint iter 4 failed: "
            "RuntimeError: held-out shard unavailable"
        )
        assert stage(store) is ValidationStage.EVALUATION_PENDING
        assert not (Path(store.root) / ITER / EVALUATED_RECORD).exists()

    def test_a_regular_checkpoint_at_the_step_is_refused_untouched(
        self, store: LocalStore, tmp_path: Path
    ) -> None:
        """A step already committed by a regular save (stage none) is never rewritten: the
        validation refuses before evaluating, and every byte stays."""
        save_full_checkpoint(
            trained(),
            store,
            rng=None,
            data=None,
            step=STEP,
            lease=None,
            machine=load_machine("save"),
            location=str(tmp_path),
        )
        before = snapshot(tmp_path)
        evaluator = Evaluator()
        with pytest.raises(IterationCommittedError) as info:
            validate(store, tmp_path, evaluator)
        assert str(info.value).startswith(
            f"local:{store.root}/{ITER} is committed without a pending validation (trainer.pt "
            "records validation stage none: a regular save): a committed checkpoint is never "
            "rewritten"
        )
        assert evaluator.calls == []
        assert snapshot(tmp_path) == before

    def test_a_lagging_pointer_is_completed_through_the_save(
        self, store: LocalStore, tmp_path: Path
    ) -> None:
        """A committed evaluation-pending checkpoint whose pointer update was lost gets its
        pointer completed by the save machine's reconcile path (no file of it rewritten),
        then is evaluated and published."""
        save_full_checkpoint(
            trained(2),
            store,
            rng=None,
            data=None,
            step=2,
            lease=None,
            machine=load_machine("save"),
            location=str(tmp_path),
        )
        with pytest.raises(ValidationFailedError):
            validate(store, tmp_path, Evaluator(fail=True))
        pointer = Path(store.root) / "latest_checkpoint.txt"
        pointer.write_text("iter_000000002\n")
        committed = snapshot(Path(store.root) / ITER)
        report = validate(store, tmp_path, Evaluator())
        assert report.save is not None
        assert report.save.retried_commit
        assert report.stage is ValidationStage.PUBLISHED
        assert pointer.read_text() == f"{ITER}\n"
        after = snapshot(Path(store.root) / ITER)
        assert {k: after[k] for k in committed} == committed

    def test_refuses_a_disabled_identity_before_anything_is_written(
        self, store: LocalStore, tmp_path: Path
    ) -> None:
        """A disabled identity is a bad argument: TrackingError, nothing created."""
        before = snapshot(tmp_path)
        with pytest.raises(TrackingError, match="needs this run's enabled ValidationIdentity"):
            validate(store, tmp_path, Evaluator(), identity=ValidationIdentity())
        assert snapshot(tmp_path) == before

    def test_a_failing_publication_step_leaves_it_publication_pending(
        self, store: LocalStore, tmp_path: Path
    ) -> None:
        """A publication step that raises leaves the evaluated record and no published one."""

        def upload(ctx: object) -> None:
            raise OSError("bucket unreachable")

        with pytest.raises(OSError, match="bucket unreachable"):
            validate(store, tmp_path, Evaluator(), publication_steps=[upload])
        assert stage(store) is ValidationStage.PUBLICATION_PENDING


class TestFinishPendingValidation:
    def test_evaluation_pending_is_evaluated_again(self, store: LocalStore, tmp_path: Path) -> None:
        """After a failed evaluation, the resumed run evaluates once and publishes; the
        committed checkpoint files are byte-identical."""
        with pytest.raises(ValidationFailedError):
            validate(store, tmp_path, Evaluator(fail=True))
        committed = snapshot(Path(store.root) / ITER)
        evaluator = Evaluator()
        report = finish(store, tmp_path, evaluator)
        assert (report.stage, report.evaluated, report.save) == (
            ValidationStage.PUBLISHED,
            True,
            None,
        )
        assert evaluator.calls == [STEP]
        after = snapshot(Path(store.root) / ITER)
        assert {k: after[k] for k in committed} == committed
        assert sorted(set(after) - set(committed)) == sorted([EVALUATED_RECORD, PUBLISHED_RECORD])

    def test_publication_pending_never_reevaluates(self, store: LocalStore, tmp_path: Path) -> None:
        """A checkpoint whose evaluation is recorded is published without calling the
        evaluation; the metrics come from the durable record."""

        def upload(ctx: object) -> None:
            raise OSError("bucket unreachable")

        with pytest.raises(OSError):
            validate(store, tmp_path, Evaluator(), publication_steps=[upload])
        evaluator = Evaluator(fail=True)
        report = finish(store, tmp_path, evaluator)
        assert evaluator.calls == []
        assert (report.stage, report.evaluated) == (ValidationStage.PUBLISHED, False)
        assert report.metrics == {"val_loss": 0.5, "val_acc": 0.75}
        assert [e for e, _ in report.effects] == ["publish"]

    def test_published_is_only_settled(self, store: LocalStore, tmp_path: Path) -> None:
        """A published checkpoint is made durable and reported; nothing is evaluated or
        written."""
        validate(store, tmp_path, Evaluator())
        before = snapshot(tmp_path)
        evaluator = Evaluator(fail=True)
        report = finish(store, tmp_path, evaluator)
        assert (report.stage, report.evaluated, evaluator.calls) == (
            ValidationStage.PUBLISHED,
            False,
            [],
        )
        assert [e for e, _ in report.effects] == ["settle"]
        assert snapshot(tmp_path) == before

    def test_a_record_temporary_is_swept(self, store: LocalStore, tmp_path: Path) -> None:
        """A torn temporary a killed writer left beside the manifest is removed."""
        with pytest.raises(ValidationFailedError):
            validate(store, tmp_path, Evaluator(fail=True))
        torn = Path(store.root) / ITER / f".{EVALUATED_RECORD}.tmp-123-4"
        torn.write_bytes(b'{"sch')
        finish(store, tmp_path, Evaluator())
        assert not torn.exists()

    def test_another_identity_is_refused_untouched(self, store: LocalStore, tmp_path: Path) -> None:
        """A pending checkpoint saved under another validation identity is refused with the
        differing fields named; nothing is evaluated or written."""
        with pytest.raises(ValidationFailedError):
            validate(store, tmp_path, Evaluator(fail=True))
        before = snapshot(tmp_path)
        other = ValidationIdentity(True, "other-shard", IDENTITY.config)
        evaluator = Evaluator()
        with pytest.raises(ValidationIdentityError) as info:
            finish(store, tmp_path, evaluator, identity=other)
        assert "validation source: checkpoint recorded 'heldout', this run has 'other-shard'" in (
            str(info.value)
        )
        assert evaluator.calls == []
        assert snapshot(tmp_path) == before

    def test_an_invalid_evaluated_record_is_never_replaced(
        self, store: LocalStore, tmp_path: Path
    ) -> None:
        """A damaged evaluated record keeps the checkpoint evaluation-pending; the retry's
        create finds the name taken and refuses, leaving the damaged record as it is."""
        with pytest.raises(ValidationFailedError):
            validate(store, tmp_path, Evaluator(fail=True))
        (Path(store.root) / ITER / EVALUATED_RECORD).write_bytes(b"not json")
        before = snapshot(tmp_path)
        with pytest.raises(CheckpointCorruptError) as info:
            finish(store, tmp_path, Evaluator())
        assert str(info.value).startswith(
            f"local:{store.root}/{ITER}/{EVALUATED_RECORD}: already exists and is not a valid "
            "record"
        )
        assert "A validation record is never replaced: move it aside" in str(info.value)
        assert snapshot(tmp_path) == before

    def test_a_damaged_trainer_state_is_refused_untouched(
        self, store: LocalStore, tmp_path: Path
    ) -> None:
        """A trainer.pt that no longer matches its recorded digest is corrupt: refused before
        evaluating, nothing written."""
        with pytest.raises(ValidationFailedError):
            validate(store, tmp_path, Evaluator(fail=True))
        trainer = Path(store.root) / ITER / "trainer.pt"
        data = bytearray(trainer.read_bytes())
        data[-30] ^= 0xFF
        trainer.write_bytes(bytes(data))
        before = snapshot(tmp_path)
        evaluator = Evaluator()
        with pytest.raises(CheckpointCorruptError, match="does not match its recorded digest"):
            finish(store, tmp_path, evaluator)
        assert evaluator.calls == []
        assert snapshot(tmp_path) == before

    def test_an_uncommitted_iteration_cannot_be_finished(
        self, store: LocalStore, tmp_path: Path
    ) -> None:
        """With no committed checkpoint there is nothing to continue: a CheckpointError
        naming the fix, and nothing is created."""
        before = snapshot(tmp_path)
        with pytest.raises(CheckpointError) as info:
            finish(store, tmp_path, Evaluator())
        assert "finish_pending_validation continues only the checkpoint resume=auto adopted" in (
            str(info.value)
        )
        assert snapshot(tmp_path) == before


class TestWriterLease:
    def test_a_taken_over_lease_writes_no_record(self, tmp_path: Path) -> None:
        """After another owner took the lease over, the resumed validation refuses before
        publishing a record: WriterLeaseError, and the checkpoint's bytes stay."""
        run = tmp_path / "run"
        store = LocalStore(run / "checkpoints")
        lease = acquire_lease(NoLockStore(LocalStore(str(run))))
        with pytest.raises(ValidationFailedError):
            validate(store, tmp_path, Evaluator(fail=True), lease=lease)
        before = snapshot(run / "checkpoints")
        thief = LeaseRecord(
            LEASE_SCHEMA, "other:12345:abc", "elsewhere", 12345, 2, "2026-01-01T00:00:00+00:00"
        )
        (run / LEASE_NAME).write_bytes(thief.encode())
        with pytest.raises(WriterLeaseError, match="taken over by owner other:12345:abc"):
            finish(store, tmp_path, Evaluator(), lease=lease)
        assert snapshot(run / "checkpoints") == before


class TestFence:
    def test_only_records_of_the_iteration_pass(self, store: LocalStore) -> None:
        """The validation's fence lets its two records and their temporaries through and
        refuses every other name, committed files first of all."""
        from statecraft.checkpoint.validation.bindings import ValidationContext, fence

        ctx = ValidationContext(
            store=store, iteration=STEP, evaluation=Evaluation(Evaluator(), "heldout"),
            identity=IDENTITY,
        )  # fmt: skip
        for name in (EVALUATED_RECORD, PUBLISHED_RECORD, f".{EVALUATED_RECORD}.tmp-1-2"):
            fence(ctx, f"{ITER}/{name}")
        for path in (
            f"{ITER}/model.pt",
            f"iter_000000002/{EVALUATED_RECORD}",
            "latest_checkpoint.txt",
        ):
            with pytest.raises(CheckpointError, match=f"was about to write {path}; it writes only"):
                fence(ctx, path)


class TestExistingRecord:
    def test_a_valid_record_already_there_is_kept(self, store: LocalStore, tmp_path: Path) -> None:
        """A record create that finds a valid record under the name (a retry after an
        ambiguous crash) keeps it as it is and takes its metrics as the durable ones."""
        from statecraft.checkpoint.validation import bindings as v
        def upload(ctx: object) -> None:
            raise OSError("bucket unreachable")

        with pytest.raises(OSError):
            validate(store, tmp_path, Evaluator(), publication_steps=[upload])
        before = snapshot(tmp_path)
        ctx = v.ValidationContext(
            store=store, iteration=STEP, evaluation=Evaluation(Evaluator(), "heldout"),
            identity=IDENTITY,
        )  # fmt: skip
        assert v.observe_validation(ctx) == "publication_pending"
        ctx.metrics, ctx.evaluated = {"val_loss": 9.0}, True
        v.record_evaluation(ctx)
        assert ctx.metrics == {"val_loss": 0.5, "val_acc": 0.75}
        assert snapshot(tmp_path) == before
