"""``statecraft bench save --resume-sizes 1MiB,16MiB,128MiB``: a verified resume against plain
``torch.load`` of the same files, per size, warm and cold.

For each size a model + AdamW state of about that size (:func:`~.sweep.build_training_state`:
the parameters a third of the bytes, the moments two thirds) is saved once by a real
``Checkpointer`` (``model.pt``, ``optim.pt``, ``trainer.pt``). Then, for each page-cache state
(``warm``: the files cached; ``cold``: every file of the checkpoint dropped from the page cache
with ``posix_fadvise(DONTNEED)`` before each run, the save having fsynced them), the
contenders alternate, the order flipping at every repeat (A B, B A, ...), so a burst of load
from other processes hits both alike:

- **statecraft**: ``Checkpointer.resume()`` (``resume=auto``, ``verify=digest``) of a fresh
  ``Checkpointer`` tracking the live model and optimizer: the catalog scan, the manifest, every
  digest, the lease, the loads and the all-or-nothing apply. Building the ``Checkpointer`` and
  closing it are timed apart (``construct_s``, ``close_s``), not in the ratio;
- **torch.load**: ``torch.load(f, weights_only=True)`` of each of those files (the baseline of
  the target);
- **torch.load + load_state_dict**: the same, then ``model.load_state_dict`` and
  ``optimizer.load_state_dict`` (what a hand-written resume does; reported, not a target).

Reported per size and cache: each contender's median seconds and range, and the ratio
``torch.load seconds / statecraft seconds`` of each repeat's pair, as median and range (target
>= :data:`~.targets.RESUME_LOAD_TARGET`). Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from statecraft.cli.bench.common import MIB, bench_root, check_positive, evict
from statecraft.cli.bench.figures import Figure, FigureRun, FigureUnavailable, Measured, size_text
from statecraft.cli.bench.targets import RESUME_LOAD_TARGET
from statecraft.errors import StatecraftError

__all__ = ["FIGURES", "format_resume_sizes", "measure_resume_sizes", "run_bench_resume_sizes"]

_CONFIG = {"resume": "auto", "save_every": 0, "save_async": False, "keep_optim_last": 0}


def _checkpointer(root: str, model: Any, optimizer: Any) -> Any:
    from statecraft import CheckpointConfig, Checkpointer, RunIdentity

    ckpt = Checkpointer(
        CheckpointConfig.from_dict(_CONFIG),
        run=RunIdentity("bench", "resume", "run"),
        output_root=root,
    )
    ckpt.track(model=model, optimizer=optimizer)
    return ckpt


def _save_once(root: str, nbytes: int) -> tuple[Any, Any, list[str]]:
    """The state of ``nbytes``, saved once; its live objects and the checkpoint's files."""
    from statecraft import Outcome
    from statecraft.cli.bench.sweep import build_training_state

    model, optimizer = build_training_state(nbytes)
    ckpt = _checkpointer(root, model, optimizer)
    ckpt.resume()
    ckpt.record(Outcome.APPLIED)
    report = ckpt.save()
    ckpt.close()
    if report is None:  # pragma: no cover - single process is rank 0
        raise StatecraftError("bench: Checkpointer.save returned no report on rank 0")
    names = sorted(n for n in os.listdir(report.location) if n.endswith(".pt"))
    return model, optimizer, [os.path.join(report.location, n) for n in names]


def _statecraft(root: str, model: Any, optimizer: Any) -> dict[str, float]:
    started = time.perf_counter()
    ckpt = _checkpointer(root, model, optimizer)
    built = time.perf_counter()
    result = ckpt.resume()
    resumed = time.perf_counter()
    ckpt.close()
    closed = time.perf_counter()
    if not result.resumed:
        raise StatecraftError(f"bench: resume did not load the saved checkpoint ({result.reason})")
    return {"seconds": resumed - built, "construct_s": built - started, "close_s": closed - resumed}


def _torch_load(files: list[str], model: Any = None, optimizer: Any = None) -> dict[str, float]:
    import torch

    started = time.perf_counter()
    loaded = {
        os.path.basename(f): torch.load(f, weights_only=True, map_location="cpu") for f in files
    }
    if model is not None:
        model.load_state_dict(loaded["model.pt"])
        optimizer.load_state_dict(loaded["optim.pt"])
    return {"seconds": time.perf_counter() - started}


def _summary(samples: list[float]) -> dict[str, float]:
    return {"median_s": statistics.median(samples), "min_s": min(samples), "max_s": max(samples)}


def _measure_size(root: str, size_mib: int, repeat: int) -> dict[str, Any]:
    model, optimizer, files = _save_once(root, size_mib * MIB)
    checkpoint = os.path.dirname(files[0])
    contenders: dict[str, Callable[[], dict[str, float]]] = {
        "statecraft": lambda: _statecraft(root, model, optimizer),
        "torch_load": lambda: _torch_load(files),
        "torch_load_apply": lambda: _torch_load(files, model, optimizer),
    }
    for run in contenders.values():  # warm-up: imports, first-touch allocations
        run()
    caches: dict[str, Any] = {}
    for cache in ("warm", "cold"):
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in contenders}
        for i in range(repeat):
            order = list(contenders) if i % 2 == 0 else list(reversed(contenders))
            for name in order:
                if cache == "cold" and not evict(checkpoint):
                    break
                gc.collect()
                runs[name].append(contenders[name]())
        if not runs["statecraft"]:
            caches[cache] = None  # no way to drop the page cache here
            continue
        ours = [r["seconds"] for r in runs["statecraft"]]
        ratios = [b["seconds"] / o for b, o in zip(runs["torch_load"], ours, strict=True)]
        caches[cache] = {
            **{name: _summary([r["seconds"] for r in rs]) for name, rs in runs.items()},
            "construct": _summary([r["construct_s"] for r in runs["statecraft"]]),
            "close": _summary([r["close_s"] for r in runs["statecraft"]]),
            "ratio": {
                "median": statistics.median(ratios),
                "min": min(ratios),
                "max": max(ratios),
                "samples": ratios,
            },
        }
    return {
        "size_mib": size_mib,
        "files": {os.path.basename(f): os.path.getsize(f) for f in files},
        **caches,
    }


def measure_resume_sizes(
    sizes_mib: list[int], *, repeat: int = 5, directory: str | None = None
) -> dict[str, Any]:
    """Resume vs ``torch.load`` of the same files at each size, warm and cold (module doc).

    Args:
        sizes_mib: state sizes in MiB (model + AdamW moments).
        repeat: interleaved pairs per size and cache state (at least 5 for a median).
        directory: where to write (a temporary directory inside it; default: the system's).

    Raises:
        ConfigError: ``repeat`` or a size is not a positive integer.
    """
    check_positive("statecraft bench save --resume-sizes", repeat=repeat)
    for size in sizes_mib:
        check_positive("statecraft bench save --resume-sizes", resume_sizes=size)
    rows = []
    for size in sizes_mib:
        with bench_root(directory) as root:
            rows.append(_measure_size(root, size, repeat))
    return {"repeat": repeat, "target": RESUME_LOAD_TARGET, "sizes": rows}


def _ms(row: dict[str, float]) -> str:
    return f"{1e3 * row['median_s']:7.1f} ({1e3 * row['min_s']:.0f}-{1e3 * row['max_s']:.0f})"


def format_resume_sizes(data: dict[str, Any]) -> str:
    """The human table of :func:`measure_resume_sizes`."""
    lines = [
        f"verified resume vs torch.load(weights_only=True) of the same files, model + AdamW, "
        f"{data['repeat']} interleaved pairs, medians (ranges)",
        "",
        f"{'size':>6} {'cache':5} {'resume()':>18} {'torch.load':>18} {'+load_state_dict':>18}"
        f"  {'ratio (target >= ' + str(data['target']) + ')':>28}",
    ]
    for row in data["sizes"]:
        for cache in ("warm", "cold"):
            c = row[cache]
            if c is None:
                lines.append(f"{row['size_mib']:>4}Mi {cache:5} (the page cache cannot be dropped)")
                continue
            cells = [_ms(c[n]) for n in ("statecraft", "torch_load", "torch_load_apply")]
            r = c["ratio"]
            verdict = "ok" if r["median"] >= data["target"] else "below"
            lines.append(
                f"{row['size_mib']:>4}Mi {cache:5} {cells[0]:>18} {cells[1]:>18} {cells[2]:>18}"
                f"  {r['median']:5.2f} ({r['min']:.2f}-{r['max']:.2f}) {verdict}"
            )
        warm = row["warm"]
        lines.append(
            f"{'':>6} (ms; Checkpointer() {1e3 * warm['construct']['median_s']:.1f}, close() "
            f"{1e3 * warm['close']['median_s']:.1f}, not in the ratio)"
        )
    return "\n".join(lines)


def run_bench_resume_sizes(args: argparse.Namespace) -> int:
    """``statecraft bench save --resume-sizes``: print :func:`measure_resume_sizes`."""
    from statecraft.cli.bench.sweep import parse_sizes
    from statecraft.cli.envelope import emit

    sizes = [max(1, n // MIB) for n in parse_sizes(args.resume_sizes)]
    repeat = args.repeat if args.repeat is not None else 5
    data = measure_resume_sizes(sizes, repeat=repeat, directory=args.dir)
    return emit("bench save", as_json=args.json, data=data, text=format_resume_sizes(data))


def _resume_figure(cache: str, quick_mib: int, full_mib: int) -> Callable[[FigureRun], Measured]:
    """Per interleaved pair: ``torch.load`` seconds / ``resume()`` seconds of the same files
    (``cache``: ``warm`` or ``cold``); one measurement per size serves both rows."""

    def run(ctx: FigureRun) -> Measured:
        mib = ctx.size_mib(quick_mib, full_mib)
        data = ctx.once(
            f"resume:{mib}",
            lambda: measure_resume_sizes([mib], repeat=ctx.repeat, directory=ctx.root),
        )
        row = data["sizes"][0][cache]
        if row is None:
            raise FigureUnavailable("the page cache cannot be dropped here (posix_fadvise)")
        return Measured(tuple(row["ratio"]["samples"]), size_text(mib))

    return run


FIGURES = [
    Figure("resume, warm", "torch.load of the same files", RESUME_LOAD_TARGET, "higher",
           _resume_figure("warm", 1, 1)),
    Figure("resume, cold", "torch.load of the same files", RESUME_LOAD_TARGET, "higher",
           _resume_figure("cold", 1, 1)),
    Figure("resume, warm", "torch.load of the same files", RESUME_LOAD_TARGET, "higher",
           _resume_figure("warm", 128, 128), full_only=True, stated_at="128 MiB"),
]  # fmt: skip
