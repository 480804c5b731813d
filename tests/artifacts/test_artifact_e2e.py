"""End to end through the facade with a real torch loop: partial plans write artifacts only,
a requeued ``resume=auto`` run refuses them, and the same-step union rules (one save; a
partial union commits its artifact before an ephemeral evaluation that fails)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from artifact_files import write_artifact
from checkpoint_runs import Objects, open_checkpointer, train

import statecraft as sc
from statecraft.checkpoint.kernel.artifact_verify import verify_artifact
from statecraft.checkpoint.kernel.layout import (
    ARTIFACT_MANIFEST_NAME,
    ARTIFACTS_DIR,
    LATEST_POINTER,
)
from statecraft.checkpoint.kernel.validation_records import ValidationStage, read_stage
from statecraft.checkpoint.state import TrainerState
from statecraft.errors import ArtifactResumeError, ResumeRequiredError, ValidationFailedError
from statecraft.storage.local import LocalStore


def attempt_dir(out: Path) -> Path:
    (attempt,) = (p for p in (out / "proj" / "group" / "name").iterdir() if p.is_dir())
    return attempt


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and ".lease" not in p.name and "launch" not in p.name
    }


def committed_artifacts(out: Path) -> list[str]:
    root = attempt_dir(out) / ARTIFACTS_DIR
    return sorted(p.parent.name for p in root.glob(f"iter_*/{ARTIFACT_MANIFEST_NAME}"))


class Calls:
    """An evaluation that records its steps and fails at ``fail_at``."""

    def __init__(self, objects: Objects, fail_at: int = 0) -> None:
        self.objects = objects
        self.fail_at = fail_at
        self.steps: list[int] = []

    def __call__(self, step: int) -> dict[str, float]:
        self.steps.append(step)
        if step == self.fail_at:
            raise RuntimeError(f"eval crashed at {step}")
        with torch.no_grad():
            return {"val_loss": float(self.objects.model(torch.ones(2, 4)).pow(2).mean())}


def model_only_run(out: Path, *extra: str) -> tuple[sc.Checkpointer, Objects]:
    with pytest.warns(UserWarning, match="checkpoint_components"):
        ckpt, objects = open_checkpointer(out, "checkpoint_components=[model]", *extra)
    return ckpt, objects


def test_partial_plan_writes_artifacts_only_and_requeue_refuses(tmp_path):
    """checkpoint_components=[model] commits model-only artifacts at every save (and the
    final one), never a checkpoint or latest_checkpoint.txt; a requeued resume=auto run
    refuses to start, naming the artifact, and changes nothing."""
    ckpt, objects = model_only_run(tmp_path)
    ckpt.resume()
    train(ckpt, objects, 5)
    final = ckpt.finalize()
    assert final is not None
    assert final.iteration == 5
    assert [a.iteration for a in ckpt.artifacts] == [2, 4, 5]
    assert ckpt.saves == []
    assert committed_artifacts(tmp_path) == ["iter_000000002", "iter_000000004", "iter_000000005"]
    checkpoints = attempt_dir(tmp_path) / "checkpoints"
    assert not (checkpoints / LATEST_POINTER).exists()
    assert not list(checkpoints.glob("iter_*"))
    artifacts = LocalStore(str(attempt_dir(tmp_path) / ARTIFACTS_DIR))
    verified = verify_artifact(artifacts, 4)
    assert verified.manifest.components == ("model",)
    assert sorted(
        p.name for p in (attempt_dir(tmp_path) / ARTIFACTS_DIR / "iter_000000004").iterdir()
    ) == [
        ARTIFACT_MANIFEST_NAME,
        "model.pt",
    ]
    weights = torch.load(
        attempt_dir(tmp_path) / ARTIFACTS_DIR / "iter_000000005" / "model.pt", weights_only=True
    )
    assert all(torch.equal(weights[k], v) for k, v in objects.model.state_dict().items())
    ckpt.close()

    before = tree_bytes(tmp_path)
    requeued, _ = model_only_run(tmp_path)
    with pytest.raises(ArtifactResumeError, match="iter_000000005") as caught:
        requeued.resume()
    assert ARTIFACTS_DIR in str(caught.value)
    requeued.close()
    assert tree_bytes(tmp_path) == before


def test_save_into_an_attempt_holding_only_artifacts_requires_resume(tmp_path):
    """A process that did not call resume() may not save into an attempt whose only commits
    are partial artifacts: ResumeRequiredError naming them; nothing written."""
    ckpt, objects = model_only_run(tmp_path)
    ckpt.resume()
    train(ckpt, objects, 2)
    ckpt.close()
    before = tree_bytes(tmp_path)
    again, objects = open_checkpointer(tmp_path)  # the full plan, resume=auto, no resume()
    objects.step()
    again.record(sc.Outcome.APPLIED)
    with pytest.raises(ResumeRequiredError, match=r"partial artifacts .*iter_000000002"):
        again.save()
    again.close()
    assert tree_bytes(tmp_path) == before


def test_no_warning_for_an_inactive_validation_plan(tmp_path):
    """A partial validation plan with save_checkpoint=false is inactive: no UserWarning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        open_checkpointer(tmp_path, "validation.checkpoint_components=[model]")


def trainer_stage(out: Path, iteration: int) -> ValidationStage:
    ckpts = attempt_dir(out) / "checkpoints"
    path = ckpts / f"iter_{iteration:09d}" / "trainer.pt"
    trainer = TrainerState.from_payload(torch.load(path, weights_only=True), source=str(path))
    return read_stage(LocalStore(str(ckpts)), iteration, trainer.validation).stage


def test_full_union_is_one_durable_validation_save(tmp_path):
    """A cadence save and an (ephemeral) validation due at the same step make one full
    save through the durable validation transaction: published, evaluated once."""
    ckpt, objects = open_checkpointer(tmp_path, "save_every=4", "validation.every=4")
    evaluate = Calls(objects)
    ckpt.validate_with(evaluate, source="ones")
    ckpt.resume()
    ends = []
    for _ in range(4):
        objects.step()
        ckpt.record(sc.Outcome.APPLIED)
        ends.append(ckpt.step_end())
    assert [e.validated for e in ends] == [False, False, False, True]
    assert [s.iteration for s in ckpt.saves] == [4]
    assert ends[-1].saved is ckpt.saves[0]
    assert ends[-1].metrics is not None
    assert set(ends[-1].metrics) == {"val_loss"}
    assert evaluate.steps == [4]
    assert trainer_stage(tmp_path, 4) is ValidationStage.PUBLISHED
    assert not (attempt_dir(tmp_path) / ARTIFACTS_DIR).exists()
    assert ckpt.finalize() is None  # step 4 is saved and validated already
    assert evaluate.steps == [4]


def test_validation_alone_is_ephemeral_and_writes_nothing(tmp_path):
    """With save_checkpoint=false, a validation step off the save cadence only evaluates."""
    ckpt, objects = open_checkpointer(tmp_path, "save_every=4", "validation.every=3")
    evaluate = Calls(objects)
    ckpt.validate_with(evaluate, source="ones")
    ckpt.resume()
    train(ckpt, objects, 3)
    assert evaluate.steps == [3]
    assert ckpt.saves == []
    assert not list((attempt_dir(tmp_path) / "checkpoints").glob("iter_*"))


def test_partial_union_commits_the_artifact_before_a_failing_evaluation(tmp_path):
    """checkpoint_components=[model] with validation due at the cadence step: the artifact is
    committed first, the evaluation then fails, and the artifact stays committed."""
    ckpt, objects = model_only_run(tmp_path, "validation.every=2")
    evaluate = Calls(objects, fail_at=2)
    ckpt.validate_with(evaluate, source="ones")
    ckpt.resume()
    objects.step()
    ckpt.record(sc.Outcome.APPLIED)
    ckpt.step_end()
    objects.step()
    ckpt.record(sc.Outcome.APPLIED)
    with pytest.raises(ValidationFailedError, match="eval crashed at 2"):
        ckpt.step_end()
    assert evaluate.steps == [2]
    assert committed_artifacts(tmp_path) == ["iter_000000002"]
    verify_artifact(LocalStore(str(attempt_dir(tmp_path) / ARTIFACTS_DIR)), 2)
    assert ckpt.last_saved_step == 2


def test_validation_only_partial_plan_evaluates_first_and_commits_after(tmp_path):
    """A partial validation plan requested alone (save_checkpoint=true, no cadence) evaluates
    first: a failing evaluation commits nothing; a succeeding one commits the artifact."""
    knobs = (
        "save_every=0",
        "validation.every=2",
        "validation.save_checkpoint=true",
        "validation.checkpoint_components=[model]",
    )
    with pytest.warns(UserWarning, match="validation.checkpoint_components"):
        ckpt, objects = open_checkpointer(tmp_path, *knobs)
    evaluate = Calls(objects, fail_at=2)
    ckpt.validate_with(evaluate, source="ones")
    ckpt.resume()
    train(ckpt, objects, 1)
    objects.step()
    ckpt.record(sc.Outcome.APPLIED)
    with pytest.raises(ValidationFailedError, match="eval crashed at 2"):
        ckpt.step_end()
    assert committed_artifacts(tmp_path) == []
    train(ckpt, objects, 2)  # step 4: the evaluation succeeds, then the artifact commits
    assert evaluate.steps == [2, 4]
    assert committed_artifacts(tmp_path) == ["iter_000000004"]
    assert ckpt.artifacts[-1].metrics is not None
    assert not (attempt_dir(tmp_path) / "checkpoints" / LATEST_POINTER).exists()


def test_the_artifact_loads_for_evaluation_with_load_weights(tmp_path):
    """statecraft.load_weights loads a model-only artifact into a fresh model."""
    ckpt, objects = model_only_run(tmp_path)
    ckpt.resume()
    train(ckpt, objects, 2)
    fresh = torch.nn.Linear(4, 3)
    sc.load_weights(fresh, attempt_dir(tmp_path) / ARTIFACTS_DIR / "iter_000000002")
    assert all(torch.equal(fresh.state_dict()[k], v) for k, v in objects.model.state_dict().items())


def test_final_validation_of_a_step_the_cadence_saved_is_ephemeral(tmp_path):
    """A cadence save at the last step (8) precedes the final validation at finalize(): the
    evaluation runs once, ephemerally, and the committed iter_8 is not saved again."""
    ckpt, objects = open_checkpointer(
        tmp_path, "save_every=4", "validation.every=3", "validation.save_checkpoint=true"
    )
    evaluate = Calls(objects)
    ckpt.validate_with(evaluate, source="ones")
    ckpt.resume()
    train(ckpt, objects, 8)
    iter_8 = attempt_dir(tmp_path) / "checkpoints" / "iter_000000008"
    before = tree_bytes(iter_8)
    assert ckpt.finalize() is None
    assert ckpt.final is not None
    assert ckpt.final.validated
    assert ckpt.final.saved is None
    assert evaluate.steps == [3, 6, 8]
    assert [s.iteration for s in ckpt.saves] == [3, 4, 6, 8]
    assert tree_bytes(iter_8) == before
    assert trainer_stage(tmp_path, 8) is ValidationStage.NONE


def test_explicit_resume_into_a_pinned_attempt_behind_its_artifact_is_refused(tmp_path):
    """An explicit resume with a pinned run_ts continues in that attempt, so the attempt's
    artifacts count: a source behind its newest artifact is refused, naming both, and
    nothing changes; an explicit resume without a pin continues in a new sibling and loads."""
    ckpt, objects = open_checkpointer(tmp_path)
    ckpt.resume()
    train(ckpt, objects, 2)
    ckpt.close()
    attempt = attempt_dir(tmp_path)
    write_artifact(attempt / ARTIFACTS_DIR, 4, ["model"])
    source = str(attempt / "checkpoints" / "iter_000000002")
    before = tree_bytes(tmp_path)
    pinned, _ = open_checkpointer(tmp_path, f"resume={source}", f"run_ts={attempt.name}")
    with pytest.raises(ArtifactResumeError, match="iter_000000004") as caught:
        pinned.resume()
    assert "iter_000000002" in str(caught.value)
    pinned.close()
    assert tree_bytes(tmp_path) == before
    sibling, _ = open_checkpointer(tmp_path, f"resume={source}")
    assert sibling.resume().step == 2
    sibling.close()
