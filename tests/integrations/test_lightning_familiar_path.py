"""The file at the path Lightning saved to: a link published only after its generation
committed, moved atomically to each newer one, removed with its checkpoint; the statecraft
layout before the link still loads, migrates and removes; both Lightning distributions
(``lightning.pytorch`` and ``pytorch_lightning``) accept the plugin."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("lightning_fabric", reason="needs pytorch-lightning (statecraft[lightning])")

from statecraft.checkpoint.units import UNIT_MANIFEST_NAME, seal_unit, verify_unit
from statecraft.integrations import lightning_links
from statecraft.integrations.lightning import (
    CHECKPOINT_FILE,
    SLOTS_DIR,
    StatecraftCheckpointIO,
    last_committed_checkpoint,
)
from statecraft.storage.local import LocalStore


def _state(step: int) -> dict[str, Any]:
    return {"global_step": step, "epoch": 0, "state_dict": {"w": torch.full((3,), float(step))}}


def _slot(path: Path) -> Path:
    return path.parent / SLOTS_DIR / path.name


def _save_into(obj: Any, writer: Any) -> None:
    torch.save(obj, writer)


class TestPublishedLink:
    def test_the_link_moves_to_each_newer_generation_and_the_older_one_is_retired(
        self, tmp_path: Path
    ) -> None:
        """After each save the path is a relative link to the newest committed payload;
        torch.load(path) returns that save, and only that generation is left in the slot."""
        io = StatecraftCheckpointIO()
        path = tmp_path / "last.ckpt"
        for step in (1, 2, 3):
            io.save_checkpoint(_state(step), path)
            generation = f"g{step:08d}"
            assert os.readlink(path) == f"{SLOTS_DIR}/last.ckpt/{generation}/{CHECKPOINT_FILE}"
            assert torch.load(path, weights_only=True)["global_step"] == step
            assert sorted(p.name for p in _slot(path).iterdir()) == [generation]

    def test_a_failed_publish_leaves_the_link_at_the_previous_committed_generation(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The rename that publishes the new link fails (as a kill there would stop it): the
        path still opens the previous committed save, which is not retired; the new
        generation is committed and a load through the plugin takes it."""
        io = StatecraftCheckpointIO()
        path = tmp_path / "epoch=0-step=1.ckpt"
        io.save_checkpoint(_state(1), path)

        def no_rename(src: str, dst: str) -> None:
            raise OSError("injected: rename refused")

        monkeypatch.setattr(lightning_links.os, "replace", no_rename)
        with pytest.raises(OSError, match="injected"):
            io.save_checkpoint(_state(2), path)
        monkeypatch.undo()
        assert torch.load(path, weights_only=True)["global_step"] == 1
        slots = LocalStore(str(tmp_path / SLOTS_DIR))
        assert verify_unit(slots, f"{path.name}/g00000001").committed
        assert verify_unit(slots, f"{path.name}/g00000002").committed
        assert io.load_checkpoint(path, weights_only=True)["global_step"] == 2
        io.save_checkpoint(_state(3), path)  # the next save retires both
        assert sorted(p.name for p in _slot(path).iterdir()) == ["g00000003"]

    def test_remove_unlinks_first_and_a_rerun_finishes_an_interrupted_removal(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A removal whose prune fails after the unlink leaves no link (never one naming an
        invalidated generation) and a committed slot; the next removal finishes it."""
        io = StatecraftCheckpointIO()
        path = tmp_path / "epoch=0-step=1.ckpt"
        io.save_checkpoint(_state(1), path)

        def refuse(store: Any, slot: str, **_kw: Any) -> None:
            raise OSError("injected: prune refused")

        monkeypatch.setattr(lightning_links, "prune_slot", refuse)
        with pytest.raises(OSError, match="injected"):
            io.remove_checkpoint(path)
        monkeypatch.undo()
        assert not os.path.lexists(path)
        assert (_slot(path) / "g00000001" / UNIT_MANIFEST_NAME).exists()
        io.remove_checkpoint(path)
        assert not _slot(path).exists()
        assert last_committed_checkpoint(tmp_path) is None


class TestLegacySlotDirectory:
    def _legacy(self, path: Path, step: int) -> None:
        """A slot directory at the path itself, as statecraft wrote before the link."""
        seal_unit(
            LocalStore(str(path.parent)),
            f"{path.name}/g00000001",
            framework="lightning",
            step=step,
            payloads={CHECKPOINT_FILE: lambda w: _save_into(_state(step), w)},
        )

    def test_a_legacy_slot_loads_and_the_next_save_replaces_it_with_the_link(
        self, tmp_path: Path
    ) -> None:
        """A checkpoint directory of the old layout loads; a save to its name commits in
        .statecraft/, removes the directory (invalidated first) and publishes the link."""
        path = tmp_path / "last.ckpt"
        self._legacy(path, 5)
        io = StatecraftCheckpointIO()
        assert io.load_checkpoint(path, weights_only=True)["global_step"] == 5
        assert last_committed_checkpoint(tmp_path) == str(path)
        io.save_checkpoint(_state(6), path)
        assert os.path.islink(path)
        assert torch.load(path, weights_only=True)["global_step"] == 6

    def test_a_legacy_slot_is_removed(self, tmp_path: Path) -> None:
        """remove_checkpoint prunes an old-layout directory as before."""
        path = tmp_path / "epoch=0-step=5.ckpt"
        self._legacy(path, 5)
        StatecraftCheckpointIO().remove_checkpoint(path)
        assert not os.path.lexists(path)


@pytest.mark.usefixtures("torch_determinism_restored")
@pytest.mark.parametrize("package", ["pytorch_lightning", "lightning.pytorch"])
def test_each_distribution_trains_and_loads_best_model_path(tmp_path: Path, package: str) -> None:
    """Trainer(plugins=[StatecraftCheckpointIO()]) of either distribution saves, and
    load_from_checkpoint(best_model_path) and torch.load(best_model_path) load the committed
    checkpoint as they would a TorchCheckpointIO file."""
    L = pytest.importorskip(package)
    callbacks = importlib.import_module(f"{package}.callbacks")

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, _index: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self) -> Any:
            data = torch.utils.data.TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
            return torch.utils.data.DataLoader(data, batch_size=4)

    checkpoint = callbacks.ModelCheckpoint(dirpath=str(tmp_path / "ckpts"), save_last=True)
    trainer = L.Trainer(
        default_root_dir=str(tmp_path),
        max_epochs=2,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        plugins=[StatecraftCheckpointIO()],
        callbacks=[checkpoint],
    )
    module = Tiny()
    trainer.fit(module)
    best = checkpoint.best_model_path
    assert os.path.isfile(best)
    assert os.path.islink(best)
    loaded = Tiny.load_from_checkpoint(best)
    assert torch.equal(loaded.net.weight, module.net.weight)
    assert torch.load(best, weights_only=False)["global_step"] == trainer.global_step
    assert sorted(os.listdir(tmp_path / "ckpts")) == [
        SLOTS_DIR,
        os.path.basename(best),
        "last.ckpt",
    ]
