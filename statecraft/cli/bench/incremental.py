"""``statecraft bench incremental``: ``checkpoint_format=incremental`` against the consolidated
format, on real ``Checkpointer`` runs in one process.

Two models, each trained with AdamW for ``saves`` steps with a save at every step
(``save_every=1``, synchronous, every iteration kept):

- **adapter**: a frozen float32 base of ``base_mib`` MiB (16 tensors, ``requires_grad``
  false, as a LoRA run's base) plus a trainable adapter of ``adapter_mib`` MiB (the only
  parameters the optimizer holds);
- **full fine-tune**: ``full_mib`` MiB, every parameter trainable (everything changes at
  every save: the incremental format can only cost).

Each repetition runs both formats of one model, alternating which goes first, each in a
fresh output root. Measured per run: the bytes each save adds to the checkpoints directory
(blobs plus ``iter_N/``), the seconds of each saving ``step_end()``, the disk the run holds
at the end, and the seconds of a ``resume()`` of the newest iteration in a fresh
``Checkpointer`` (verified at ``verify=digest``: every blob read and hashed). The first save
of a process writes every blob (only blobs this process made durable are reused), so the
per-save figures are medians over the saves after the first. Nothing asserts a speed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from statecraft.cli.bench.common import MIB, bench_root, check_positive, scratch
from statecraft.cli.bench.figures import Figure, FigureRun, Measured, size_text

__all__ = ["FIGURES", "measure_incremental", "run_bench_incremental"]

_FORMATS = ("incremental", "consolidated")
_PARTS = 16


def _model(frozen_mib: int, trainable_mib: float) -> Any:
    import torch

    generator = torch.Generator().manual_seed(0)
    module = torch.nn.Module()
    frozen = max(1, frozen_mib * MIB // 4 // _PARTS) if frozen_mib else 0
    module.base = torch.nn.ParameterList(
        [
            torch.nn.Parameter(torch.rand(frozen, generator=generator), requires_grad=False)
            for _ in range(_PARTS if frozen else 0)
        ]
    )
    trainable = max(1, int(trainable_mib * MIB) // 4 // 4)
    module.adapter = torch.nn.ParameterList(
        [torch.nn.Parameter(torch.rand(trainable, generator=generator)) for _ in range(4)]
    )
    return module


def _disk(path: str) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            total += os.lstat(os.path.join(folder, name)).st_size
    return total


def _run(root: str, fmt: str, *, frozen_mib: int, trainable_mib: float, saves: int) -> dict:
    """One training run of ``saves`` saving steps in format ``fmt``, then a fresh resume."""
    import torch

    from statecraft import CheckpointConfig, Checkpointer, Outcome, RunIdentity

    config = CheckpointConfig.from_dict(
        {
            "save_every": 1,
            "save_async": False,
            "keep_optim_last": 0,
            "checkpoint_format": fmt,
            "quiet": True,
        }
    )
    run = RunIdentity("bench", "incremental", fmt)

    def opened() -> tuple[Any, Any]:
        model = _model(frozen_mib, trainable_mib)
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
        ckpt = Checkpointer(config, run=run, output_root=root)
        ckpt.track(model=model, optimizer=optimizer)
        return ckpt, (model, optimizer)

    ckpt, (model, optimizer) = opened()
    ckpt.resume()
    generator = torch.Generator().manual_seed(1)
    seconds, added = [], []
    disk = 0
    for _ in range(saves):
        for p in model.parameters():
            if p.requires_grad:
                p.grad = torch.randn(p.shape, generator=generator) * 0.01
        optimizer.step()
        ckpt.record(Outcome.APPLIED)
        started = time.perf_counter()
        ckpt.step_end()
        seconds.append(time.perf_counter() - started)
        now = _disk(root)
        added.append(now - disk)
        disk = now
    ckpt.close()
    again, _ = opened()
    started = time.perf_counter()
    again.resume()
    resume = time.perf_counter() - started
    again.close()
    return {"save_s": seconds, "added": added, "disk": disk, "resume_s": resume}


def _steady(values: list[float]) -> float:
    return statistics.median(values[1:] if len(values) > 1 else values)


def measure_incremental(
    *,
    base_mib: int,
    adapter_mib: float,
    full_mib: int,
    saves: int,
    repeat: int,
    directory: str | None = None,
) -> dict[str, Any]:
    """Interleave ``repeat`` runs of each format on each model; per-repetition ratios.

    Raises:
        ConfigError: a size, ``saves`` or ``repeat`` is not positive.
    """
    check_positive(
        "bench incremental", base_mib=base_mib, full_mib=full_mib, saves=saves, repeat=repeat
    )
    models = {"adapter": (base_mib, adapter_mib), "full": (0, float(full_mib))}
    runs: dict[str, dict[str, list[dict]]] = {m: {f: [] for f in _FORMATS} for m in models}
    with bench_root(directory) as root:
        for rep in range(repeat):
            for model, (frozen, trainable) in models.items():
                order = _FORMATS if rep % 2 == 0 else _FORMATS[::-1]
                for fmt in order:
                    with scratch(root, f"{model}-{fmt}-{rep}") as where:
                        one = _run(
                            where, fmt, frozen_mib=frozen, trainable_mib=trainable, saves=saves
                        )
                        runs[model][fmt].append(one)
    ratios: dict[str, list[float]] = {
        "bytes_per_save": [],
        "save_time": [],
        "resume_time": [],
        "disk_retained": [],
        "full_save_time": [],
        "full_bytes_per_save": [],
    }
    for rep in range(repeat):
        inc, con = runs["adapter"]["incremental"][rep], runs["adapter"]["consolidated"][rep]
        full_ckpt = _steady(con["added"])  # one consolidated iteration's bytes
        base_bytes = base_mib * MIB
        adapters_share = saves * max(0.0, full_ckpt - base_bytes)
        ratios["bytes_per_save"].append(_steady(inc["added"]) / full_ckpt)
        ratios["save_time"].append(_steady(inc["save_s"]) / _steady(con["save_s"]))
        ratios["resume_time"].append(inc["resume_s"] / con["resume_s"])
        ratios["disk_retained"].append(inc["disk"] / (full_ckpt + adapters_share))
        finc, fcon = runs["full"]["incremental"][rep], runs["full"]["consolidated"][rep]
        ratios["full_save_time"].append(_steady(finc["save_s"]) / _steady(fcon["save_s"]))
        ratios["full_bytes_per_save"].append(_steady(finc["added"]) / _steady(fcon["added"]))
    return {
        "base_mib": base_mib,
        "adapter_mib": adapter_mib,
        "full_mib": full_mib,
        "saves": saves,
        "repeat": repeat,
        "ratios": ratios,
        "medians": {k: statistics.median(v) for k, v in ratios.items()},
        "runs": runs,
    }


_ROWS = (
    ("bytes_per_save", "bytes written per save (frozen base + adapter)", "a consolidated save"),
    ("save_time", "save time (frozen base + adapter)", "a consolidated save"),
    ("resume_time", "resume time, verified (frozen base + adapter)", "a consolidated resume"),
    ("disk_retained", "disk for every retained iteration", "one full ckpt + adapters' share"),
    ("full_save_time", "save time, full fine-tune", "a consolidated save"),
    ("full_bytes_per_save", "bytes written per save, full fine-tune", "a consolidated save"),
)


def format_incremental(data: dict[str, Any]) -> str:
    """The human table of :func:`measure_incremental`'s result."""
    lines = [
        f"frozen base {data['base_mib']} MiB + adapter {data['adapter_mib']} MiB (AdamW); full "
        f"fine-tune {data['full_mib']} MiB (AdamW); {data['saves']} saves per run, median of "
        f"{data['repeat']} interleaved runs (per-save figures: saves after the first)",
        "",
        f"{'incremental vs consolidated':<52}{'baseline':<34}{'ratio':>8}",
    ]
    for key, name, baseline in _ROWS:
        lines.append(f"{name:<52}{baseline:<34}{data['medians'][key]:>8.3f}")
    return "\n".join(lines)


def run_bench_incremental(args: argparse.Namespace) -> int:
    """``statecraft bench incremental``: print :func:`measure_incremental` (table or JSON)."""
    from statecraft.cli.envelope import emit

    data = measure_incremental(
        base_mib=args.base_mib,
        adapter_mib=args.adapter_mib,
        full_mib=args.full_mib,
        saves=args.saves,
        repeat=args.repeat,
        directory=args.dir,
    )
    shown = {k: v for k, v in data.items() if k != "runs"}
    return emit("bench incremental", as_json=args.json, data=shown, text=format_incremental(data))


def _figure(key: str) -> Any:
    def run(ctx: FigureRun) -> Measured:
        base = ctx.size_mib(32, 256)
        full = ctx.size_mib(16, 64)
        saves = 6 if ctx.quick else 20
        data = ctx.once(
            f"incremental:{base}:{full}:{saves}",
            lambda: measure_incremental(
                base_mib=base,
                adapter_mib=base / 128,
                full_mib=full,
                saves=saves,
                repeat=ctx.repeat,
                directory=ctx.root,
            ),
        )
        size = size_text(full) if key.startswith("full") else f"{size_text(base)} base"
        return Measured(tuple(data["ratios"][key]), f"{size}, {saves} saves")

    return run


FIGURES = [
    Figure(
        "incremental: bytes per save (frozen base + adapter)",
        "a consolidated save",
        0.05,
        "lower",
        _figure("bytes_per_save"),
    ),
    Figure(
        "incremental: save time (frozen base + adapter)",
        "a consolidated save",
        0.15,
        "lower",
        _figure("save_time"),
    ),
    Figure(
        "incremental: resume time (frozen base + adapter)",
        "a consolidated resume",
        1.1,
        "lower",
        _figure("resume_time"),
    ),
    Figure(
        "incremental: disk for every retained iteration",
        "one full checkpoint + the adapters' share",
        1.2,
        "lower",
        _figure("disk_retained"),
    ),
    Figure(
        "incremental: save time, full fine-tune",
        "a consolidated save",
        1.05,
        "lower",
        _figure("full_save_time"),
    ),
]
