"""Resume and validation: the adopted checkpoint's validation stage (ResumeResult) and the
validation identity check before anything loads (ResumeContext.validation_identity), over a
real run with a durable-validation checkpoint (tests/validation_runs.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from artifact_files import tree
from checkpoint_runs import Objects, committed_run, private_copy
from validation_runs import (
    IDENTITY,
    METRICS,
    PENDING,
    checkpoints_of,
    save_pending,
    write_evaluated,
    write_published,
)

from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.checkpoint.kernel.machines import load_machine
from statecraft.checkpoint.kernel.validation_records import (
    EVALUATED_RECORD,
    ValidationIdentity,
    ValidationStage,
)
from statecraft.checkpoint.resume.bindings import ResumeContext, Tracked
from statecraft.errors import ValidationIdentityError
from statecraft.storage.local import LocalStore


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Committed 2, 4, 6, 8 (validation disabled) and 10 (evaluation-pending)."""
    out = committed_run(tmp_path_factory.mktemp("pending"), data=True)
    save_pending(out, data=True)
    return out


@pytest.fixture
def out(pristine: Path, tmp_path: Path) -> Path:
    return private_copy(pristine, tmp_path)


def resume(out: Path, **extra: Any) -> tuple[ResumeContext, Any, Objects]:
    objects = Objects()
    ctx = ResumeContext(
        tracked=Tracked(
            model=objects.model,
            optimizer=objects.optimizer,
            scheduler=objects.scheduler,
            data=objects.cursor,
        ),
        store=LocalStore(str(checkpoints_of(out))),
        **({"mode": "auto"} | extra),
    )
    return ctx, load_machine("resume").run(ctx), objects


def params(objects: Objects) -> list[torch.Tensor]:
    return [p.detach().clone() for p in objects.model.parameters()]


class TestStage:
    def test_auto_adopts_the_evaluation_pending_checkpoint(self, out: Path) -> None:
        """resume=auto adopts the pending checkpoint and reports its stage (no metrics)."""
        ctx, run, _ = resume(out)
        assert run.final_state == "resumed", run.error
        result = ctx.result
        assert result is not None
        assert (result.step, result.validation_stage, result.metrics) == (
            PENDING,
            ValidationStage.EVALUATION_PENDING,
            None,
        )
        assert "validation evaluation-pending" in result.reason

    def test_publication_pending_carries_the_metrics(self, out: Path) -> None:
        """After the evaluated record the stage is publication-pending, with its metrics."""
        write_evaluated(out)
        ctx, run, _ = resume(out)
        assert run.final_state == "resumed", run.error
        assert ctx.result is not None
        assert ctx.result.validation_stage is ValidationStage.PUBLICATION_PENDING
        assert ctx.result.metrics == METRICS

    def test_published(self, out: Path) -> None:
        """After the published record the stage is published."""
        write_evaluated(out)
        write_published(out)
        ctx, _, _ = resume(out)
        assert ctx.result is not None
        assert ctx.result.validation_stage is ValidationStage.PUBLISHED

    def test_explicit_reads_the_stage_too(self, out: Path) -> None:
        """An explicit iter_* source reports its stage like auto does."""
        write_evaluated(out)
        source = str(checkpoints_of(out) / iter_dirname(PENDING))
        ctx, run, _ = resume(out, mode="explicit", explicit=source)
        assert run.final_state == "resumed", run.error
        assert ctx.result is not None
        assert ctx.result.validation_stage is ValidationStage.PUBLICATION_PENDING

    def test_a_damaged_record_does_not_advance(self, out: Path) -> None:
        """A damaged evaluated record leaves the stage evaluation-pending, with a note."""
        (checkpoints_of(out) / iter_dirname(PENDING) / EVALUATED_RECORD).write_bytes(b"{")
        ctx, _, _ = resume(out)
        assert ctx.result is not None
        assert ctx.result.validation_stage is ValidationStage.EVALUATION_PENDING
        assert any(EVALUATED_RECORD in note for note in ctx.result.notes)

    def test_a_regular_checkpoint_is_stage_none(self, out: Path) -> None:
        """A checkpoint saved without a pending validation resumes at stage NONE."""
        source = str(checkpoints_of(out) / iter_dirname(8))
        ctx, _, _ = resume(out, mode="explicit", explicit=source)
        assert ctx.result is not None
        assert ctx.result.validation_stage is ValidationStage.NONE


class TestIdentity:
    def test_same_identity_resumes(self, out: Path) -> None:
        """The recorded identity equals this run's: resumed."""
        _, run, _ = resume(out, validation_identity=IDENTITY)
        assert run.final_state == "resumed", run.error

    def test_not_checked_when_none(self, out: Path) -> None:
        """validation_identity=None does not check (the pending checkpoint resumes)."""
        _, run, _ = resume(out, validation_identity=None)
        assert run.final_state == "resumed", run.error

    @pytest.mark.parametrize(
        ("identity", "problem", "source"),
        [
            (
                ValidationIdentity(True, "other", IDENTITY.config),
                "validation source: checkpoint recorded 'heldout', this run has 'other'",
                PENDING,
            ),
            (
                ValidationIdentity(True, "heldout", "0" * 16),
                f"validation config: checkpoint recorded {IDENTITY.config!r}",
                PENDING,
            ),
            (
                ValidationIdentity(),
                "validation enabled: checkpoint recorded True, this run has False",
                PENDING,
            ),
            (IDENTITY, "validation enabled: checkpoint recorded False, this run has True", 8),
        ],
    )
    def test_changed_identity_refuses_before_loading(
        self, out: Path, identity: ValidationIdentity, problem: str, source: int
    ) -> None:
        """Another identity is refused naming trainer.pt and each difference; nothing loads
        and no byte changes."""
        before = tree(out)
        fresh = params(Objects())
        where = checkpoints_of(out) / iter_dirname(source)
        ctx, run, objects = resume(
            out, mode="explicit", explicit=str(where), validation_identity=identity
        )
        assert run.final_state == "refused"
        assert isinstance(run.error, ValidationIdentityError)
        message = str(run.error)
        assert message.startswith(f"local:{where}/trainer.pt: the checkpoint was saved under")
        assert problem in message
        assert "resume=off" in message
        assert "statecraft.load_weights" in message
        assert tree(out) == before
        assert all(torch.equal(a, b) for a, b in zip(params(objects), fresh, strict=True))
        assert objects.cursor.position == 0
        assert ctx.result is None

    def test_auto_refuses_too(self, out: Path) -> None:
        """resume=auto refuses the adopted checkpoint's changed identity (no fallback to an
        older one)."""
        _, run, _ = resume(out, validation_identity=ValidationIdentity(True, "other", "x"))
        assert run.final_state == "refused"
        assert isinstance(run.error, ValidationIdentityError)
        assert f"{iter_dirname(PENDING)}/trainer.pt" in str(run.error)
