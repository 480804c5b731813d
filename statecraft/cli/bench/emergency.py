"""``statecraft bench emergency``: what a stop costs, from the decision to the durable
emergency checkpoint, against one plain synchronous save of the same state, in one process.

For a model + AdamW state of ``--size-mib`` (the ``bench save --sizes`` state: a third
parameters, two thirds moments), each repeat runs, in alternating order:

- **emergency**: a fresh ``Checkpointer`` (its own output root; ``save_every=0``, the default
  ``save_async=true``, ``emergency_checkpoint_components=full``, the sentinel directory a
  scratch directory, no signal handlers) is resumed (fresh start) and records one applied
  step; then the sentinel file is created and ``step_end()`` is timed. It must return a stop
  with an emergency report of kind ``checkpoint``; the report's ``seconds_to_durable`` is the
  time from the stop decision (``StopDecision.decided_at``) to the durable checkpoint, and the
  call's wall time adds the decision itself (the poll and the collective), ``DONE.json`` and
  the sentinel's consumption. ``finalize()`` and ``close()`` are not timed.
- **sync save**: a fresh ``Checkpointer`` (``save_async=false``), resumed, one applied step,
  then one ``save()`` timed: the plain save of the same state the emergency one is held to.

Reported: the medians, the ratio ``step_end / sync save`` and the absolute overhead
``step_end - sync save`` in seconds. Target: one save plus at most
:data:`EMERGENCY_OVERHEAD_TARGET_S` (1 s). Nothing asserts a speed;
``tests/cli/test_bench_emergency.py`` checks the shape.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from pathlib import Path
from typing import Any

from statecraft.cli.bench.common import MIB, bench_root, check_positive, scratch
from statecraft.cli.bench.figures import Figure, FigureRun, Measured, size_text
from statecraft.errors import StatecraftError

__all__ = [
    "EMERGENCY_OVERHEAD_TARGET_S",
    "format_emergency",
    "measure_emergency",
    "run_bench_emergency",
]

#: the emergency save may cost at most one plain save plus this many seconds
EMERGENCY_OVERHEAD_TARGET_S = 1.0
SENTINEL = "SIGUSR1_RECEIVED"


def _row(samples: list[float]) -> dict[str, Any]:
    return {
        "median_s": statistics.median(samples),
        "min_s": min(samples),
        "max_s": max(samples),
        "samples_s": samples,
    }


def _checkpointer(root: str, model: Any, optimizer: Any, **knobs: Any) -> Any:
    """A resumed (fresh) ``Checkpointer`` over the benchmark state, one applied step recorded."""
    from statecraft import CheckpointConfig, Checkpointer, Outcome, RunIdentity

    config = CheckpointConfig.from_dict(
        {"resume": "auto", "save_every": 0, "keep_optim_last": 0, **knobs}
    )
    ckpt = Checkpointer(config, run=RunIdentity("bench", "emergency", "run"), output_root=root)
    ckpt.track(model=model, optimizer=optimizer)
    ckpt.resume()
    ckpt.record(Outcome.APPLIED)
    return ckpt


def _emergency_once(root: str, model: Any, optimizer: Any) -> tuple[float, float, str]:
    """(wall seconds of ``step_end()``, the report's decision-to-durable seconds, its path)."""
    from statecraft.checkpoint.stop.records import EmergencyKind

    sentinel_dir = Path(root) / "slurm-logs"
    sentinel_dir.mkdir()
    ckpt = _checkpointer(
        root,
        model,
        optimizer,
        termination={"sentinel_dir": str(sentinel_dir), "signals": []},
    )
    try:
        (sentinel_dir / SENTINEL).touch()
        started = time.perf_counter()
        end = ckpt.step_end()
        wall = time.perf_counter() - started
        report = end.emergency
        if not end.stop or report is None or report.kind is not EmergencyKind.CHECKPOINT:
            raise StatecraftError(
                "bench emergency: step_end() after the sentinel did not stop with an emergency "
                f"checkpoint (stop={end.stop}, reason={end.reason}, emergency={report}); "
                "check termination.enabled and the termination watch"
            )
        ckpt.finalize()
    finally:
        ckpt.close()
    return wall, report.seconds_to_durable, report.path


def _sync_once(root: str, model: Any, optimizer: Any) -> float:
    """Seconds of one plain synchronous ``save()`` of the same state."""
    ckpt = _checkpointer(root, model, optimizer, save_async=False, termination={"enabled": False})
    try:
        started = time.perf_counter()
        ckpt.save()
        seconds = time.perf_counter() - started
    finally:
        ckpt.close()
    return seconds


def measure_emergency(
    *, size_mib: int, repeat: int, directory: str | None = None
) -> dict[str, Any]:
    """Time the emergency save (decision to durable, and the whole ``step_end()``) against a
    plain synchronous save of the same state.

    Returns:
        ``{"size_mib", "state_bytes", "repeat", "cpus", "path", "decision_to_durable",
        "step_end", "sync_save", "ratios", "overhead_s", "targets"}``; the three timings are
        rows (median, min, max, samples), ``ratios`` the medians' ratios to the sync save and
        ``overhead_s`` the medians' differences in seconds.

    Raises:
        ConfigError: ``size_mib`` or ``repeat`` is not a positive integer.
        StatecraftError: the sentinel did not stop the run with an emergency checkpoint.
    """
    import torch

    from statecraft.cli.bench.sweep import _quiet_statecraft_logger, build_training_state

    check_positive("statecraft bench emergency", size_mib=size_mib, repeat=repeat)
    model, optimizer = build_training_state(size_mib * MIB)
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters()) + sum(
        v.numel() * v.element_size()
        for s in optimizer.state.values()
        for v in s.values()
        if torch.is_tensor(v)
    )
    durable: list[float] = []
    step_end: list[float] = []
    sync: list[float] = []
    path = ""
    with bench_root(directory) as root, _quiet_statecraft_logger():
        with scratch(root, "warmup") as where:  # first-touch costs (imports, page cache)
            _sync_once(where, model, optimizer)
        for i in range(repeat):
            for name in ("emergency", "sync") if i % 2 == 0 else ("sync", "emergency"):
                with scratch(root, name) as where:
                    if name == "sync":
                        sync.append(_sync_once(where, model, optimizer))
                    else:
                        wall, to_durable, path = _emergency_once(where, model, optimizer)
                        step_end.append(wall)
                        durable.append(to_durable)
                gc.collect()
    rows = {"decision_to_durable": _row(durable), "step_end": _row(step_end), "sync": _row(sync)}
    base = rows["sync"]["median_s"]
    return {
        "size_mib": size_mib,
        "state_bytes": nbytes,
        "repeat": repeat,
        "cpus": os.cpu_count(),
        "path": path,
        "decision_to_durable": rows["decision_to_durable"],
        "step_end": rows["step_end"],
        "sync_save": rows["sync"],
        "ratios": {
            "step_end_vs_sync": rows["step_end"]["median_s"] / base,
            "durable_vs_sync": rows["decision_to_durable"]["median_s"] / base,
        },
        "overhead_s": {
            "step_end": rows["step_end"]["median_s"] - base,
            "decision_to_durable": rows["decision_to_durable"]["median_s"] - base,
        },
        "targets": {"overhead_max_s": EMERGENCY_OVERHEAD_TARGET_S},
    }


def format_emergency(data: dict[str, Any]) -> str:
    """The human table of :func:`measure_emergency`'s result."""
    from statecraft.cli.bench.report import _verdict

    sync = data["sync_save"]["median_s"]
    lines = [
        f"emergency save: model + AdamW state of {data['state_bytes'] / MIB:.1f} MiB, median of "
        f"{data['repeat']} runs ({data['cpus']} CPUs)",
        "",
        f"{'':<44}{'ms':>10}{'x sync':>9}{'+ s':>9}",
    ]
    for name, key in (
        ("plain synchronous save", "sync_save"),
        ("stop decision -> durable checkpoint", "decision_to_durable"),
        ("step_end() with the sentinel (wall)", "step_end"),
    ):
        median = data[key]["median_s"]
        lines.append(f"{name:<44}{1e3 * median:>10.2f}{median / sync:>9.2f}{median - sync:>+9.3f}")
    overhead = data["overhead_s"]["step_end"]
    target = data["targets"]["overhead_max_s"]
    lines += [
        "",
        f"target: step_end() <= one save + {target:g} s: overhead {overhead:+.3f} s "
        f"({_verdict(overhead <= target)})",
    ]
    return "\n".join(lines)


def run_bench_emergency(args: argparse.Namespace) -> int:
    """``statecraft bench emergency``: print :func:`measure_emergency` as a table or JSON."""
    from statecraft.cli.envelope import emit

    data = measure_emergency(size_mib=args.size_mib, repeat=args.repeat, directory=args.dir)
    return emit("bench emergency", as_json=args.json, data=data, text=format_emergency(data))


def _overhead(ctx: FigureRun) -> Measured:
    """Per round (the order alternating): ``step_end()`` with the stop minus one sync save."""
    mib = ctx.size_mib(4, 64)
    data = measure_emergency(size_mib=mib, repeat=ctx.repeat, directory=ctx.root)
    ends, syncs = data["step_end"]["samples_s"], data["sync_save"]["samples_s"]
    return Measured(tuple(e - s for e, s in zip(ends, syncs, strict=True)), size_text(mib))


FIGURES = [
    Figure("emergency step_end() overhead", "one synchronous save", EMERGENCY_OVERHEAD_TARGET_S,
           "lower", _overhead, unit="s"),
]  # fmt: skip
