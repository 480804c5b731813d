"""``statecraft bench save --sizes 1MiB,16MiB,...``: the save against its fair baseline, per size.

For each size a real model + AdamW state of about that size is built (the parameters hold a
third of the bytes, the optimizer's two moments the other two thirds, as AdamW's would), with a
data source tracked so the checkpoint holds ``model.pt``, ``optim.pt``, ``trainer.pt`` and
``data.pt``. Three contenders run in turn within each repeat (the order rotates, so a burst of
load from other processes hits each alike):

- **statecraft**: ``Checkpointer.save()`` of the next iteration of one running checkpointer
  (resumed once, as a training loop does; a save at every repeat, as ``step_end`` would);
- **baseline** (the fair one): the very payloads of that checkpoint (each file's object, loaded
  back once) written as a user would by hand: each with ``torch.save`` to a temporary name,
  ``fsync``, ``rename``; then one directory ``fsync``;
- **raw write**: the baseline's byte count written with ``os.write`` to one new file, ``fsync``
  (the disk's limit).

Each is reported as the median of the repeats; the ratios are median over median. The **fixed
per-save cost** is the intercept of a least-squares line of median seconds against bytes (over
the sizes measured), for statecraft and the baseline, and the excess of statecraft over the
baseline at the smallest size. Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import re
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from statecraft.cli.bench.baselines import raw_write_bytes, torch_save_files
from statecraft.cli.bench.common import GB, MIB, bench_root, scratch
from statecraft.cli.bench.figures import Figure, FigureRun, Measured, paired, size_text
from statecraft.cli.bench.targets import (
    SMALL_TENSORS_TARGET,
    SWEEP_BASELINE_TARGET,
    SWEEP_RAW_TARGET,
)
from statecraft.errors import ConfigError, ConfigIssue, StatecraftError

__all__ = [
    "SWEEP_BASELINE_TARGET",
    "SWEEP_RAW_TARGET",
    "measure_save_sizes",
    "parse_sizes",
    "run_bench_save_sizes",
]

_UNITS = {"": MIB, "b": 1, "kib": 1 << 10, "mib": MIB, "gib": 1 << 30}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([a-z]*)\s*$", re.IGNORECASE)
_WEIGHTS = 16  # the benchmark model: this many weight matrices, each with a bias vector
_BIAS_NUMEL = 64


def parse_sizes(text: str) -> list[int]:
    """Byte counts of a comma-separated size list: ``1MiB,16MiB,1GiB`` (units ``B``,
    ``KiB``, ``MiB``, ``GiB``; a bare number is MiB).

    Raises:
        ConfigError: an empty list, an unknown unit or a size below 64 KiB, naming ``--sizes``.
    """
    sizes: list[int] = []
    for part in text.split(","):
        match = _SIZE_RE.match(part)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _UNITS:
            raise ConfigError(
                [ConfigIssue("--sizes", part.strip(), "a size like 1MiB, 512KiB or 1GiB")],
                source="statecraft bench save",
            )
        value = int(match.group(1)) * _UNITS[unit]
        if value < 64 << 10:
            raise ConfigError(
                [ConfigIssue("--sizes", part.strip(), "at least 64KiB")],
                source="statecraft bench save",
            )
        sizes.append(value)
    return sizes


def size_label(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10)):
        if nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return f"{nbytes}B"


class BenchData:
    """A data source with a little state (a cursor and a permutation), so ``data.pt`` is
    written as a training loop's would be."""

    def __init__(self) -> None:
        import torch

        self.cursor = 0
        self.order = torch.randperm(256, generator=torch.Generator().manual_seed(0))

    def state_dict(self) -> dict[str, Any]:
        return {"cursor": self.cursor, "order": self.order}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.cursor, self.order = int(state["cursor"]), state["order"]


def build_training_state(nbytes: int) -> tuple[Any, Any]:
    """A model and an AdamW optimizer (moments filled by one step) holding about ``nbytes``
    bytes in all: ``_WEIGHTS`` weight matrices and their bias vectors."""
    import torch

    per_weight = max(1, (nbytes // 3 // 4 - _WEIGHTS * _BIAS_NUMEL) // _WEIGHTS)
    cols = 256 if per_weight >= 256 else 1
    generator = torch.Generator().manual_seed(0)
    params = []
    for _ in range(_WEIGHTS):
        params.append(torch.randn(per_weight // cols, cols, generator=generator))
        params.append(torch.randn(_BIAS_NUMEL, generator=generator))
    model = torch.nn.ParameterList([torch.nn.Parameter(p) for p in params])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=generator)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return model, optimizer


@contextmanager
def _quiet_statecraft_logger() -> Iterator[None]:
    """Keep the per-save log line off the terminal while timing (a handler on the
    ``statecraft`` logger also tells the default output that logging is configured)."""
    logger = logging.getLogger("statecraft")
    handler = logging.NullHandler()
    logger.addHandler(handler)
    propagate, logger.propagate = logger.propagate, False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


class _Running:
    """One running checkpointer over the benchmark state: resumed once (a fresh start), then
    one save per call, each at the next iteration; older iterations are removed so the disk
    holds at most two checkpoints."""

    def __init__(
        self, output_root: str, nbytes: int, build: Callable[[int], tuple[Any, Any]]
    ) -> None:
        import torch

        from statecraft import CheckpointConfig, Checkpointer, RunIdentity

        self.model, self.optimizer = build(nbytes)
        config = CheckpointConfig.from_dict(
            {"resume": "auto", "save_every": 0, "save_async": False, "keep_optim_last": 0}
        )
        self.ckpt = Checkpointer(
            config, run=RunIdentity("bench", "sweep", "run"), output_root=output_root
        )
        self.ckpt.track(model=self.model, optimizer=self.optimizer, data=BenchData())
        self.ckpt.resume()
        self.torch = torch
        self.previous: str | None = None

    def save(self) -> tuple[float, Any]:
        from statecraft import Outcome

        self.ckpt.record(Outcome.APPLIED)
        started = time.perf_counter()
        report = self.ckpt.save()
        seconds = time.perf_counter() - started
        if report is None:  # pragma: no cover - single process is rank 0
            raise StatecraftError("bench: Checkpointer.save returned no report on rank 0")
        if self.previous is not None:
            shutil.rmtree(self.previous, ignore_errors=True)
        self.previous = report.location
        return seconds, report

    def payloads(self, location: str) -> dict[str, Any]:
        """Every file of the checkpoint at ``location``, loaded back into memory: the same
        objects the save wrote, for the baseline to write again."""
        names = sorted(n for n in os.listdir(location) if n.endswith(".pt"))
        return {
            n: self.torch.load(os.path.join(location, n), weights_only=True, map_location="cpu")
            for n in names
        }

    def close(self) -> None:
        self.ckpt.close()


def _row(samples: list[float], nbytes: int) -> dict[str, Any]:
    median = statistics.median(samples)
    return {
        "median_s": median,
        "min_s": min(samples),
        "max_s": max(samples),
        "samples_s": samples,
        "gb_per_s": nbytes / median / GB if median > 0 else float("inf"),
    }


def build_small_tensors(nbytes: int) -> tuple[Any, Any]:
    """A model of ``nbytes // 4096`` parameters of 4 KiB each (1024 float32) and a plain SGD
    optimizer (no state): a checkpoint of many small tensors."""
    import torch

    generator = torch.Generator().manual_seed(0)
    params = [
        torch.nn.Parameter(torch.randn(1024, generator=generator))
        for _ in range(max(1, nbytes // 4096))
    ]
    model = torch.nn.ParameterList(params)
    return model, torch.optim.SGD(model.parameters(), lr=1e-3)


def measure_size(
    root: str,
    nbytes: int,
    repeat: int,
    build: Callable[[int], tuple[Any, Any]] = build_training_state,
) -> dict[str, Any]:
    """One size of the sweep (module docstring): the state ``build(nbytes)`` saved by
    statecraft, by the fair baseline and as raw bytes, ``repeat`` rotating rounds."""
    with scratch(root, "statecraft") as out, scratch(root, "baseline") as base:
        running = _Running(out, nbytes, build)
        try:
            _, first = running.save()  # warm-up: the first save publishes the lease record
            payloads = running.payloads(first.location)
            base_bytes = torch_save_files(payloads, base)[1]  # warm-up, and the byte count
            block = memoryview(bytearray(os.urandom(1 << 20)) * min(64, max(1, nbytes // MIB)))
            samples: dict[str, list[float]] = {"statecraft": [], "baseline": [], "raw": []}
            effects: dict[str, list[float]] = {}
            report: Any = first
            contenders: list[tuple[str, Callable[[], float]]] = [
                ("statecraft", lambda: 0.0),  # replaced below (it also yields the report)
                ("baseline", lambda: torch_save_files(payloads, base)[0]),
                ("raw", lambda: raw_write_bytes(base_bytes, base, block)),
            ]
            for i in range(repeat):
                for name, run in contenders[i % 3 :] + contenders[: i % 3]:
                    if name == "statecraft":
                        seconds, report = running.save()
                        for effect, spent in report.effects:
                            effects.setdefault(effect, []).append(spent)
                    else:
                        seconds = run()
                    samples[name].append(seconds)
                    gc.collect()
        finally:
            running.close()
    ours, baseline, raw = (_row(samples[n], base_bytes) for n in ("statecraft", "baseline", "raw"))
    ours["bytes"] = report.bytes_written
    ours["effects"] = [
        {"effect": name, "median_s": statistics.median(spent)} for name, spent in effects.items()
    ]
    return {
        "size": size_label(nbytes),
        "requested_bytes": nbytes,
        "state_bytes": sum(
            t.numel() * t.element_size()
            for t in (*running.model.parameters(), *_moments(running.optimizer))
        ),
        "files": sorted(payloads),
        "statecraft": ours,
        "baseline": {**baseline, "bytes": base_bytes},
        "raw_write": {**raw, "bytes": base_bytes},
        "ratio_vs_baseline": ours["median_s"] / baseline["median_s"],
        "raw_vs_save": raw["median_s"] / ours["median_s"],
        "excess_s": ours["median_s"] - baseline["median_s"],
    }


def _moments(optimizer: Any) -> list[Any]:
    import torch

    return [v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v)]


def _intercept(points: list[tuple[float, float]]) -> float | None:
    """The intercept of the least-squares line through ``(bytes, seconds)`` points."""
    if len(points) < 2:
        return None
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in points) / var
    return my - slope * mx


def measure_save_sizes(
    sizes: list[int], *, directory: str | None = None, repeat: int = 5
) -> dict[str, Any]:
    """Measure ``Checkpointer.save`` against the fair baseline and raw write at each size.

    Args:
        sizes: approximate state sizes in bytes (model + optimizer), each at least 64 KiB.
        directory: where to write (a temporary directory inside it; default: the system's).
        repeat: timed runs of each contender per size (after one warm-up each).

    Returns:
        ``{"repeat", "sizes": [per-size rows], "fixed_cost", "targets"}``; each row holds the
        median seconds of ``statecraft``, ``baseline`` and ``raw_write``, the ratios
        ``ratio_vs_baseline`` (statecraft / baseline seconds; target <= 1.15) and
        ``raw_vs_save`` (raw / statecraft seconds; target >= 0.95 at 1 GiB) and the median
        time of each save effect.

    Raises:
        ConfigError: ``repeat`` is not a positive integer.
    """
    from statecraft.cli.bench.common import check_positive

    check_positive("statecraft bench save", repeat=repeat)
    rows = []
    with bench_root(directory) as root, _quiet_statecraft_logger():
        for nbytes in sizes:
            rows.append(measure_size(root, nbytes, repeat))
            gc.collect()
    smallest = min(rows, key=lambda r: r["baseline"]["bytes"])
    return {
        "repeat": repeat,
        "sizes": rows,
        "fixed_cost": {
            "statecraft_intercept_s": _intercept(
                [(r["baseline"]["bytes"], r["statecraft"]["median_s"]) for r in rows]
            ),
            "baseline_intercept_s": _intercept(
                [(r["baseline"]["bytes"], r["baseline"]["median_s"]) for r in rows]
            ),
            "smallest_size": smallest["size"],
            "smallest_excess_s": smallest["excess_s"],
        },
        "targets": {
            "ratio_vs_baseline_max": SWEEP_BASELINE_TARGET,
            "raw_vs_save_min_at_1GiB": SWEEP_RAW_TARGET,
        },
    }


def run_bench_save_sizes(args: argparse.Namespace) -> int:
    """``statecraft bench save --sizes ...``: the sweep as a table or the JSON envelope."""
    from statecraft.cli.bench.report import format_sweep
    from statecraft.cli.envelope import emit

    sizes = parse_sizes(args.sizes)
    repeat = args.repeat if args.repeat is not None else 5
    data = measure_save_sizes(sizes, directory=args.dir, repeat=repeat)
    return emit("bench save", as_json=args.json, data=data, text=format_sweep(data))


def _sweep_figure(quick_mib: int, full_mib: int, *, raw: bool = False) -> Any:
    """The run of one sweep figure: statecraft / fair baseline seconds per round (``raw``:
    raw write / statecraft seconds) at ``quick_mib`` (``full_mib`` with ``--full``)."""

    def run(ctx: FigureRun) -> Measured:
        mib = ctx.size_mib(quick_mib, full_mib)
        row = ctx.once(f"sweep:{mib}", lambda: measure_size(ctx.root, mib * MIB, ctx.repeat))
        ours = row["statecraft"]["samples_s"]
        other = row["raw_write" if raw else "baseline"]["samples_s"]
        return Measured(paired(ours, other, invert=raw), size_text(mib))

    return run


def _small_tensors(ctx: FigureRun) -> Measured:
    """10,000 tensors of 4 KiB (1,000 with ``--quick``, fewer under ``--max-mib``) against
    the fair baseline."""
    count = 1_000 if ctx.quick else 10_000
    count = count if ctx.max_mib is None else min(count, ctx.max_mib * 256)
    row = measure_size(ctx.root, count * 4096, ctx.repeat, build_small_tensors)
    ours, base = row["statecraft"]["samples_s"], row["baseline"]["samples_s"]
    return Measured(paired(ours, base), f"{count:,} x 4 KiB")


_FAIR = "torch.save + fsync + rename, same files"
FIGURES = [
    *(Figure("save", _FAIR, SWEEP_BASELINE_TARGET, "lower", _sweep_figure(m, m)) for m in (1, 16)),
    Figure("save", _FAIR, SWEEP_BASELINE_TARGET, "lower", _sweep_figure(128, 128),
           full_only=True, stated_at="128 MiB"),
    Figure("save, 4 KiB tensors", _FAIR, SMALL_TENSORS_TARGET, "lower", _small_tensors),
    Figure("raw write / save", "raw write + fsync", SWEEP_RAW_TARGET, "higher",
           _sweep_figure(1024, 1024, raw=True), full_only=True, stated_at="1 GiB"),
]  # fmt: skip
