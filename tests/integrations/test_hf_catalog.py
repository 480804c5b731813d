"""``statecraft.checkpoints(output_dir)`` on a real Hugging Face ``Trainer`` run with
``save_total_limit``: the committed ``checkpoint-N`` folders with their step, the metrics
``trainer_state.json`` logged, size and path; ``latest()`` is what ``last_committed_checkpoint``
resumes; ``best("eval_loss")`` is ``best_model_checkpoint``; ``load_weights`` loads a folder's
weights (the tied head included); torn and damaged folders are never listed as committed."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

import hf_runs
import torch

import statecraft as sc
from statecraft.checkpoint.units import UNIT_MANIFEST_NAME
from statecraft.errors import UnitDamagedError

LIMIT = 2
STEPS = 8


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    with hf_runs.one_thread():
        yield


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """Eight steps, a save and an evaluation every 2, save_total_limit=2, the best folder by
    eval_loss tracked with greater_is_better=True (the loss falls, so the best is the first
    folder): the callback keeps the newest committed folder and that best one."""
    out = tmp_path_factory.mktemp("hf-catalog") / "out"
    with hf_runs.one_thread():
        trainer = hf_runs.make_trainer(
            str(out),
            max_steps=STEPS,
            save_steps=2,
            save_total_limit=LIMIT,
            eval_examples=8,
            eval_strategy="steps",
            eval_steps=2,
            metric_for_best_model="eval_loss",
            greater_is_better=True,
        )
        trainer.train()
    return out, trainer


@pytest.fixture
def out(trained: tuple[Path, Any], tmp_path: Path) -> Path:
    """A private copy of the trained output_dir, free to damage."""
    copy = tmp_path / "out"
    shutil.copytree(trained[0], copy)
    return copy


def _folder_steps(out: Path) -> list[int]:
    return sorted(
        (int(p.name.split("-")[1]) for p in out.iterdir() if p.name.startswith("checkpoint-")),
        reverse=True,
    )


def _logged(folder: Path, step: int) -> dict[str, float]:
    state = json.loads((folder / "trainer_state.json").read_text())
    found: dict[str, float] = {}
    for entry in state["log_history"]:
        if entry.get("step") == step:
            found.update({k: v for k, v in entry.items() if k not in ("step", "epoch")})
    return found


class TestListing:
    def test_latest_is_the_committed_newest_and_what_resume_picks(
        self, trained: tuple[Path, Any]
    ) -> None:
        """After a run with save_total_limit the listing is exactly the folders the callback
        kept, newest first, each committed with its step and size; latest() is the newest,
        the folder last_committed_checkpoint returns."""
        from statecraft.integrations.hf import last_committed_checkpoint

        out, _trainer = trained
        listed = sc.checkpoints(out)
        assert listed.steps == _folder_steps(out)
        # the newest and the best: the Trainer's rule, kept by the callback, counts the best
        # within the limit (keep max(limit, protected))
        assert listed.steps == [STEPS, 2]
        latest = listed.latest()
        assert latest is not None
        assert (
            str(latest.path) == last_committed_checkpoint(out) == str(out / f"checkpoint-{STEPS}")
        )
        for info in listed:
            assert info.state == "committed"
            assert info.framework == "hf-trainer"
            assert info.path == out / f"checkpoint-{info.step}" == info.unit
            files = [
                p for p in info.path.rglob("*") if p.is_file() and p.name != UNIT_MANIFEST_NAME
            ]
            assert info.size_bytes == sum(p.stat().st_size for p in files)

    def test_metrics_are_trainer_state_and_best_is_best_model_checkpoint(
        self, trained: tuple[Path, Any]
    ) -> None:
        """Each folder's metrics are what its trainer_state.json logged at its step
        (eval_loss among them); best("eval_loss") is the Trainer's best_model_checkpoint
        (mode="max", as greater_is_better=True) and carries best_metric; the newest is not."""
        out, trainer = trained
        listed = sc.checkpoints(out)
        for info in listed:
            logged = _logged(info.path, info.step)
            assert "eval_loss" in logged
            assert {k: info.metrics[k] for k in logged} == pytest.approx(logged)
        best = listed.best("eval_loss", "max")
        assert best is not None
        assert best != listed.latest()
        assert str(best.path) == trainer.state.best_model_checkpoint
        assert best.metrics["best_metric"] == pytest.approx(trainer.state.best_metric)
        assert best.metrics["eval_loss"] == pytest.approx(trainer.state.best_metric)

    def test_load_weights_loads_the_folder_named(self, trained: tuple[Path, Any]) -> None:
        """load_weights(output_dir, which=...) loads the chosen folder's model.safetensors
        (the tied lm_head from its embedding), by step and by best; another folder's weights
        differ."""
        from safetensors.torch import load_file

        out, _ = trained
        listed = sc.checkpoints(out)
        oldest = listed.step(2)
        model = hf_runs.build_model()
        loaded = sc.load_weights(model, out, which=2)
        assert loaded.iteration == oldest.step
        saved = load_file(str(oldest.path / "model.safetensors"))
        newest = load_file(str(out / f"checkpoint-{STEPS}" / "model.safetensors"))
        name = "transformer.wte.weight"
        assert not torch.equal(saved[name], newest[name])
        state = model.state_dict()
        for key, tensor in saved.items():
            assert torch.equal(state[key], tensor), key
        assert torch.equal(state["lm_head.weight"], saved[name])
        sc.load_weights(model, out)  # which="latest"
        assert torch.equal(model.state_dict()[name], newest[name])
        loaded = sc.load_weights(model, out, which="best:eval_loss:max")
        assert loaded.iteration == 2
        assert torch.equal(model.state_dict()[name], saved[name])


class TestTornFolders:
    def test_a_torn_folder_is_never_listed(self, out: Path) -> None:
        """A newer checkpoint-N without its commit manifest (a killed save) is not listed;
        latest() and the latest load stay at the newest committed folder."""
        torn = out / f"checkpoint-{STEPS + 2}"
        shutil.copytree(out / f"checkpoint-{STEPS}", torn)
        (torn / UNIT_MANIFEST_NAME).unlink()
        listed = sc.checkpoints(out)
        assert STEPS + 2 not in listed.steps
        assert listed.latest() is not None
        assert listed.latest().step == STEPS
        loaded = sc.load_weights(hf_runs.build_model(), out)
        assert loaded.iteration == STEPS

    def test_a_damaged_folder_is_passed_over_or_refused(self, out: Path) -> None:
        """A flipped byte in the newest folder: listed at the stat level, not at digest;
        load_weights(which="latest") passes over it to the next committed folder, and a
        load that names it refuses."""
        model_file = out / f"checkpoint-{STEPS}" / "model.safetensors"
        data = bytearray(model_file.read_bytes())
        data[-1] ^= 0xFF
        model_file.write_bytes(bytes(data))
        assert STEPS in sc.checkpoints(out).steps
        assert STEPS not in sc.checkpoints(out, verify="digest").steps
        loaded = sc.load_weights(hf_runs.build_model(), out)
        assert loaded.iteration == sc.checkpoints(out).steps[1]
        with pytest.raises(UnitDamagedError, match="does not verify"):
            sc.load_weights(hf_runs.build_model(), out, which=STEPS)
