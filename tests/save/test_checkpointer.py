"""The Checkpointer facade: cadence, final save, quiescence, and what resume leaves mapped."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
import torch

import statecraft as sc
from statecraft.errors import TrainerStateError
from statecraft.storage.base import Store


def _setup(
    out: Path, *overrides: str
) -> tuple[sc.Checkpointer, torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    config = sc.CheckpointConfig.load(None, ["save_async=false", "keep_optim_last=0", *overrides])
    ckpt = sc.Checkpointer(config, run=sc.RunIdentity("p", "g", "n"), output_root=out)
    ckpt.track(model=model, optimizer=optimizer)
    return ckpt, model, optimizer


def _train(ckpt: sc.Checkpointer, model, optimizer, steps: int) -> None:
    start = ckpt.resume()
    for _ in range(start.step, steps):
        model(torch.randn(4, 64)).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        ckpt.record(sc.Outcome.APPLIED)
        ckpt.step_end()
    ckpt.finalize()


class TestCadence:
    def test_saves_on_cadence_and_the_final_step(self, tmp_path: Path) -> None:
        """save_every=3 over 7 steps saves 3, 6 and the final 7."""
        ckpt, model, optimizer = _setup(tmp_path, "save_every=3")
        _train(ckpt, model, optimizer, 7)
        assert [r.iteration for r in ckpt.saves] == [3, 6, 7]
        assert all(r.bytes_written > 0 and r.seconds > 0 for r in ckpt.saves)
        assert [e for e, _ in ckpt.saves[0].effects] == [
            "stage_payloads",
            "prepare_iteration",
            "write_components",
            "write_control",
            "commit_manifest",
            "advance_latest",
        ]

    def test_save_every_zero_disables_cadence_and_final(self, tmp_path: Path) -> None:
        """save_every=0 writes nothing, not even at finalize."""
        ckpt, model, optimizer = _setup(tmp_path, "save_every=0")
        _train(ckpt, model, optimizer, 4)
        assert ckpt.saves == []

    def test_finalize_does_not_save_a_step_twice(self, tmp_path: Path) -> None:
        """When the last step is on cadence, finalize adds no second save."""
        ckpt, model, optimizer = _setup(tmp_path, "save_every=2")
        _train(ckpt, model, optimizer, 4)
        assert [r.iteration for r in ckpt.saves] == [2, 4]


class TestQuiescence:
    def test_open_accumulation_window_blocks_save(self, tmp_path: Path) -> None:
        """A save inside an open accumulation window fails and writes nothing."""
        ckpt, _, _ = _setup(tmp_path, "save_every=1")
        ckpt.resume()
        ckpt.record(sc.Outcome.APPLIED)
        ckpt.record(sc.Outcome.ACCUMULATING)
        with pytest.raises(TrainerStateError, match="accumulation window is open"):
            ckpt.save()
        assert ckpt.saves == []

    def test_skipped_windows_advance_attempt_not_step(self, tmp_path: Path) -> None:
        """SKIPPED advances attempt_id and the skip counters, not the checkpoint step."""
        ckpt, _, _ = _setup(tmp_path, "save_every=1")
        ckpt.resume()
        ckpt.record(sc.Outcome.APPLIED)
        ckpt.record(sc.Outcome.SKIPPED)
        assert (ckpt.step, ckpt.clocks.attempt_id, ckpt.clocks.skips_total) == (1, 2, 1)


class TestResumeLeavesNothingMapped:
    def test_no_checkpoint_file_stays_mapped_after_resume(self, tmp_path: Path) -> None:
        """After resume no checkpoint file is still memory-mapped: the model's weights are
        copied out of the mapping, the optimizer state is read into memory, so deleting old
        checkpoints really frees their disk space."""
        ckpt, model, optimizer = _setup(tmp_path, "save_every=2")
        _train(ckpt, model, optimizer, 4)
        again, model2, optimizer2 = _setup(tmp_path, "save_every=2")
        result = again.resume()
        assert result.step == 4
        gc.collect()
        maps = Path("/proc/self/maps").read_text()
        assert str(tmp_path) not in maps
        assert torch.equal(model2.weight, model.weight)
        state = optimizer2.state_dict()["state"][0]["exp_avg"]
        assert torch.equal(state, optimizer.state_dict()["state"][0]["exp_avg"])


class TestThroughTheFilesystemSeam:
    """Everything the facade does on disk goes through the filesystem it is given."""

    def _sim_run(self, fs, *overrides: str) -> tuple[sc.Checkpointer, torch.nn.Module]:
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 4)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        config = sc.CheckpointConfig.load(
            None, ["save_async=false", "keep_optim_last=0", "save_every=2", *overrides]
        )
        ckpt = sc.Checkpointer(
            config, run=sc.RunIdentity("p", "g", "n"), output_root="/sim-out", filesystem=fs
        )
        ckpt.track(model=model, optimizer=optimizer)
        return ckpt, model

    def test_attempt_save_and_explicit_resume_stay_in_the_given_filesystem(self) -> None:
        """Over a SimFilesystem the attempt, the save and an explicit-path resume all act on
        the simulated tree; nothing appears on the real disk."""
        from statecraft.storage import SimFilesystem

        fs = SimFilesystem()
        ckpt, model = self._sim_run(fs)
        ckpt.resume()
        for _ in range(2):
            model(torch.randn(2, 4)).sum().backward()
            ckpt.tracked.optimizer.step()
            ckpt.record(sc.Outcome.APPLIED)
            ckpt.step_end()
        assert ckpt.store is not None
        assert isinstance(ckpt.store, Store)
        assert not Path("/sim-out").exists()
        source = f"{ckpt.attempt.checkpoints_dir}/iter_000000002"  # type: ignore[union-attr]
        again, resumed_model = self._sim_run(fs, f"resume={source}")
        result = again.resume()
        assert (result.step, result.source) == (2, f"local:{source}")
        assert torch.equal(resumed_model.weight, model.weight)
        assert not Path("/sim-out").exists()
