"""The human tables of ``bench save`` and ``bench engine`` (``--json`` prints the data)."""

from __future__ import annotations

from statecraft.cli.bench.common import MIB, PARTS
from statecraft.cli.bench.targets import (
    ASYNC_BLOCKING_TARGET,
    ASYNC_DURABLE_TARGET,
    ASYNC_STEP_TARGET,
    RESUME_LOAD_TARGET,
    RESUME_RSS_TARGET,
    SAVE_RAW_TARGET,
    SWEEP_BASELINE_TARGET,
    SWEEP_RAW_TARGET,
)

__all__ = ["format_async", "format_engine", "format_save", "format_sweep"]


def _verdict(ok: bool) -> str:
    return "ok" if ok else "BELOW TARGET"


def _ratio_text(value: float | None) -> str:
    return "   n/a" if value is None else f"{value:6.2f}"


def format_save(data: dict) -> str:
    """The human table of :func:`measure_save`'s result."""
    s, ld, rss, r = data["save"], data["load"], data["resume_rss"], data["ratios"]
    sc = s["statecraft"]
    lines = [
        f"state: {data['size_mib']} MiB float32 in {PARTS} parameters, best of {data['repeat']}",
        "",
        f"{'save':<38}{'seconds':>9}{'GB/s':>9}",
    ]
    for name, row in (
        ("raw write + fsync", s["raw_write_fsync"]),
        ("raw write + writeback + fsync", s["raw_write_writeback_fsync"]),
        ("torch.save + fsync + rename", s["torch_save_fsync_rename"]),
        ("statecraft Checkpointer.save", sc),
    ):
        lines.append(f"{name:<38}{row['seconds']:>9.3f}{row['gb_per_s']:>9.2f}")
    lines += [
        "",
        f"{'load (warm / cold page cache)':<38}{'seconds':>9}{'GB/s':>9}{'cold s':>9}{'GB/s':>9}",
    ]
    for name, key in (
        ("torch.load + load_state_dict", "torch_load"),
        ("torch.load(mmap) + load_state_dict", "torch_load_mmap"),
        ("statecraft Checkpointer.resume", "statecraft_resume"),
    ):
        cells = "".join(
            f"{row['seconds']:>9.3f}{row['gb_per_s']:>9.2f}" if row else f"{'n/a':>9}{'':>9}"
            for row in (ld[key]["warm"], ld[key]["cold"])
        )
        lines.append(f"{name:<38}{cells}")
    lines += ["", "save effects (seconds):"]
    lines += [f"  {e['effect']:<28}{e['seconds']:>9.3f}" for e in sc["effects"]]
    for cache in ("warm", "cold"):
        res = ld["statecraft_resume"][cache]
        if res is None:
            continue
        lines += [f"resume effects, {cache} cache (seconds):"]
        lines += [f"  {e['effect']:<28}{e['seconds']:>9.3f}" for e in res["effects"]]
        lines += [
            f"  digest verification: {res['verify_seconds']:.3f} s = "
            f"{100 * res['verify_share']:.0f}% of resume"
        ]
    lines += [
        "",
        f"resume peak RSS ({rss['method']}): +{rss['increase_bytes'] / MIB:.0f} MiB over a "
        f"{rss['baseline_bytes'] / MIB:.0f} MiB baseline (absolute peak "
        f"{rss['peak_bytes'] / MIB:.0f} MiB)",
        "",
        "ratios:",
        f"  save / raw write                 {r['save_vs_raw']:6.2f}  (target >= "
        f"{SAVE_RAW_TARGET}: {_verdict(r['save_vs_raw'] >= SAVE_RAW_TARGET)})",
        f"  save / raw write + writeback     {r['save_vs_raw_writeback']:6.2f}",
        f"  save / torch.save                {r['save_vs_torch_save']:6.2f}",
        f"  resume / torch.load        warm  {_ratio_text(r['resume_vs_torch_load'])}"
        f"   cold {_ratio_text(r['resume_vs_torch_load_cold'])}  (target >= "
        f"{RESUME_LOAD_TARGET}: {_load_verdict(r)})",
        f"  resume / torch.load(mmap)  warm  {_ratio_text(r['resume_vs_torch_load_mmap'])}"
        f"   cold {_ratio_text(r['resume_vs_torch_load_mmap_cold'])}",
        f"  resume RSS increase / state      {r['resume_rss_increase']:6.2f}  (target <= "
        f"{RESUME_RSS_TARGET}: {_verdict(r['resume_rss_increase'] <= RESUME_RSS_TARGET)})",
    ]
    spread = data["ratio_spread"]
    lines += ["", f"ratio spread over the {data['repeat']} paired runs (min .. max):"]
    for name, key in (
        ("save / raw write", "save_vs_raw"),
        ("save / raw write + writeback", "save_vs_raw_writeback"),
        ("resume / torch.load warm", "resume_vs_torch_load"),
        ("resume / torch.load cold", "resume_vs_torch_load_cold"),
    ):
        row = spread[key]
        text = "n/a" if row is None else f"{row['min']:.2f} .. {row['max']:.2f}"
        lines.append(f"  {name:<31}{text}")
    return "\n".join(lines)


def _load_verdict(r: dict) -> str:
    found = [r[k] for k in ("resume_vs_torch_load", "resume_vs_torch_load_cold") if r[k]]
    return _verdict(all(v >= RESUME_LOAD_TARGET for v in found))


def format_engine(data: dict) -> str:
    """The human table of :func:`measure_engine`'s result."""
    lines = [
        f"engine overhead: chains of no-op effects, ~{data['transitions']} transitions each",
        "",
        f"{'chain':<10}{'runs':>8}{'us/transition':>15}{'us/run':>10}{'x bare call':>13}",
    ]
    lines += [
        f"{c['states']:<10}{c['runs']:>8}{c['us_per_transition']:>15.2f}{c['us_per_run']:>10.1f}"
        f"{c['vs_bare_call']:>13.0f}"
        for c in data["chains"]
    ]
    sim = data["sim_save"]
    lines += [
        f"{'bare call':<10}{'':>8}{data['bare_call_us']:>15.3f}",
        "",
        f"save machine over SimWorld (tiny payloads, {sim['runs']} runs, "
        f"{sim['transitions_per_run']} transitions each):",
        f"  observe {sim['observe_us_per_run']:.0f} us, then run {sim['us_per_run']:.0f} us: "
        f"effects {sim['effects_us_per_run']:.0f} us, engine {sim['engine_us_per_run']:.0f} us "
        f"({sim['engine_us_per_transition']:.1f} us per transition, "
        f"{100 * sim['engine_share']:.1f}% of the run)",
    ]
    return "\n".join(lines)


def format_sweep(data: dict) -> str:
    """The human table of :func:`~statecraft.cli.bench.sweep.measure_save_sizes`'s result."""
    lines = [
        f"save sweep: model + AdamW state, median of {data['repeat']} interleaved runs",
        "baseline = the same files, each torch.save to a temporary + fsync + rename, then one "
        "directory fsync",
        "",
        f"{'size':<8}{'bytes':>14}{'statecraft ms':>15}{'baseline ms':>13}{'raw ms':>9}"
        f"{'save/base':>11}{'raw/save':>10}{'excess ms':>11}",
    ]
    for r in data["sizes"]:
        lines.append(
            f"{r['size']:<8}{r['baseline']['bytes']:>14,}{1e3 * r['statecraft']['median_s']:>15.1f}"
            f"{1e3 * r['baseline']['median_s']:>13.1f}{1e3 * r['raw_write']['median_s']:>9.1f}"
            f"{r['ratio_vs_baseline']:>11.2f}{r['raw_vs_save']:>10.2f}"
            f"{1e3 * r['excess_s']:>11.1f}"
        )
    fixed = data["fixed_cost"]

    def ms(value: float | None) -> str:
        return "n/a" if value is None else f"{1e3 * value:.1f} ms"

    worst = max(r["ratio_vs_baseline"] for r in data["sizes"])
    at_gib = [r["raw_vs_save"] for r in data["sizes"] if r["requested_bytes"] >= 1 << 30]
    lines += [
        "",
        f"fixed per-save cost: statecraft intercept {ms(fixed['statecraft_intercept_s'])}, "
        f"baseline intercept {ms(fixed['baseline_intercept_s'])}; excess at "
        f"{fixed['smallest_size']}: {ms(fixed['smallest_excess_s'])}",
        f"save / baseline: worst {worst:.2f} (target <= {SWEEP_BASELINE_TARGET}: "
        f"{_verdict(worst <= SWEEP_BASELINE_TARGET)})",
        "raw write / save at 1 GiB: "
        + (
            f"{min(at_gib):.2f} (target >= {SWEEP_RAW_TARGET}: "
            f"{_verdict(min(at_gib) >= SWEEP_RAW_TARGET)})"
            if at_gib
            else "not measured (add 1GiB to --sizes)"
        ),
        "",
        "save effects, median ms:",
    ]
    names = [e["effect"] for e in data["sizes"][0]["statecraft"]["effects"]]
    lines.append(f"  {'effect':<22}" + "".join(f"{r['size']:>10}" for r in data["sizes"]))
    for name in names:
        cells = []
        for r in data["sizes"]:
            found = [e["median_s"] for e in r["statecraft"]["effects"] if e["effect"] == name]
            cells.append(f"{1e3 * found[0]:>10.2f}" if found else f"{'-':>10}")
        lines.append(f"  {name:<22}" + "".join(cells))
    return "\n".join(lines)


def format_async(data: dict) -> str:
    """The human table of :func:`~statecraft.cli.bench.async_save.measure_async`'s result."""
    b, d, st, r = data["blocking"], data["durable"], data["step"], data["ratios"]

    def ms(row: dict | None) -> str:
        return f"{'n/a':>10}" if row is None else f"{1e3 * row['median_s']:>10.2f}"

    def pct(value: float | None) -> str:
        return "n/a" if value is None else f"{100 * value:+.1f}%"

    lines = [
        f"async save: model + AdamW state of {data['state_bytes'] / MIB:.1f} MiB, median of "
        f"{data['repeat']} runs ({data['cpus']} CPUs, {data['torch_threads']} torch threads)",
        "",
        f"{'training-thread blocking time':<44}{'ms':>10}{'x copy_':>9}",
    ]
    floor = b["copy_floor"]["median_s"]
    for name, key in (
        ("copy_ into preallocated buffers (floor)", "copy_floor"),
        ("clone()", "clone"),
        ("statecraft async save (2nd save on)", "statecraft"),
        ("torch.distributed.checkpoint.async_save", "dcp"),
    ):
        lines.append(f"{name:<44}{ms(b[key])}{b[key]['median_s'] / floor:>9.2f}")
    first = data["first_save"]
    lines += [
        f"  first statecraft save (allocates the staging buffers): "
        f"{1e3 * first['blocking_s']:.2f} ms",
        "",
        f"{'time to durable':<44}{'ms':>10}{'x sync':>9}",
    ]
    sync = d["sync"]["median_s"]
    for name, key in (
        ("synchronous save", "sync"),
        ("statecraft async save", "statecraft"),
        ("dcp.async_save", "dcp"),
    ):
        lines.append(f"{name:<44}{ms(d[key])}{d[key]['median_s'] / sync:>9.2f}")
    lines += [
        "",
        f"training step ({st['matmuls']} matmuls of {st['n']}x{st['n']}), median ms:",
        f"  no write {ms(st['baseline'])}   write on a thread {ms(st['thread'])}   "
        f"write in a writer process {ms(st['process'])}",
        f"  slowdown: thread {pct(r['step_slowdown_thread'])} (mean "
        f"{pct(r['step_slowdown_thread_mean'])}), process {pct(r['step_slowdown_process'])} "
        f"(mean {pct(r['step_slowdown_process_mean'])})",
        "",
        "targets:",
        f"  blocking / copy_ floor   {r['blocking_vs_copy_floor']:6.2f}  (target <= "
        f"{ASYNC_BLOCKING_TARGET}: "
        f"{_verdict(r['blocking_vs_copy_floor'] <= ASYNC_BLOCKING_TARGET)})",
        f"  step slowdown (thread)   {pct(r['step_slowdown_thread']):>6}  (target <= "
        f"{100 * ASYNC_STEP_TARGET:.0f}%: "
        f"{_verdict((r['step_slowdown_thread'] or 0.0) <= ASYNC_STEP_TARGET)})",
        f"  durable / sync save      {r['durable_vs_sync']:6.2f}  (target <= "
        f"{ASYNC_DURABLE_TARGET}: {_verdict(r['durable_vs_sync'] <= ASYNC_DURABLE_TARGET)})",
    ]
    return "\n".join(lines)
