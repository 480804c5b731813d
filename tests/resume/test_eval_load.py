"""Loading for evaluation and sampling (statecraft/checkpoint/resume/eval_load.py; issue 7, item 7):
``statecraft.load_weights`` and ``statecraft.read_loop_state`` on real runs.

Main had no such call: an evaluation script had to build a Checkpointer (minting an attempt,
taking the writer lease, reading the optimizer) or torch.load files by hand, unverified.
"""

from __future__ import annotations

import io
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
import xxhash
from artifact_files import default_payloads, write_artifact
from checkpoint_runs import RUN, committed_run, flip_tensor_bit

import statecraft as sc
from statecraft.checkpoint.artifacts.saving import save_artifact
from statecraft.checkpoint.kernel.components import ComponentPlan
from statecraft.checkpoint.kernel.layout import ARTIFACTS_DIR, MANIFEST_NAME, iter_dirname
from statecraft.checkpoint.kernel.machines import load_machine
from statecraft.checkpoint.resume.records import Tracked
from statecraft.checkpoint.state import TrainerState, UpdateClocks, gather_rng_inventory
from statecraft.errors import CheckpointCorruptError, CheckpointSourceError, ResumeError
from statecraft.storage import LocalStore

LOOP_STATE = {"model_args": {"n_in": 4, "n_out": 3}, "best_val_loss": 1.25}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Committed iterations 2, 4, 6 and 8, each trainer.pt's extra holding LOOP_STATE plus
    its iteration (written the way a save writes it, manifest re-recorded)."""
    out = committed_run(tmp_path_factory.mktemp("pristine"), data=True)
    for iteration in (2, 4, 6, 8):
        where = iter_path(out, iteration)
        payload = torch.load(where / "trainer.pt", weights_only=True)
        payload["extra"] = {**LOOP_STATE, "iteration": iteration}
        rewrite(where, "trainer.pt", payload)
    return out


def rewrite(where: Path, name: str, payload: Any) -> None:
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    data = buffer.getvalue()
    (where / name).write_bytes(data)
    manifest = json.loads((where / MANIFEST_NAME).read_bytes())
    manifest["files"][name] = {
        "size": len(data),
        "digest": {"algorithm": "xxh3_128", "value": xxhash.xxh3_128_hexdigest(data)},
    }
    (where / MANIFEST_NAME).write_text(json.dumps(manifest, sort_keys=True, indent=1) + "\n")


def attempt_dir(out: Path) -> Path:
    return min(p for p in RUN.job_dir(out).iterdir() if p.is_dir())


def iter_path(out: Path, iteration: int) -> Path:
    return attempt_dir(out) / "checkpoints" / iter_dirname(iteration)


def everything(out: Path) -> dict[str, bytes | None]:
    """Every path under ``out`` (directories too, lease and lock files included) -> bytes."""
    return {
        str(p.relative_to(out)): p.read_bytes() if p.is_file() else None
        for p in sorted(out.rglob("*"))
    }


def saved_weights(out: Path, iteration: int) -> dict[str, torch.Tensor]:
    return torch.load(iter_path(out, iteration) / "model.pt", weights_only=True)


def fresh_model() -> torch.nn.Linear:
    torch.manual_seed(123)
    return torch.nn.Linear(4, 3)


def assert_loaded(model: torch.nn.Module, out: Path, iteration: int) -> None:
    saved = saved_weights(out, iteration)
    assert all(torch.equal(model.state_dict()[k], saved[k]) for k in saved)


class TestLoadWeights:
    def test_from_the_output_root_writes_nothing(self, out: Path) -> None:
        """An output root with one run: the newest checkpoint's weights and loop state, and
        not a byte, file or directory is added, changed or removed (no attempt, no lease)."""
        before = everything(out)
        model = fresh_model()
        loaded = sc.load_weights(model, out)
        assert loaded == sc.LoadedCheckpoint(
            str(iter_path(out, 8)), 8, {**LOOP_STATE, "iteration": 8}
        )
        assert_loaded(model, out, 8)
        assert everything(out) == before

    @pytest.mark.parametrize("kind", ["job", "attempt", "checkpoints"])
    def test_from_a_run_attempt_or_checkpoints_dir(self, out: Path, kind: str) -> None:
        """Each directory of the layout leads to the same newest checkpoint."""
        source = {
            "job": RUN.job_dir(out),
            "attempt": attempt_dir(out),
            "checkpoints": attempt_dir(out) / "checkpoints",
        }[kind]
        model = fresh_model()
        assert sc.load_weights(model, source).iteration == 8
        assert_loaded(model, out, 8)

    def test_an_iter_dir_is_loaded_exactly(self, out: Path) -> None:
        """An iter_* path loads that checkpoint, not the newest."""
        model = fresh_model()
        assert sc.load_weights(model, iter_path(out, 4)).loop_state["iteration"] == 4
        assert_loaded(model, out, 4)

    def test_passes_over_a_newer_checkpoint_that_does_not_verify(
        self, out: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A bit flipped in iter 8's model.pt: iter 6 is loaded, iter 8 passed over with a
        warning that says why."""
        flip_tensor_bit(iter_path(out, 8) / "model.pt")
        before = everything(out)
        model = fresh_model()
        with caplog.at_level(logging.WARNING, logger="statecraft"):
            loaded = sc.load_weights(model, out)
        assert loaded.iteration == 6
        assert_loaded(model, out, 6)
        assert any(
            "passed over" in r.getMessage()
            and "iter_000000008" in r.getMessage()
            and "does not match the manifest" in r.getMessage()
            for r in caplog.records
        )
        assert everything(out) == before

    def test_the_optimizer_is_never_read(self, out: Path) -> None:
        """optim.pt replaced by garbage of the same size: still iter 8 (neither hashed nor
        parsed), while a full verification would refuse it."""
        optim = iter_path(out, 8) / "optim.pt"
        optim.write_bytes(b"\0" * optim.stat().st_size)
        model = fresh_model()
        assert sc.load_weights(model, out).iteration == 8
        ckpt = sc.Checkpointer(
            sc.CheckpointConfig.load(None, ["resume=" + str(iter_path(out, 8))]),
            run=RUN,
            output_root=out,
        )
        ckpt.track(model=model, optimizer=torch.optim.AdamW(model.parameters()))
        with pytest.raises(CheckpointCorruptError, match=r"optim\.pt: digest"):
            ckpt.resume()

    def test_a_model_that_does_not_fit_is_refused_unchanged(self, out: Path) -> None:
        """A model of another shape: refused naming the difference, the model untouched."""
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 5)
        weight = model.weight.detach().clone()
        before = everything(out)
        with pytest.raises(ResumeError) as info:
            sc.load_weights(model, out)
        message = str(info.value)
        assert message.startswith(f"{iter_path(out, 8)}: does not fit the tracked objects: ")
        assert "model.pt 'weight' has shape (3, 4), the live model (5, 4)" in message
        assert torch.equal(model.weight, weight)
        assert everything(out) == before

    def test_a_given_iter_dir_that_does_not_verify_fails(self, out: Path) -> None:
        """An iter_* source has no fallback: its problem is raised."""
        flip_tensor_bit(iter_path(out, 8) / "model.pt")
        with pytest.raises(CheckpointCorruptError, match=r"model\.pt: digest .* does not match"):
            sc.load_weights(fresh_model(), iter_path(out, 8))

    def test_size_level_skips_the_digest(self, out: Path) -> None:
        """verify="size" does not hash: the flipped bit goes unseen (the documented trade)."""
        flip_tensor_bit(iter_path(out, 8) / "model.pt")
        assert sc.load_weights(fresh_model(), out, verify="size").iteration == 8


class TestSources:
    def test_several_runs_are_listed(self, out: Path) -> None:
        """An output root with two runs: an error listing both, nothing loaded."""
        shutil.copytree(RUN.job_dir(out), out / "proj" / "group" / "other")
        model = fresh_model()
        weight = model.weight.detach().clone()
        with pytest.raises(CheckpointSourceError) as info:
            sc.load_weights(model, out)
        assert f"{out}: holds 2 runs (proj/group/name, proj/group/other); point at one" in str(
            info.value
        )
        assert info.value.runs == [  # type: ignore[attr-defined]
            str(out / "proj" / "group" / "name"),
            str(out / "proj" / "group" / "other"),
        ]
        assert torch.equal(model.weight, weight)

    def test_no_run_and_no_directory(self, tmp_path: Path) -> None:
        """An empty directory and a missing path each say what to point at."""
        with pytest.raises(CheckpointSourceError, match="holds no run; point at one of: an "):
            sc.read_loop_state(tmp_path)
        with pytest.raises(CheckpointSourceError, match="no such directory; point at an output"):
            sc.read_loop_state(tmp_path / "missing")

    def test_newest_attempt_holding_a_checkpoint(self, out: Path) -> None:
        """A newer attempt without a committed checkpoint is skipped for the older one."""
        newer = RUN.job_dir(out) / "29991231235959" / "checkpoints"
        newer.mkdir(parents=True)
        assert sc.read_loop_state(RUN.job_dir(out))["iteration"] == 8

    def test_an_attempt_without_checkpoints(self, out: Path) -> None:
        """An attempt dir with no checkpoints/ yet: no checkpoint, said as such."""
        empty = RUN.job_dir(out) / "29991231235959"
        empty.mkdir()
        with pytest.raises(
            CheckpointSourceError, match=r"no committed checkpoint that verifies .*0 passed over"
        ):
            sc.load_weights(fresh_model(), empty)

    def test_nothing_verifies(self, out: Path) -> None:
        """Every checkpoint damaged: an error counting them and giving the newest's reason."""
        for iteration in (2, 4, 6, 8):
            flip_tensor_bit(iter_path(out, iteration) / "model.pt")
        with pytest.raises(CheckpointSourceError) as info:
            sc.read_loop_state(out)
        message = str(info.value)
        assert "no committed checkpoint that verifies (verify=digest; 4 passed over, the " in (
            message
        )
        assert "iter_000000008/model.pt: digest" in message


class TestReadLoopState:
    def test_reads_the_loop_state_of_the_checkpoint_load_weights_picks(self, out: Path) -> None:
        """read_loop_state follows load_weights' choice (iter 6 when iter 8's model is bad),
        so model_args and the weights come from one checkpoint; nothing is written."""
        assert sc.read_loop_state(out) == {**LOOP_STATE, "iteration": 8}
        flip_tensor_bit(iter_path(out, 8) / "model.pt")
        before = everything(out)
        state = sc.read_loop_state(out)
        assert state == {**LOOP_STATE, "iteration": 6}
        state["model_args"]["n_in"] = 99  # a copy: the next read is unaffected
        assert sc.read_loop_state(out)["model_args"]["n_in"] == 4
        assert everything(out) == before


def artifacts_of(out: Path) -> Path:
    return attempt_dir(out) / ARTIFACTS_DIR


def artifact_weights(where: Path) -> dict[str, torch.Tensor]:
    return torch.load(where / "model.pt", weights_only=True)


def has_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(model.state_dict()[k], weights[k]) for k in weights)


class TestArtifacts:
    """Issue 9, item 7: an artifact directory is a load_weights source (model plans only)."""

    def test_a_model_artifact_loads_and_writes_nothing(self, out: Path) -> None:
        """checkpoint_artifacts/iter_10 of plan [model]: its weights, kind "artifact", no loop
        state, and not a byte of the output root changed."""
        where = write_artifact(artifacts_of(out), 10, ["model"], seed=7)
        before = everything(out)
        model = fresh_model()
        loaded = sc.load_weights(model, where)
        assert loaded == sc.LoadedCheckpoint(str(where), 10, {}, "artifact")
        assert has_weights(model, artifact_weights(where))
        assert everything(out) == before

    def test_the_loop_state_of_an_artifact_with_training_state(self, out: Path) -> None:
        """[model, training_state]: read_loop_state and load_weights give its trainer.pt
        extra."""
        plan = ComponentPlan.of(["model", "training_state"])
        payloads = default_payloads(plan, 10)
        trainer = TrainerState(optimizer_step=10, attempt_id=10, rng=None, extra=LOOP_STATE)
        payloads["trainer.pt"] = trainer.to_payload()
        where = write_artifact(artifacts_of(out), 10, plan.components, payloads=payloads)
        assert sc.read_loop_state(where) == LOOP_STATE
        assert sc.load_weights(fresh_model(), where).loop_state == LOOP_STATE

    @pytest.mark.parametrize("plan", [["optimizer"], ["training_state"]])
    def test_an_artifact_without_model_is_refused(self, out: Path, plan: list[str]) -> None:
        """An artifact whose plan lacks model is refused saying so; model and files
        untouched."""
        where = write_artifact(artifacts_of(out), 10, plan)
        before = everything(out)
        model = fresh_model()
        weight = model.weight.detach().clone()
        with pytest.raises(CheckpointSourceError) as info:
            sc.load_weights(model, where)
        assert str(info.value) == (
            f"{where}: is an artifact of plan [{plan[0]}], which holds no model weights "
            "(model.pt); load_weights needs an artifact whose plan includes model, or a full "
            "checkpoint"
        )
        assert torch.equal(model.weight, weight)
        assert everything(out) == before

    @pytest.mark.parametrize("damage", ["flip", "uncommitted", "foreign"])
    def test_an_artifact_that_does_not_verify_is_refused(self, out: Path, damage: str) -> None:
        """A flipped bit, a missing artifact manifest, a full-checkpoint manifest inside:
        each refused with its reason, the model unchanged, nothing written."""
        where = write_artifact(artifacts_of(out), 10, ["model"], manifest=damage != "uncommitted")
        if damage == "flip":
            flip_tensor_bit(where / "model.pt")
        if damage == "foreign":
            (where / MANIFEST_NAME).write_text("{}")
        before = everything(out)
        model = fresh_model()
        weight = model.weight.detach().clone()
        with pytest.raises(CheckpointCorruptError) as info:
            sc.load_weights(model, where)
        reason = {
            "flip": "model.pt: digest xxh3_128",
            "uncommitted": ": has no artifact manifest",
            "foreign": ": is an artifact directory holding a full-checkpoint manifest",
        }[damage]
        assert reason in str(info.value)
        assert torch.equal(model.weight, weight)
        assert everything(out) == before

    def test_the_artifacts_dir_gives_the_newest_model_artifact(
        self, out: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """checkpoint_artifacts/: a newer [optimizer] artifact is skipped, a newer damaged one
        passed over with a warning, the newest intact model artifact loaded."""
        root = artifacts_of(out)
        good = write_artifact(root, 10, ["model"], seed=1)
        flip_tensor_bit(write_artifact(root, 12, ["model", "optimizer"], seed=2) / "model.pt")
        write_artifact(root, 14, ["optimizer"])
        model = fresh_model()
        with caplog.at_level(logging.WARNING, logger="statecraft"):
            loaded = sc.load_weights(model, root)
        assert (loaded.iteration, loaded.kind, loaded.location) == (10, "artifact", str(good))
        assert has_weights(model, artifact_weights(good))
        assert any(
            "passed over" in r.getMessage() and "iter_000000012" in r.getMessage()
            for r in caplog.records
        )
        shutil.rmtree(good)
        with pytest.raises(CheckpointSourceError, match="no committed artifact with model that"):
            sc.load_weights(fresh_model(), root)

    def test_a_run_source_never_loads_an_artifact(self, out: Path) -> None:
        """A newer artifact does not change what a run, attempt or checkpoints/ source loads:
        the newest full checkpoint (iter 8)."""
        write_artifact(artifacts_of(out), 10, ["model"], seed=3)
        for source in (out, RUN.job_dir(out), attempt_dir(out)):
            loaded = sc.load_weights(fresh_model(), source)
            assert (loaded.iteration, loaded.kind) == (8, "checkpoint")

    def test_readers_never_create_the_artifacts_dir(self, out: Path) -> None:
        """Loading from a run without artifacts creates no checkpoint_artifacts/."""
        sc.load_weights(fresh_model(), out)
        sc.read_loop_state(attempt_dir(out))
        assert not artifacts_of(out).exists()

    def test_a_model_that_does_not_fit_an_artifact(self, out: Path) -> None:
        """Another shape: refused naming the artifact and the difference, model untouched."""
        where = write_artifact(artifacts_of(out), 10, ["model"])
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 5)
        weight = model.weight.detach().clone()
        with pytest.raises(ResumeError) as info:
            sc.load_weights(model, where)
        assert str(info.value).startswith(f"{where}: does not fit the tracked objects: ")
        assert torch.equal(model.weight, weight)

    def test_an_artifact_the_artifact_machine_wrote(self, tmp_path: Path) -> None:
        """save_artifact's [model, training_state] artifact loads through load_weights (kind
        artifact, nothing written) and its model.pt through plain torch.load(weights_only=True)."""
        torch.manual_seed(5)
        model = torch.nn.Linear(4, 3)
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
        clocks = UpdateClocks(optimizer_step=6, attempt_id=6)
        root = tmp_path / ARTIFACTS_DIR
        save_artifact(
            Tracked(model=model, optimizer=optimizer, clocks=clocks),
            LocalStore(root),
            plan=ComponentPlan.of(["training_state", "model"]),
            rng=gather_rng_inventory(rank=0, world_size=1),
            data=None,
            step=6,
            lease=None,
            machine=load_machine("artifact"),
            location=str(root),
        )
        where = root / iter_dirname(6)
        before = everything(tmp_path)
        target = fresh_model()
        loaded = sc.load_weights(target, where)
        assert (loaded.location, loaded.iteration, loaded.kind) == (str(where), 6, "artifact")
        assert has_weights(target, model.state_dict())
        assert has_weights(target, torch.load(where / "model.pt", weights_only=True))
        assert everything(tmp_path) == before
