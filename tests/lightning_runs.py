"""A tiny deterministic Lightning run, importable by tests and runnable as a child process.

``python tests/lightning_runs.py fit --root R --epochs E [--io statecraft|torch]
[--ckpt-path last|PATH] [--block-epoch K --marker M] [--result F] [--slurm-sleep S]``

- ``fit``: ``Trainer.fit`` of :class:`TinyModule` for ``--epochs`` epochs of
  :data:`BATCHES` batches (CPU, ``deterministic=True``, no shuffle, ``num_workers=0``),
  ``ModelCheckpoint(dirpath=R/ckpts, every_n_epochs=1, save_top_k=1, save_last=True)``, with
  the statecraft plugin or Lightning's default ``TorchCheckpointIO``; the final model and
  optimizer state dicts are ``torch.save``'d to ``--result``.
- ``--block-epoch K --marker M``: every checkpoint saved at the end of epoch ``K`` carries a
  :class:`Blocker`; the second one pickled (``last.ckpt``, saved after the top-k checkpoint)
  creates ``M`` and sleeps inside ``torch.save`` until the process is killed.
- ``--slurm-sleep S``: each training batch sleeps ``S`` s and the first one creates
  ``R/running`` (the SLURM test sends SIGUSR1 once it exists).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

BATCHES = 4  # batches per epoch
BATCH = 8
FEATURES = 16
_PICKLED: dict[str, int] = {"blockers": 0}


def _sleep_forever(marker: str) -> int:
    Path(marker).write_text(str(os.getpid()))
    while True:
        time.sleep(1.0)


class Blocker:
    """Pickled inside ``torch.save``: the second time, writes ``marker`` and never returns."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __deepcopy__(self, memo: dict[int, Any]) -> Blocker:
        return Blocker(self.marker)

    def __reduce__(self) -> tuple[Any, ...]:
        _PICKLED["blockers"] += 1
        if _PICKLED["blockers"] >= 2:
            _sleep_forever(self.marker)
        return (int, (0,))


def build_module(**kwargs: Any) -> Any:
    """A :class:`TinyModule` (defined lazily: importing this file needs no Lightning)."""
    import pytorch_lightning as pl

    class TinyModule(pl.LightningModule):
        """Two linear layers and AdamW over a fixed regression set."""

        def __init__(
            self,
            block_epoch: int | None = None,
            marker: str | None = None,
            sleep: float = 0.0,
            running: str | None = None,
            hidden: int = 32,
        ) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(FEATURES, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1)
            )
            self.block_epoch, self.marker = block_epoch, marker
            self.sleep, self.running = sleep, running

        def training_step(self, batch: Any, _index: int) -> torch.Tensor:
            if self.running is not None:
                Path(self.running).touch()
            if self.sleep:
                time.sleep(self.sleep)
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-2)

        def train_dataloader(self) -> Any:
            gen = torch.Generator().manual_seed(1)
            x = torch.randn(BATCHES * BATCH, FEATURES, generator=gen)
            y = x.sum(dim=1, keepdim=True).sin()
            data = torch.utils.data.TensorDataset(x, y)
            return torch.utils.data.DataLoader(data, batch_size=BATCH, shuffle=False)

        def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            if self.block_epoch is not None and checkpoint["epoch"] == self.block_epoch:
                checkpoint["blocker"] = Blocker(str(self.marker))

    return TinyModule(**kwargs)


def build_trainer(
    root: str,
    epochs: int,
    *,
    io: str,
    async_save: bool = False,
    save_last: Any = True,
    **kw: Any,
) -> Any:
    """The run's ``Trainer``: CPU, deterministic, quiet, checkpoints under ``root/ckpts``."""
    import pytorch_lightning as pl
    from pytorch_lightning.callbacks import ModelCheckpoint

    plugins: list[Any] = []
    if io == "statecraft":
        from statecraft.integrations.lightning import StatecraftCheckpointIO

        plugins.append(StatecraftCheckpointIO(async_save=async_save))
    callback = ModelCheckpoint(
        dirpath=os.path.join(root, "ckpts"), every_n_epochs=1, save_top_k=1, save_last=save_last
    )
    return pl.Trainer(
        default_root_dir=root,
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        deterministic=True,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[callback],
        plugins=plugins,
        **kw,
    )


def final_state(module: Any, trainer: Any) -> dict[str, Any]:
    """The state compared bit-exactly: model and optimizer state dicts, the global step."""
    return {
        "model": module.state_dict(),
        "optimizer": trainer.optimizers[0].state_dict(),
        "global_step": trainer.global_step,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["fit"])
    parser.add_argument("--root", required=True)
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--io", choices=["statecraft", "torch"], default="statecraft")
    parser.add_argument("--ckpt-path")
    parser.add_argument("--block-epoch", type=int)
    parser.add_argument("--marker")
    parser.add_argument("--result")
    parser.add_argument("--slurm-sleep", type=float, default=0.0)
    args = parser.parse_args(argv)

    import pytorch_lightning as pl

    pl.seed_everything(0, verbose=False)
    os.makedirs(args.root, exist_ok=True)
    running = os.path.join(args.root, "running") if args.slurm_sleep else None
    module = build_module(
        block_epoch=args.block_epoch, marker=args.marker, sleep=args.slurm_sleep, running=running
    )
    trainer = build_trainer(args.root, args.epochs, io=args.io)
    trainer.fit(module, ckpt_path=args.ckpt_path)
    if args.result:
        torch.save(final_state(module, trainer), args.result)
    print("done", trainer.global_step, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
