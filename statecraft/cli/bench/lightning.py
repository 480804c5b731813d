"""``statecraft bench lightning``: what the statecraft ``CheckpointIO`` costs a Lightning run,
against Lightning's own ``TorchCheckpointIO``, in one process.

One run shape, three plugins, each in its own directory: a ``LightningModule`` of
``--size-mib`` MiB of float32 parameters (square linear layers) trained with AdamW on CPU
(the checkpoint holds parameters and both moments, about three times ``--size-mib``),
``ModelCheckpoint(every_n_train_steps=--every, save_top_k=0, save_last=True)`` so
``last.ckpt`` is rewritten ``--saves`` times:

- **torch**: ``TorchCheckpointIO`` (``torch.save`` into memory, then a copy into place; no
  fsync: not durable when the save returns);
- **statecraft sync**: ``StatecraftCheckpointIO()`` (a new generation written durably,
  digested, committed, the older one retired);
- **statecraft async**: ``StatecraftCheckpointIO(async_save=True)``: the training thread's
  time per save (join of the previous write + CPU copy of the tensors), and each write's time
  to commit on the background slot.

Every ``save_checkpoint`` call is timed on the training thread by a thin wrapper plugin; the
first save of each plugin is included in the samples (async: it allocates the staging
buffers) and the median is reported. The configurations run in a rotating order over
``--repeat`` rounds. Nothing asserts a speed; ``tests/cli/test_bench_lightning.py`` checks the
shape.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from statecraft.cli.bench.common import MIB, bench_root, check_positive, scratch
from statecraft.cli.bench.figures import Figure, FigureRun, Measured, paired, size_text

__all__ = ["measure_lightning", "run_bench_lightning"]

CONFIGS = ("torch", "statecraft_sync", "statecraft_async")


def _module(size_mib: int) -> Any:
    import pytorch_lightning as pl
    import torch

    width = 1024
    layers = max(1, round(size_mib * MIB / 4 / (width * width)))

    class BenchModule(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(
                *(torch.nn.Linear(width, width, bias=False) for _ in range(layers))
            )

        def training_step(self, batch: Any, _index: int) -> Any:
            (x,) = batch
            return self.net(x).square().mean()

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    return BenchModule()


def _timed_io(inner: Any) -> Any:
    """A ``CheckpointIO`` delegating to ``inner`` that records each save's training-thread
    seconds (and, for the statecraft plugin, the write time it reports)."""
    from lightning_fabric.plugins.io.checkpoint_io import CheckpointIO

    class TimedIO(CheckpointIO):
        def __init__(self) -> None:
            self.inner = inner
            self.blocking: list[float] = []
            self.joins: list[float] = []
            self.writes: list[float] = []
            self.bytes = 0
            self.seen: Any = None

        def save_checkpoint(self, checkpoint: Any, path: Any, storage_options: Any = None) -> None:
            started = time.perf_counter()
            self.inner.save_checkpoint(checkpoint, path, storage_options)
            self.blocking.append(time.perf_counter() - started)
            join = getattr(self.inner, "last_join_seconds", None)
            if join is not None:
                self.joins.append(join)
            self._collect()

        def _collect(self) -> None:
            report = getattr(self.inner, "last_report", None)
            if report is not None and report is not self.seen:
                self.seen = report
                self.writes.append(self.inner.last_write_seconds)
                self.bytes = report.bytes

        def load_checkpoint(
            self, path: Any, map_location: Any = None, weights_only: Any = None
        ) -> Any:
            return self.inner.load_checkpoint(path, map_location, weights_only)

        def remove_checkpoint(self, path: Any) -> None:
            self.inner.remove_checkpoint(path)

        def teardown(self) -> None:
            self.inner.teardown()
            self._collect()

    return TimedIO()


def _fit(root: str, config: str, *, size_mib: int, saves: int, every: int) -> dict[str, Any]:
    import pytorch_lightning as pl
    import torch
    from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
    from pytorch_lightning.callbacks import ModelCheckpoint

    from statecraft.integrations.lightning import StatecraftCheckpointIO

    inner: Any
    if config == "torch":
        inner = TorchCheckpointIO()
    else:
        inner = StatecraftCheckpointIO(async_save=config == "statecraft_async")
    io = _timed_io(inner)
    pl.seed_everything(0, verbose=False)
    module = _module(size_mib)
    data = torch.utils.data.TensorDataset(torch.randn(64, 1024))
    loader = torch.utils.data.DataLoader(data, batch_size=16)
    trainer = pl.Trainer(
        default_root_dir=root,
        max_steps=saves * every,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[
            ModelCheckpoint(
                dirpath=os.path.join(root, "ckpts"),
                every_n_train_steps=every,
                save_top_k=0,
                save_last=True,
            )
        ],
        plugins=[io],
    )
    started = time.perf_counter()
    trainer.fit(module, train_dataloaders=loader)
    fit_s = time.perf_counter() - started
    last = os.path.join(root, "ckpts", "last.ckpt")
    nbytes = os.path.getsize(last) if os.path.isfile(last) else io.bytes
    return {
        "blocking": io.blocking,
        "joins": io.joins,
        "writes": io.writes,
        "fit_s": fit_s,
        "bytes": nbytes,
    }


def _summary(samples: list[float]) -> dict[str, Any]:
    if not samples:
        return {"median_s": None, "samples_s": []}
    return {
        "median_s": statistics.median(samples),
        "min_s": min(samples),
        "max_s": max(samples),
        "samples_s": samples,
    }


def measure_lightning(
    *, size_mib: int = 16, saves: int = 6, every: int = 20, repeat: int = 1, directory: str | None
) -> dict[str, Any]:
    """Run the three configurations and return per-save seconds, fit wall times and ratios.

    Raises:
        ConfigError: a non-positive argument (from ``check_positive``).
        ImportError: ``pytorch_lightning`` is not installed (``statecraft[lightning]``).
    """
    check_positive(
        "statecraft bench lightning", size_mib=size_mib, saves=saves, every=every, repeat=repeat
    )
    import warnings

    blocking: dict[str, list[float]] = {c: [] for c in CONFIGS}
    writes: dict[str, list[float]] = {c: [] for c in CONFIGS}
    joins: dict[str, list[float]] = {c: [] for c in CONFIGS}
    fits: dict[str, list[float]] = {c: [] for c in CONFIGS}
    nbytes = 0
    with bench_root(directory) as root, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for round_ in range(repeat):
            order = CONFIGS[round_ % 3 :] + CONFIGS[: round_ % 3]
            for config in order:
                with scratch(root, config) as where:
                    run = _fit(where, config, size_mib=size_mib, saves=saves, every=every)
                blocking[config] += run["blocking"]
                joins[config] += run["joins"]
                writes[config] += run["writes"] if config != "torch" else run["blocking"]
                fits[config].append(run["fit_s"])
                nbytes = max(nbytes, run["bytes"])
    configs: dict[str, dict[str, Any]] = {
        c: {
            "save": _summary(blocking[c]),
            "write": _summary(writes[c]),
            "join": _summary(joins[c]),
            "fit_s": statistics.median(fits[c]),
            "fit": _summary(fits[c]),
        }
        for c in CONFIGS
    }
    torch_save = configs["torch"]["save"]["median_s"]

    def ratio(value: float | None) -> float | None:
        return value / torch_save if value is not None and torch_save else None

    return {
        "size_mib": size_mib,
        "checkpoint_bytes": nbytes,
        "saves": saves,
        "every": every,
        "repeat": repeat,
        "configs": configs,
        "ratios": {
            "statecraft_sync_save_vs_torch": ratio(configs["statecraft_sync"]["save"]["median_s"]),
            "statecraft_async_blocking_vs_torch": ratio(
                configs["statecraft_async"]["save"]["median_s"]
            ),
            "statecraft_async_write_vs_torch": ratio(
                configs["statecraft_async"]["write"]["median_s"]
            ),
            "fit_statecraft_sync_vs_torch": configs["statecraft_sync"]["fit_s"]
            / configs["torch"]["fit_s"],
            "fit_statecraft_async_vs_torch": configs["statecraft_async"]["fit_s"]
            / configs["torch"]["fit_s"],
        },
    }


def _fmt(value: float | None, unit: str = "s") -> str:
    if value is None:
        return "-"
    return f"{value:.4f} {unit}" if unit == "s" else f"{value:.2f}x"


def format_lightning(data: dict[str, Any]) -> str:
    """The human table of :func:`measure_lightning`."""
    lines = [
        f"Lightning checkpoint IO: model {data['size_mib']} MiB, checkpoint "
        f"{data['checkpoint_bytes'] / MIB:.1f} MiB, {data['saves']} saves of last.ckpt every "
        f"{data['every']} steps, {data['repeat']} round(s)",
        f"{'plugin':<18} {'save (train thread)':>20} {'of which join':>14} "
        f"{'write to commit':>16} {'fit wall (range)':>22}",
    ]
    for name, row in data["configs"].items():
        lines.append(
            f"{name:<18} {_fmt(row['save']['median_s']):>20} "
            f"{_fmt(row['join']['median_s']):>14} "
            f"{_fmt(row['write']['median_s']):>16} {row['fit_s']:>8.2f} s "
            f"({row['fit']['min_s']:.2f}-{row['fit']['max_s']:.2f})"
        )
    lines.append("ratios against TorchCheckpointIO (median save):")
    for key, value in data["ratios"].items():
        lines.append(f"  {key:<38} {_fmt(value, 'x')}")
    return "\n".join(lines)


def run_bench_lightning(args: argparse.Namespace) -> int:
    """``statecraft bench lightning``: print :func:`measure_lightning` as a table or JSON."""
    from statecraft.cli.envelope import emit

    try:
        data = measure_lightning(
            size_mib=args.size_mib,
            saves=args.saves,
            every=args.every,
            repeat=args.repeat,
            directory=args.dir,
        )
    except ImportError as exc:
        return emit(
            "bench lightning",
            as_json=args.json,
            errors=[("missing_extra", f"{exc}; pip install 'statecraft[lightning]'")],
            exit_code=2,
            text=f"statecraft bench lightning: {exc}; pip install 'statecraft[lightning]'",
        )
    return emit("bench lightning", as_json=args.json, data=data, text=format_lightning(data))


def _per_round(samples: list[float], rounds: int) -> list[float]:
    """The median of each round's saves (``samples`` holds the rounds one after another)."""
    per = len(samples) // rounds
    return [statistics.median(samples[i * per : (i + 1) * per]) for i in range(rounds)]


def _versus_torch(config: str) -> Any:
    """Per round (configurations rotating): ``config``'s median training-thread seconds per
    save / ``TorchCheckpointIO``'s; one run serves both figures."""

    def run(ctx: FigureRun) -> Measured:
        mib = ctx.size_mib(1, 16)
        data = ctx.once(
            f"lightning:{mib}",
            lambda: measure_lightning(
                size_mib=mib, saves=2, every=2, repeat=ctx.repeat, directory=ctx.root
            ),
        )
        ours, base = (data["configs"][c]["save"]["samples_s"] for c in (config, "torch"))
        return Measured(
            paired(_per_round(ours, ctx.repeat), _per_round(base, ctx.repeat)), size_text(mib)
        )

    return run


_TORCH_IO = "TorchCheckpointIO save (not durable)"
FIGURES = [  # no bar is declared for these: reported, not judged
    Figure("Lightning save, sync", _TORCH_IO, None, "lower", _versus_torch("statecraft_sync"),
           slow=True),
    Figure("Lightning save, async blocking", _TORCH_IO, None, "lower",
           _versus_torch("statecraft_async"), slow=True),
]  # fmt: skip
