"""``statecraft bench save``: save and resume of one state against the baselines, same run.

Each repeat runs every contender once, in turn (raw write, raw write with early writeback,
``torch.save``, statecraft; then for
each page-cache state ``torch.load``, ``torch.load(mmap)``, statecraft resume), so a burst of
load from other processes hits all of them alike. The reported throughput of each is its best
run; the ratios are best over best, and ``ratio_spread`` gives the smallest and largest ratio
of the runs paired by repeat (how much the noise moved them).
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

from statecraft.cli.bench.baselines import raw_write, torch_load, torch_save
from statecraft.cli.bench.checkpointer import resume_rss, statecraft_resume, statecraft_save
from statecraft.cli.bench.common import (
    bench_root,
    best,
    build_model,
    check_positive,
    evict,
    rate,
    scratch,
    state_bytes,
)
from statecraft.cli.bench.figures import Figure, FigureRun, Measured, size_text
from statecraft.cli.bench.targets import RESUME_LOAD_TARGET, RESUME_RSS_TARGET, SAVE_RAW_TARGET

__all__ = [
    "RESUME_LOAD_TARGET",
    "RESUME_RSS_TARGET",
    "SAVE_RAW_TARGET",
    "measure_save",
    "run_bench_save",
]

LoadRun = tuple[float, list[tuple[str, float]]]


def _spread(pairs: list[tuple[float, float]]) -> dict[str, float] | None:
    """Smallest and largest ``baseline_seconds / statecraft_seconds`` over paired runs."""
    ratios = [base / ours for ours, base in pairs if ours > 0]
    return {"min": min(ratios), "max": max(ratios)} if ratios else None


def _saves(model: Any, root: str, repeat: int) -> dict[str, Any]:
    """Interleaved save runs; the last statecraft checkpoint is kept for the loads."""
    raw: list[float] = []
    raw_wb: list[float] = []
    tsave: list[float] = []
    ours: list[float] = []
    tsave_bytes = 0
    best_report: Any = None
    saved_root = ""
    for i in range(repeat):
        with scratch(root, "raw") as d:
            raw.append(raw_write(model, d))
        with scratch(root, "raw-writeback") as d:
            raw_wb.append(raw_write(model, d, writeback=True))
        with scratch(root, "torch-save") as d:
            seconds, tsave_bytes = torch_save(model, d)
            tsave.append(seconds)
        out = tempfile.mkdtemp(prefix="statecraft-save-", dir=root)
        try:
            seconds, report = statecraft_save(model, out)
        except BaseException:
            shutil.rmtree(out, ignore_errors=True)
            raise
        if not ours or seconds < min(ours):
            best_report = report
        ours.append(seconds)
        if i == repeat - 1:
            saved_root, last_report = out, report
        else:
            shutil.rmtree(out, ignore_errors=True)
    return {
        "raw": raw,
        "raw_wb": raw_wb,
        "tsave": tsave,
        "tsave_bytes": tsave_bytes,
        "ours": ours,
        "best_report": best_report,
        "saved_root": saved_root,
        "model_pt": os.path.join(last_report.location, "model.pt"),
    }


def _loads(model_pt: str, saved_root: str, size_mib: int, repeat: int) -> dict[str, Any]:
    """Interleaved load runs, warm then cold: ``{name: {cache: [LoadRun, ...]}}``."""
    loaders: dict[str, Callable[[], LoadRun]] = {
        "torch_load": lambda: torch_load(model_pt, size_mib, mmap=False),
        "torch_load_mmap": lambda: torch_load(model_pt, size_mib, mmap=True),
        "statecraft_resume": lambda: statecraft_resume(saved_root, size_mib),
    }
    runs: dict[str, dict[str, list[LoadRun]]] = {n: {"warm": [], "cold": []} for n in loaders}
    for cache in ("warm", "cold"):  # warm first: the save left the files cached
        for _ in range(repeat):
            for name, load in loaders.items():
                if cache == "cold" and not evict(saved_root):
                    break
                runs[name][cache].append(load())
                gc.collect()
    return runs


def load_row(nbytes: int, runs: list[LoadRun]) -> dict | None:
    """The best run of one loader in one cache state (None when it could not run)."""
    if not runs:
        return None
    seconds, effects = min(runs, key=lambda r: r[0])
    row: dict[str, Any] = {"seconds": seconds, "gb_per_s": rate(nbytes, seconds)}
    if effects:
        verify = sum(s for name, s in effects if name.startswith("verify"))
        row["verify_seconds"] = verify
        row["verify_share"] = verify / seconds if seconds > 0 else 0.0
        row["effects"] = [{"effect": n, "seconds": s} for n, s in effects]
    return row


def measure_save(*, size_mib: int = 1024, directory: str | None = None, repeat: int = 2) -> dict:
    """Measure save / load throughput and resume peak RSS of a ``size_mib`` MiB state.

    Each throughput is the best of ``repeat`` runs; files are removed after each run.

    Args:
        size_mib: state size in MiB (16 equal float32 parameters, SGD without state).
        directory: where to write (a temporary directory inside it; default: the system's).
        repeat: runs per measurement.

    Returns:
        a dict with ``save``, ``load``, ``resume_rss``, ``ratios`` and ``ratio_spread``
        sections.

    Raises:
        ConfigError: ``size_mib`` or ``repeat`` is not a positive integer.
    """
    check_positive("statecraft bench save", size_mib=size_mib, repeat=repeat)
    model = build_model(size_mib, fill=True)
    nbytes = state_bytes(model)
    with bench_root(directory) as root:
        saves = _saves(model, root, repeat)
        del model
        gc.collect()
        try:
            runs = _loads(saves["model_pt"], saves["saved_root"], size_mib, repeat)
            rss = resume_rss(saves["saved_root"], size_mib)
        finally:
            shutil.rmtree(saves["saved_root"], ignore_errors=True)

    report = saves["best_report"]
    sc_seconds = best(saves["ours"])
    raw_gbs = rate(nbytes, best(saves["raw"]))
    raw_wb_gbs = rate(nbytes, best(saves["raw_wb"]))
    tsave_gbs = rate(saves["tsave_bytes"], best(saves["tsave"]))
    sc_gbs = rate(report.bytes_written, sc_seconds)
    loads = {
        name: {c: load_row(nbytes, r) for c, r in caches.items()} for name, caches in runs.items()
    }

    def load_ratio(cache: str, baseline: str) -> float | None:
        resume, base = loads["statecraft_resume"][cache], loads[baseline][cache]
        return resume["gb_per_s"] / base["gb_per_s"] if resume and base else None

    def load_spread(cache: str, baseline: str) -> dict[str, float] | None:
        ours, base = runs["statecraft_resume"][cache], runs[baseline][cache]
        return _spread([(o[0], b[0]) for o, b in zip(ours, base, strict=False)])

    # the save's bytes include optim.pt and trainer.pt: pair runs by throughput, not seconds
    per_byte = nbytes / report.bytes_written
    return {
        "size_mib": size_mib,
        "state_bytes": nbytes,
        "repeat": repeat,
        "save": {
            "raw_write_fsync": {"seconds": best(saves["raw"]), "gb_per_s": raw_gbs},
            "raw_write_writeback_fsync": {
                "seconds": best(saves["raw_wb"]),
                "gb_per_s": raw_wb_gbs,
            },
            "torch_save_fsync_rename": {
                "seconds": best(saves["tsave"]),
                "bytes": saves["tsave_bytes"],
                "gb_per_s": tsave_gbs,
            },
            "statecraft": {
                "seconds": sc_seconds,
                "bytes": report.bytes_written,
                "gb_per_s": sc_gbs,
                "machine_seconds": report.seconds,
                "effects": [{"effect": n, "seconds": s} for n, s in report.effects],
            },
        },
        "load": loads,
        "resume_rss": {
            **rss,
            "increase_ratio": rss["increase_bytes"] / rss["state_bytes"],
            "target": RESUME_RSS_TARGET,
        },
        "ratios": {
            "save_vs_raw": sc_gbs / raw_gbs,
            "save_vs_raw_target": SAVE_RAW_TARGET,
            "save_vs_raw_writeback": sc_gbs / raw_wb_gbs,
            "save_vs_torch_save": sc_gbs / tsave_gbs,
            "resume_vs_torch_load": load_ratio("warm", "torch_load"),
            "resume_vs_torch_load_mmap": load_ratio("warm", "torch_load_mmap"),
            "resume_vs_torch_load_cold": load_ratio("cold", "torch_load"),
            "resume_vs_torch_load_mmap_cold": load_ratio("cold", "torch_load_mmap"),
            "resume_vs_torch_load_target": RESUME_LOAD_TARGET,
            "resume_rss_increase": rss["increase_bytes"] / rss["state_bytes"],
        },
        "ratio_spread": {
            "save_vs_raw": _spread(
                [(o * per_byte, r) for o, r in zip(saves["ours"], saves["raw"], strict=True)]
            ),
            "save_vs_raw_writeback": _spread(
                [(o * per_byte, r) for o, r in zip(saves["ours"], saves["raw_wb"], strict=True)]
            ),
            "resume_vs_torch_load": load_spread("warm", "torch_load"),
            "resume_vs_torch_load_cold": load_spread("cold", "torch_load"),
        },
    }


def run_bench_save(args: argparse.Namespace) -> int:
    """``statecraft bench save``: print :func:`measure_save` as a table or the JSON envelope;
    with ``--sizes``, the sweep of :mod:`~statecraft.cli.bench.sweep` instead; with
    ``--resume-sizes``, the resume figure of :mod:`~statecraft.cli.bench.resume`."""
    from statecraft.cli.bench.report import format_save
    from statecraft.cli.envelope import emit

    if getattr(args, "resume_sizes", None):
        from statecraft.cli.bench.resume import run_bench_resume_sizes

        return run_bench_resume_sizes(args)
    if getattr(args, "sizes", None):
        from statecraft.cli.bench.sweep import run_bench_save_sizes

        return run_bench_save_sizes(args)
    repeat = args.repeat if args.repeat is not None else 2
    data = measure_save(size_mib=args.size_mib, directory=args.dir, repeat=repeat)
    return emit("bench save", as_json=args.json, data=data, text=format_save(data))


def _save_vs_raw(ctx: FigureRun) -> Measured:
    """Raw write + fsync against a statecraft save of the same model, alternating which goes
    first; per round the throughput ratio (the save's bytes include optim.pt and trainer.pt)."""
    size_mib = ctx.size_mib(16, 1024)
    model = build_model(size_mib, fill=True)
    nbytes = state_bytes(model)
    ratios = []
    for i in range(ctx.repeat):
        seconds: dict[str, float] = {}
        for name in ("raw", "statecraft") if i % 2 == 0 else ("statecraft", "raw"):
            with scratch(ctx.root, name) as where:
                if name == "raw":
                    seconds[name] = raw_write(model, where)
                else:
                    spent, report = statecraft_save(model, where)
                    seconds[name] = spent * nbytes / report.bytes_written
            gc.collect()
        ratios.append(seconds["raw"] / seconds["statecraft"])
    return Measured(tuple(ratios), size_text(size_mib))


FIGURES = [
    Figure("save throughput", "raw write + fsync", SAVE_RAW_TARGET, "higher", _save_vs_raw),
]
