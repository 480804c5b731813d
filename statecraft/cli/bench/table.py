"""``statecraft bench`` with no subcommand: every benchmark, briefly, in one table.

Each module of :data:`FIGURE_MODULES` declares its figures (``FIGURES``, a list of
:class:`~statecraft.cli.bench.figures.Figure`); this module runs them in that order, each
interleaving its compared variants ``--repeat`` times (at least 5), and prints one row per
figure: figure, size, baseline, ratio (the median of the per-repetition ratios), range (their
smallest and largest), target, met. ``--json`` prints the same rows in the envelope.

``--quick`` (the default) measures each figure at its quick size; ``--full`` at the size its
target is stated for (minutes); ``--all`` adds the slow figures (they start gloo ranks, a
SeaweedFS server or a Lightning / HF trainer); ``--max-mib`` caps every size (the tests' tiny
run); ``--only`` keeps the figures whose name contains one of its comma-separated words.
Nothing here asserts a speed; ``tests/cli/test_bench_table.py`` checks the shape.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import time
from typing import Any

from statecraft.cli.bench.common import bench_root
from statecraft.cli.bench.figures import Figure, FigureRun, FigureUnavailable
from statecraft.cli.bench.sweep import _quiet_statecraft_logger
from statecraft.errors import ConfigError, ConfigIssue

__all__ = ["FIGURE_MODULES", "MIN_REPEAT", "all_figures", "format_table", "measure_table"]

#: the modules whose ``FIGURES`` make the table, in the table's order
FIGURE_MODULES = (
    "statecraft.cli.bench.save",
    "statecraft.cli.bench.sweep",
    "statecraft.cli.bench.resume",
    "statecraft.cli.bench.async_save",
    "statecraft.cli.bench.emergency",
    "statecraft.cli.bench.validation",
    "statecraft.cli.bench.incremental",
    "statecraft.cli.bench.dcp",
    "statecraft.cli.bench.upload_figures",
    "statecraft.cli.bench.lightning",
    "statecraft.cli.bench.hf",
)
MIN_REPEAT = 5  # every figure interleaves its variants at least this many times


def all_figures() -> list[Figure]:
    """Every declared figure, in table order."""
    figures: list[Figure] = []
    for name in FIGURE_MODULES:
        figures += getattr(importlib.import_module(name), "FIGURES", [])
    return figures


def _selected(only: str | None) -> list[Figure]:
    figures = all_figures()
    if not only:
        return figures
    words = [w.strip().lower() for w in only.split(",") if w.strip()]
    chosen = [f for f in figures if any(w in f.name.lower() for w in words)]
    if not chosen:
        raise ConfigError(
            [ConfigIssue("--only", only, "words of a figure's name (see `statecraft bench`)")],
            source="statecraft bench",
        )
    return chosen


def _row(figure: Figure, ctx: FigureRun) -> dict[str, Any]:
    row: dict[str, Any] = {
        "figure": figure.name,
        "baseline": figure.baseline,
        "unit": figure.unit,
        "target": figure.target,
        "better": figure.better,
    }
    skipped = {"size": figure.stated_at, "ratio": None, "range": None, "met": None}
    if figure.full_only and ctx.quick:
        return {**row, **skipped, "skipped": "--full only (its target is stated at that size)"}
    if figure.slow and not ctx.slow:
        return {**row, **skipped, "skipped": "--all only (starts processes, a server or a trainer)"}
    started = time.perf_counter()
    try:
        measured = figure.run(ctx)
    except (FigureUnavailable, ImportError) as exc:
        return {**row, **skipped, "skipped": f"{type(exc).__name__}: {exc}"}
    finally:
        gc.collect()
    values = list(measured.values)
    return {
        **row,
        "size": measured.size,
        "ratio": measured.median,
        "range": [min(values), max(values)],
        "met": figure.met(measured.median),
        "repetitions": len(values),
        "values": values,
        "seconds": time.perf_counter() - started,
    }


def measure_table(
    *,
    repeat: int = MIN_REPEAT,
    quick: bool = True,
    slow: bool = False,
    directory: str | None = None,
    max_mib: int | None = None,
    only: str | None = None,
) -> dict[str, Any]:
    """Run every selected figure (``slow``: those marked slow too); ``{"quick", "slow",
    "repeat", "max_mib", "rows", "seconds"}``.

    Raises:
        ConfigError: ``repeat`` below :data:`MIN_REPEAT`, a non-positive ``max_mib``, or an
            ``only`` that selects no figure.
    """
    issues = []
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < MIN_REPEAT:
        issues.append(ConfigIssue("--repeat", repeat, f"an integer >= {MIN_REPEAT}"))
    if max_mib is not None and (isinstance(max_mib, bool) or max_mib < 1):
        issues.append(ConfigIssue("--max-mib", max_mib, "a positive integer"))
    if issues:
        raise ConfigError(issues, source="statecraft bench")
    figures = _selected(only)
    started = time.perf_counter()
    with bench_root(directory) as root, _quiet_statecraft_logger():
        ctx = FigureRun(root=root, repeat=repeat, quick=quick, slow=slow, max_mib=max_mib)
        rows = [_row(figure, ctx) for figure in figures]
    return {
        "quick": quick,
        "slow": slow,
        "repeat": repeat,
        "max_mib": max_mib,
        "rows": rows,
        "seconds": time.perf_counter() - started,
    }


def _number(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return f"{value:+.3f} s" if unit == "s" else f"{value:.2f}x"


def _target(row: dict[str, Any]) -> str:
    if row["target"] is None:
        return "-"
    sign = "<=" if row["better"] == "lower" else ">="
    return f"{sign} {_number(row['target'], row['unit'])}"


def format_table(data: dict[str, Any]) -> str:
    """The one table: figure, size, baseline, ratio, range, target, met."""
    head = ("figure", "size", "baseline", "ratio", "range", "target", "met")
    cells = []
    for row in data["rows"]:
        if row.get("skipped"):
            met = "skip"
            spread = "-"
        else:
            met = {True: "yes", False: "NO", None: "-"}[row["met"]]
            low, high = row["range"]
            spread = f"{_number(low, row['unit'])} .. {_number(high, row['unit'])}"
        cells.append(
            (
                row["figure"],
                row["size"] or "-",
                row["baseline"],
                _number(row["ratio"], row["unit"]),
                spread,
                _target(row),
                met,
            )
        )
    widths = [max(len(str(c[i])) for c in (head, *cells)) for i in range(len(head))]
    lines = [
        f"{'quick' if data['quick'] else 'full'} run: median and range of "
        f"{data['repeat']} interleaved repetitions per figure, {data['seconds']:.0f} s",
        "",
        "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip(),
        "  ".join("-" * w for w in widths),
    ]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(cell, widths, strict=True)).rstrip()
              for cell in cells]  # fmt: skip
    skipped = [r for r in data["rows"] if r.get("skipped")]
    if skipped:
        lines += ["", "skipped:"]
        lines += [f"  {r['figure']}: {r['skipped']}" for r in skipped]
    return "\n".join(lines)


def run_bench_table(args: argparse.Namespace) -> int:
    """``statecraft bench [--quick | --full] [--all]``: the one table, or its JSON envelope."""
    from statecraft.cli.envelope import emit

    data = measure_table(
        repeat=args.repeat if args.repeat is not None else MIN_REPEAT,
        quick=not args.full,
        slow=args.all,
        directory=args.dir,
        max_mib=args.max_mib,
        only=args.only,
    )
    return emit("bench", as_json=args.json, data=data, text=format_table(data))
