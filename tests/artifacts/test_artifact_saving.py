"""save_artifact writes partial artifacts under checkpoint_artifacts/ through the artifact
machine, with real torch objects on a real filesystem; every refusal leaves the committed
bytes as they were."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

from statecraft.checkpoint.artifacts.bindings import ArtifactContext
from statecraft.checkpoint.artifacts.saving import save_artifact
from statecraft.checkpoint.kernel.artifact_manifest import (
    ARTIFACT_MANIFEST_SCHEMA,
    ArtifactManifest,
    decode_artifact_manifest,
)
from statecraft.checkpoint.kernel.artifact_verify import verify_artifact
from statecraft.checkpoint.kernel.components import ComponentPlan
from statecraft.checkpoint.kernel.evaluation import Evaluation
from statecraft.checkpoint.kernel.layout import ARTIFACT_MANIFEST_NAME, MANIFEST_NAME
from statecraft.checkpoint.kernel.machines import load_machine
from statecraft.checkpoint.kernel.manifest import FileEntry
from statecraft.checkpoint.resume.records import Tracked
from statecraft.checkpoint.state import UpdateClocks, gather_rng_inventory
from statecraft.errors import (
    ArtifactCommittedError,
    CheckpointCorruptError,
    CheckpointError,
    ValidationFailedError,
)
from statecraft.storage import LocalStore
from statecraft.storage.digest import Digest

MACHINE = load_machine("artifact")


def _tracked(step: int = 4) -> Tracked:
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    return Tracked(
        model=model, optimizer=optimizer, clocks=UpdateClocks(optimizer_step=step, attempt_id=step)
    )


def _save(run: Path, components, *, step: int = 4, tracked=None, **kwargs):
    store = LocalStore(run / "checkpoint_artifacts")
    return save_artifact(
        tracked or _tracked(step),
        store,
        plan=ComponentPlan.of(components),
        rng=gather_rng_inventory(rank=0, world_size=1),
        data=None,
        step=step,
        lease=None,
        machine=MACHINE,
        location=str(run / "checkpoint_artifacts"),
        **kwargs,
    )


def _snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _manifest(run: Path, step: int = 4) -> dict:
    path = run / "checkpoint_artifacts" / f"iter_{step:09d}" / ARTIFACT_MANIFEST_NAME
    return json.loads(path.read_text())


class _Recorder:
    def __init__(self, fails: bool = False) -> None:
        self.calls: list[int] = []
        self.fails = fails

    def __call__(self, step: int) -> dict[str, float]:
        self.calls.append(step)
        if self.fails:
            raise RuntimeError("held-out loss is NaN")
        return {"val_loss": 0.25}


class TestWrites:
    def test_model_artifact_is_committed_and_verifies(self, tmp_path: Path) -> None:
        """A model-only artifact holds model.pt and its manifest, verifies, loads with plain
        torch.load(weights_only=True), and nothing is written under checkpoints/."""
        tracked = _tracked()
        report = _save(tmp_path, ["model"], tracked=tracked)
        where = tmp_path / "checkpoint_artifacts" / "iter_000000004"
        assert sorted(p.name for p in where.iterdir()) == [ARTIFACT_MANIFEST_NAME, "model.pt"]
        assert report.components == ("model",)
        assert report.location == str(where)
        assert report.bytes_written == (where / "model.pt").stat().st_size
        assert report.metrics is None
        assert not report.evaluated
        assert [name for name, _ in report.effects][-1] == "commit_manifest"
        verified = verify_artifact(LocalStore(tmp_path / "checkpoint_artifacts"), 4)
        assert verified.manifest.components == ("model",)
        assert verified.trainer is None
        loaded = torch.load(where / "model.pt", weights_only=True)
        assert torch.equal(loaded["weight"], tracked.model.weight)
        assert not (tmp_path / "checkpoints").exists()
        assert not list(tmp_path.rglob("latest_checkpoint.txt"))

    def test_training_state_artifact_holds_the_trainer_state(self, tmp_path: Path) -> None:
        """A [optimizer, training_state] artifact writes optim.pt and trainer.pt (the captured
        clocks), never model.pt, and records the physical families."""
        _save(tmp_path, ["training_state", "optimizer"], step=7)
        manifest = _manifest(tmp_path, 7)
        assert manifest["components"] == ["optimizer", "training_state"]
        assert manifest["physical"] == ["optim", "trainer", "data", "old", "ref"]
        assert sorted(manifest["files"]) == ["optim.pt", "trainer.pt"]
        verified = verify_artifact(LocalStore(tmp_path / "checkpoint_artifacts"), 7)
        assert verified.trainer is not None
        assert verified.trainer.optimizer_step == 7

    def test_full_plan_is_refused(self, tmp_path: Path) -> None:
        """The full plan is a checkpoint: the artifact save refuses it, writing nothing."""
        with pytest.raises(CheckpointError, match="is the full plan, which is a checkpoint"):
            _save(tmp_path, ["model", "optimizer", "training_state"])
        assert _snapshot(tmp_path) == {}


class TestEvaluation:
    def test_evaluate_first_records_metrics_in_the_manifest(self, tmp_path: Path) -> None:
        """An artifact requested by validation alone evaluates first and records the metrics."""
        recorder = _Recorder()
        report = _save(tmp_path, ["model"], evaluation=Evaluation.of(recorder), evaluate_first=True)
        assert recorder.calls == [4]
        assert report.evaluated
        assert report.metrics == {"val_loss": 0.25}
        assert _manifest(tmp_path)["metrics"] == {"val_loss": 0.25}
        assert report.effects[0][0] == "evaluate_before_commit"

    def test_evaluate_first_failure_writes_nothing(self, tmp_path: Path) -> None:
        """A failed evaluation before the commit raises ValidationFailedError and leaves no
        artifact directory."""
        recorder = _Recorder(fails=True)
        with pytest.raises(ValidationFailedError, match="held-out loss is NaN") as caught:
            _save(tmp_path, ["model"], evaluation=Evaluation.of(recorder), evaluate_first=True)
        assert caught.value.step == 4
        assert _snapshot(tmp_path) == {}
        assert not (tmp_path / "checkpoint_artifacts" / "iter_000000004").exists()

    def test_after_commit_metrics_go_to_the_report_and_log(self, tmp_path: Path, caplog) -> None:
        """A cadence artifact's ephemeral evaluation runs after the commit: its metrics are in
        the report and an INFO line, not in the manifest."""
        with caplog.at_level(logging.INFO, logger="statecraft"):
            report = _save(tmp_path, ["model"], evaluation=Evaluation.of(_Recorder()))
        assert report.metrics == {"val_loss": 0.25}
        assert report.evaluated
        assert _manifest(tmp_path)["metrics"] is None
        assert [name for name, _ in report.effects][-1] == "evaluate_after_commit"
        assert "validated iter 4 after committing its artifact: val_loss=0.25" in caplog.text

    def test_after_commit_failure_keeps_the_artifact(self, tmp_path: Path) -> None:
        """A failed ephemeral evaluation raises ValidationFailedError; the artifact stays
        committed and verifies."""
        with pytest.raises(ValidationFailedError, match="held-out loss is NaN"):
            _save(tmp_path, ["model"], evaluation=Evaluation.of(_Recorder(fails=True)))
        verify_artifact(LocalStore(tmp_path / "checkpoint_artifacts"), 4)


class TestRefusals:
    def test_second_save_to_a_committed_step(self, tmp_path: Path) -> None:
        """A second save at a committed artifact step refuses before any writer (or the
        evaluation) runs; the committed bytes are unchanged."""
        _save(tmp_path, ["model"])
        before = _snapshot(tmp_path)
        recorder = _Recorder()
        with pytest.raises(ArtifactCommittedError, match="is already a committed artifact") as e:
            _save(tmp_path, ["model"], step=4, evaluation=Evaluation.of(recorder))
        assert e.value.iteration == 4
        assert e.value.path.endswith("iter_000000004")
        assert "wrote nothing" in str(e.value)
        assert recorder.calls == []
        assert _snapshot(tmp_path) == before

    def test_damaged_artifact_manifest(self, tmp_path: Path) -> None:
        """A damaged artifact manifest is refused with CheckpointCorruptError naming it; the
        directory is left byte for byte."""
        _save(tmp_path, ["model"])
        manifest = tmp_path / "checkpoint_artifacts" / "iter_000000004" / ARTIFACT_MANIFEST_NAME
        manifest.write_bytes(manifest.read_bytes()[:40])
        before = _snapshot(tmp_path)
        with pytest.raises(CheckpointCorruptError, match="artifact manifest is not valid JSON"):
            _save(tmp_path, ["model"])
        assert _snapshot(tmp_path) == before

    def test_full_checkpoint_manifest_in_an_artifact_dir(self, tmp_path: Path) -> None:
        """An artifact directory holding a full-checkpoint manifest is refused as foreign; the
        directory is left byte for byte."""
        where = tmp_path / "checkpoint_artifacts" / "iter_000000004"
        where.mkdir(parents=True)
        (where / MANIFEST_NAME).write_text('{"schema": "statecraft.checkpoint-manifest.v2"}')
        before = _snapshot(tmp_path)
        with pytest.raises(CheckpointCorruptError, match="holding a full-checkpoint manifest"):
            _save(tmp_path, ["model"])
        assert _snapshot(tmp_path) == before

    def test_leftovers_of_a_killed_save_are_cleared(self, tmp_path: Path) -> None:
        """An uncommitted iteration (no manifest) is cleared and written anew."""
        where = tmp_path / "checkpoint_artifacts" / "iter_000000004"
        where.mkdir(parents=True)
        (where / "model.pt").write_bytes(b"half a model")
        (where / "stray.bin").write_bytes(b"x")
        _save(tmp_path, ["model"])
        assert sorted(p.name for p in where.iterdir()) == [ARTIFACT_MANIFEST_NAME, "model.pt"]
        verify_artifact(LocalStore(tmp_path / "checkpoint_artifacts"), 4)

    def test_context_refuses_payloads_that_do_not_match(self, tmp_path: Path) -> None:
        """The context names the plan's files when the payloads differ."""
        with pytest.raises(CheckpointError, match=r"writes \['model.pt'\]; got payloads for"):
            ArtifactContext(
                store=LocalStore(tmp_path / "a"),
                plan=ComponentPlan.of(["model"]),
                iteration=1,
                payloads={"optim.pt": dict},
            )


class TestSchema:
    def _manifest(self, **changes) -> ArtifactManifest:
        entry = FileEntry(10, Digest("xxh3_128", "0" * 32))
        fields = dict(
            schema=ARTIFACT_MANIFEST_SCHEMA,
            iteration=3,
            format="consolidated",
            components=("model",),
            physical=("model",),
            files={"model.pt": entry},
            metrics=None,
            writer={"statecraft": "0"},
        )
        fields.update(changes)
        return ArtifactManifest(**fields)

    def test_encode_enforces_the_schema(self) -> None:
        """encode refuses a record that violates specs/artifact.manifest.schema.json (a file
        name no plan writes), naming the schema."""
        entry = FileEntry(10, Digest("xxh3_128", "0" * 32))
        with pytest.raises(
            CheckpointError, match=r"violates specs/artifact\.manifest\.schema\.json"
        ):
            self._manifest(files={"evil.pt": entry}).encode()

    def test_decode_enforces_the_schema(self) -> None:
        """decode refuses a manifest the schema rejects (an unknown file name), as corrupt."""
        data = json.loads(self._manifest().encode())
        data["files"]["evil.pt"] = data["files"].pop("model.pt")
        with pytest.raises(CheckpointCorruptError, match=r"violates specs/artifact\.manifest"):
            decode_artifact_manifest(json.dumps(data).encode(), source="x")

    def test_a_valid_manifest_round_trips(self) -> None:
        """A valid manifest encodes and decodes to the same record."""
        manifest = self._manifest(metrics={"val_loss": 0.5})
        assert decode_artifact_manifest(manifest.encode(), source="x") == manifest
