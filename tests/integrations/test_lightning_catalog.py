"""``statecraft.checkpoints(dirpath)`` on a real Lightning ``ModelCheckpoint.dirpath``: the
committed checkpoints with their step, monitored score, size and path; ``best(monitor)`` is
``best_model_path``; ``load_weights(which="best:val_loss")`` loads its weights; a torn
generation is never listed; the plugin's resume of ``last`` reads the same listing. Both
Lightning distributions."""

from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("lightning_fabric", reason="needs pytorch-lightning (statecraft[lightning])")

import statecraft as sc
from statecraft.checkpoint.units import UNIT_MANIFEST_NAME, verify_unit
from statecraft.errors import UnitDamagedError
from statecraft.integrations.lightning import (
    CHECKPOINT_FILE,
    SLOTS_DIR,
    StatecraftCheckpointIO,
    last_committed_checkpoint,
)
from statecraft.storage.local import LocalStore

#: the val_loss each epoch logs: the best (lowest) is epoch 1, the last epoch the worst
VAL_LOSS = (3.0, 1.0, 2.0, 4.0)
BATCHES = 4  # training batches per epoch


def _module_class(package: str) -> Any:
    L = importlib.import_module(package)

    class Tiny(L.LightningModule):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, _index: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def validation_step(self, batch: Any, _index: int) -> None:
            self.log("val_loss", torch.tensor(VAL_LOSS[self.current_epoch]))

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def _data(self) -> Any:
            gen = torch.Generator().manual_seed(3)
            data = torch.utils.data.TensorDataset(
                torch.randn(4 * BATCHES, 4, generator=gen),
                torch.randn(4 * BATCHES, 1, generator=gen),
            )
            return torch.utils.data.DataLoader(data, batch_size=4)

        def train_dataloader(self) -> Any:
            return self._data()

        def val_dataloader(self) -> Any:
            return self._data()

    return Tiny


def _fit(root: Path, package: str) -> tuple[Any, Any, Any]:
    """Four epochs, top-2 by val_loss plus last.ckpt, through the statecraft plugin."""
    L = importlib.import_module(package)
    callbacks = importlib.import_module(f"{package}.callbacks")
    torch.manual_seed(0)
    checkpoint = callbacks.ModelCheckpoint(
        dirpath=str(root / "ckpts"), monitor="val_loss", mode="min", save_top_k=2, save_last=True
    )
    trainer = L.Trainer(
        default_root_dir=str(root),
        max_epochs=len(VAL_LOSS),
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        plugins=[StatecraftCheckpointIO()],
        callbacks=[checkpoint],
    )
    module = _module_class(package)()
    trainer.fit(module)
    return trainer, checkpoint, module


@pytest.fixture(scope="module", params=["pytorch_lightning", "lightning.pytorch"])
def fitted(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    package = request.param
    pytest.importorskip(package)
    root = tmp_path_factory.mktemp(package.replace(".", "_"))
    trainer, checkpoint, _ = _fit(root, package)
    return package, root / "ckpts", trainer, checkpoint


@pytest.fixture
def dirpath(fitted: Any, tmp_path: Path) -> Path:
    """A private copy of the fitted dirpath (links kept as links), free to damage."""
    copy = tmp_path / "ckpts"
    shutil.copytree(fitted[1], copy, symlinks=True)
    return copy


def _state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)["state_dict"]


class TestListing:
    def test_best_is_best_model_path_and_its_score(self, fitted: Any) -> None:
        """best("val_loss", "min") is the checkpoint Lightning's best_model_path names (the
        path itself and the committed file its link opens), with best_model_score; the
        listing holds the top-2 and last.ckpt, each committed, newest first."""
        _, ckpts, _trainer, checkpoint = fitted
        listed = sc.checkpoints(ckpts)
        best = listed.best("val_loss", "min")
        assert best is not None
        assert best.path == Path(checkpoint.best_model_path)
        assert os.path.realpath(best.path) == os.path.realpath(checkpoint.best_model_path)
        assert best.unit / CHECKPOINT_FILE == Path(os.path.realpath(checkpoint.best_model_path))
        assert best.metrics == {"val_loss": pytest.approx(float(checkpoint.best_model_score))}
        assert best.metrics["val_loss"] == min(VAL_LOSS)
        assert best.step == (VAL_LOSS.index(min(VAL_LOSS)) + 1) * BATCHES
        worst_kept = listed.best("val_loss", "max")
        assert worst_kept is not None
        assert worst_kept.metrics["val_loss"] == sorted(VAL_LOSS)[1]
        assert {p.path.name for p in listed} == {
            os.path.basename(p) for p in checkpoint.best_k_models
        } | {"last.ckpt"}
        assert all(i.state == "committed" and i.framework == "lightning" for i in listed)
        assert listed.steps == sorted(listed.steps, reverse=True)

    def test_latest_is_last_and_what_the_plugin_resumes(self, fitted: Any) -> None:
        """latest() is last.ckpt at its saved step; the plugin's last_committed_checkpoint
        (ckpt_path="last" falls back to it) answers the same path; step(n) and sizes agree
        with the files on disk."""
        _, ckpts, _, checkpoint = fitted
        listed = sc.checkpoints(ckpts)
        latest = listed.latest()
        assert latest is not None
        assert latest.path == Path(checkpoint.last_model_path)
        saved_step = torch.load(checkpoint.last_model_path, weights_only=True)["global_step"]
        assert latest.step == saved_step == max(listed.steps) > 0
        assert last_committed_checkpoint(ckpts) == str(latest.path)
        best = listed.best("val_loss")
        assert best is not None
        assert listed.step(best.step).path == best.path
        for info in listed:
            assert info.size_bytes == os.path.getsize(info.unit / CHECKPOINT_FILE)
            assert info.metrics == {} or info.path.name != "last.ckpt"

    def test_load_weights_best_loads_best_model_path(self, fitted: Any) -> None:
        """load_weights(dirpath, which="best:val_loss") loads the weights best_model_path
        holds (verified), which differ from the last checkpoint's."""
        package, ckpts, _, checkpoint = fitted
        module = _module_class(package)()
        loaded = sc.load_weights(module, ckpts, which="best:val_loss")
        expected = _state_dict(checkpoint.best_model_path)
        last = _state_dict(checkpoint.last_model_path)
        assert not torch.equal(expected["net.weight"], last["net.weight"])
        for name, tensor in module.state_dict().items():
            assert torch.equal(tensor, expected[name]), name
        assert loaded.iteration == sc.checkpoints(ckpts).best("val_loss").step
        sc.load_weights(module, ckpts)  # which="latest"
        assert torch.equal(module.state_dict()["net.weight"], last["net.weight"])


class TestTornUnits:
    def test_a_torn_generation_is_never_listed(self, dirpath: Path) -> None:
        """A newer generation without its commit manifest (a killed save) is passed over:
        the slot's committed generation is listed; a slot holding only a torn generation is
        not listed at all."""
        before = sc.checkpoints(dirpath)
        best = before.best("val_loss")
        assert best is not None
        torn = best.unit.parent / "g00000099"
        shutil.copytree(best.unit, torn)
        (torn / UNIT_MANIFEST_NAME).unlink()
        only_torn = dirpath / SLOTS_DIR / "epoch=9-step=99.ckpt"
        shutil.copytree(torn, only_torn / "g00000001")
        after = sc.checkpoints(dirpath)
        assert [i.path for i in after] == [i.path for i in before]
        assert after.best("val_loss") == best
        assert last_committed_checkpoint(dirpath) == str(before.latest().path)

    def test_a_damaged_unit_is_not_listed_and_not_loaded(self, dirpath: Path, fitted: Any) -> None:
        """A truncated checkpoint.pt fails the size check: not listed (its slot has no other
        generation); with a digest-only flip it is listed at stat level but
        load_weights(which="best:...") refuses it (no fallback)."""
        package = fitted[0]
        listed = sc.checkpoints(dirpath)
        best = listed.best("val_loss")
        assert best is not None
        payload = best.unit / CHECKPOINT_FILE
        data = bytearray(payload.read_bytes())
        data[len(data) // 2] ^= 0xFF
        payload.write_bytes(bytes(data))
        assert not verify_unit(LocalStore(str(best.unit.parent)), best.unit.name).committed
        assert best.path in [i.path for i in sc.checkpoints(dirpath)]
        assert best.path not in [i.path for i in sc.checkpoints(dirpath, verify="digest")]
        with pytest.raises(UnitDamagedError, match="does not verify"):
            sc.load_weights(_module_class(package)(), dirpath, which="best:val_loss")
        payload.write_bytes(bytes(data[:-10]))
        assert best.path not in [i.path for i in sc.checkpoints(dirpath)]
