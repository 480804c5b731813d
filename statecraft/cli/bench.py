"""Benchmarks behind ``statecraft bench save`` and ``statecraft bench engine`` (DESIGN.md §7).

Every number is measured in one process against in-process baselines, so the *ratios* are
meaningful on a noisy machine even when the absolute throughputs are not:

- ``save``: raw sequential write + fsync of the state's bytes (the physical limit),
  ``torch.save`` + fsync + rename (what users do by hand), and a real :class:`Checkpointer`
  save; then ``torch.load`` (plain and ``mmap=True``) against :meth:`Checkpointer.resume`, and
  the resume's peak RSS measured in a fresh subprocess.
- ``engine``: microseconds per transition of :class:`~statecraft.engine.Machine` on a chain of
  no-op effects, against a bare Python call loop, and the engine's share of one full ``save``
  machine run over an in-memory :class:`~statecraft.storage.SimWorld`.

Targets (DESIGN.md §7): save >= 0.9x raw; resume peak RSS increase <= 1.2x the state size.
Nothing here asserts a speed; tests only check the shape of the output.

Example:
    >>> from statecraft.cli.bench import measure_engine
    >>> measure_engine(transitions=200)["chains"][0]["us_per_transition"] > 0
    True
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from statecraft.errors import ConfigError, ConfigIssue, StatecraftError

__all__ = [
    "RESUME_RSS_TARGET",
    "SAVE_RAW_TARGET",
    "measure_engine",
    "measure_save",
    "run_bench_engine",
    "run_bench_save",
]

SAVE_RAW_TARGET = 0.9  # statecraft save throughput / raw write + fsync (DESIGN.md §7)
RESUME_RSS_TARGET = 1.2  # resume peak RSS increase / state size (DESIGN.md §7)
_PARTS = 16  # the benchmark model holds this many equal float32 parameters
_CHAIN_LENGTHS = (4, 16, 64)  # engine chains: states per run
_GB = 1e9
_MIB = 1 << 20


def _check_positive(source: str, **values: int) -> None:
    issues = [
        ConfigIssue(f"--{name.replace('_', '-')}", value, "a positive integer")
        for name, value in values.items()
        if isinstance(value, bool) or not isinstance(value, int) or value < 1
    ]
    if issues:
        raise ConfigError(issues, source=source)


# ------------------------------------------------------------------------------- helpers
def _best(samples: Sequence[float]) -> float:
    return min(samples)


def _rate(nbytes: int, seconds: float) -> float:
    """GB/s (10^9 bytes per second)."""
    return nbytes / seconds / _GB if seconds > 0 else float("inf")


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def _scratch(root: str, name: str) -> Iterator[str]:
    """A fresh directory under ``root``, removed afterwards so the disk does not fill."""
    path = tempfile.mkdtemp(prefix=f"{name}-", dir=root)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def _bench_root(directory: str | None) -> Iterator[str]:
    if directory is None:
        with tempfile.TemporaryDirectory(prefix="statecraft-bench-") as root:
            yield root
        return
    os.makedirs(directory, exist_ok=True)
    with _scratch(os.path.abspath(directory), "statecraft-bench") as root:
        yield root


def _build_model(size_mib: int, *, fill: bool) -> Any:
    """A module holding ``_PARTS`` equal float32 parameters, ``size_mib`` MiB in all, every
    page touched (random values when ``fill``, zeros otherwise)."""
    import torch

    numel = max(1, size_mib * _MIB // 4 // _PARTS)
    generator = torch.Generator().manual_seed(0)
    params = []
    for _ in range(_PARTS):
        tensor = torch.empty(numel, dtype=torch.float32)
        if fill:
            tensor.uniform_(-1.0, 1.0, generator=generator)
        else:
            tensor.zero_()
        params.append(torch.nn.Parameter(tensor))
    return torch.nn.ParameterList(params)


def _state_bytes(model: Any) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _checkpointer(output_root: str, model: Any, *, resume: str) -> Any:
    import torch

    from statecraft import CheckpointConfig, Checkpointer, RunIdentity

    config = CheckpointConfig.from_dict(
        {"resume": resume, "save_every": 0, "save_async": False, "keep_optim_last": 0}
    )
    ckpt = Checkpointer(config, run=RunIdentity("bench", "save", "run"), output_root=output_root)
    ckpt.track(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    return ckpt


# ---------------------------------------------------------------------------- save: parts
def _raw_write(model: Any, directory: str) -> float:
    """Seconds to write the tensors' bytes to a new file, fsync and close it."""
    views = [memoryview(p.detach().numpy()).cast("B") for p in model.parameters()]
    path = os.path.join(directory, "raw.bin")
    started = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        for view in views:
            while view:
                view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    seconds = time.perf_counter() - started
    os.unlink(path)
    return seconds


def _torch_save(model: Any, directory: str) -> tuple[float, int]:
    """Seconds for ``torch.save`` to a temporary name + fsync + rename + directory fsync."""
    import torch

    state = model.state_dict()
    tmp, final = os.path.join(directory, "model.pt.tmp"), os.path.join(directory, "model.pt")
    started = time.perf_counter()
    torch.save(state, tmp)
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, final)
    _fsync_dir(directory)
    seconds = time.perf_counter() - started
    size = os.path.getsize(final)
    os.unlink(final)
    return seconds, size


def _statecraft_save(model: Any, output_root: str) -> tuple[float, Any]:
    """Seconds for one real ``Checkpointer.save`` into a fresh attempt; and its report."""
    from statecraft import Outcome

    ckpt = _checkpointer(output_root, model, resume="off")
    ckpt.record(Outcome.APPLIED)  # step 1: a real iteration, not the initial state
    started = time.perf_counter()
    report = ckpt.save()
    seconds = time.perf_counter() - started
    if report is None:  # pragma: no cover - single process is rank 0
        raise StatecraftError("bench: Checkpointer.save returned no report on rank 0")
    return seconds, report


def _traced_resume(ckpt: Any) -> tuple[Any, list[tuple[str, float]]]:
    """``ckpt.resume()`` and the resume machine's effects with their durations."""
    result = ckpt.resume()
    effects = [(e.effect, e.duration_s) for e in ckpt.last_resume_run.trace]
    return result, effects


def _statecraft_resume(output_root: str, size_mib: int) -> tuple[float, list[tuple[str, float]]]:
    model = _build_model(size_mib, fill=False)
    ckpt = _checkpointer(output_root, model, resume="auto")
    started = time.perf_counter()
    result, effects = _traced_resume(ckpt)
    seconds = time.perf_counter() - started
    if not result.resumed:
        raise StatecraftError(f"bench: resume did not load the saved checkpoint ({result.reason})")
    return seconds, effects


def _torch_load(path: str, size_mib: int, *, mmap: bool) -> tuple[float, list[tuple[str, float]]]:
    import torch

    model = _build_model(size_mib, fill=False)
    started = time.perf_counter()
    state = torch.load(path, weights_only=True, mmap=mmap, map_location="cpu")
    model.load_state_dict(state)
    seconds = time.perf_counter() - started
    del state
    return seconds, []


def _evict(directory: str) -> bool:
    """Drop the cached pages of every file under ``directory`` (clean after their fsync), so
    the next load reads the disk; False where the OS offers no way to do it."""
    if not hasattr(os, "posix_fadvise"):
        return False
    for dirpath, _, files in os.walk(directory):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
    return True


# ------------------------------------------------------------------------ save: peak RSS
def _proc_status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux ``clear_refs`` 5); False when unavailable."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
    except OSError:
        return False
    return _proc_status_kib("VmHWM") is not None


def _maxrss_kib() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak  # macOS reports bytes


def _resume_rss_child(output_root: str, size_mib: int) -> dict[str, Any]:
    """Run in a fresh process: build the model, reset the peak RSS, resume, read the peak.

    Returns:
        ``{"method", "state_bytes", "baseline_bytes", "peak_bytes", "increase_bytes"}``.
    """
    model = _build_model(size_mib, fill=False)
    ckpt = _checkpointer(output_root, model, resume="auto")
    gc.collect()
    method = "clear_refs"
    if _reset_peak_rss():
        baseline_kib = _proc_status_kib("VmRSS") or 0
    else:
        method = "ru_maxrss"
        baseline_kib = _maxrss_kib()
    result = ckpt.resume()
    if not result.resumed:
        raise StatecraftError(f"bench: resume did not load the saved checkpoint ({result.reason})")
    peak_kib = (_proc_status_kib("VmHWM") if method == "clear_refs" else None) or _maxrss_kib()
    return {
        "method": method,
        "state_bytes": _state_bytes(model),
        "baseline_bytes": baseline_kib * 1024,
        "peak_bytes": peak_kib * 1024,
        "increase_bytes": max(0, peak_kib - baseline_kib) * 1024,
    }


def _resume_rss(output_root: str, size_mib: int) -> dict[str, Any]:
    code = (
        "import json, sys; from statecraft.cli.bench import _resume_rss_child; "
        "print(json.dumps(_resume_rss_child(sys.argv[1], int(sys.argv[2]))))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, output_root, str(size_mib)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise StatecraftError(
            f"bench: the resume RSS subprocess failed (exit {proc.returncode}): "
            f"{proc.stderr.strip()[-2000:]}"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------- save: main
def measure_save(*, size_mib: int = 1024, directory: str | None = None, repeat: int = 2) -> dict:
    """Measure save / load throughput and resume peak RSS of a ``size_mib`` MiB state.

    Each throughput is the best of ``repeat`` runs; files are removed after each run.

    Args:
        size_mib: state size in MiB (16 equal float32 parameters, SGD without state).
        directory: where to write (a temporary directory inside it; default: the system's).
        repeat: runs per measurement.

    Returns:
        a dict with ``save``, ``load``, ``resume_rss`` and ``ratios`` sections (see README).

    Raises:
        ConfigError: ``size_mib`` or ``repeat`` is not a positive integer.
    """
    _check_positive("statecraft bench save", size_mib=size_mib, repeat=repeat)
    model = _build_model(size_mib, fill=True)
    state_bytes = _state_bytes(model)
    with _bench_root(directory) as root:
        raw = []
        for _ in range(repeat):
            with _scratch(root, "raw") as d:
                raw.append(_raw_write(model, d))
        tsave, tsave_bytes = [], 0
        for _ in range(repeat):
            with _scratch(root, "torch-save") as d:
                seconds, tsave_bytes = _torch_save(model, d)
                tsave.append(seconds)
        best_sc: tuple[float, Any] | None = None
        for i in range(repeat):
            keep = i == repeat - 1  # the last checkpoint stays for the load measurements
            out = tempfile.mkdtemp(prefix="statecraft-save-", dir=root)
            try:
                seconds, report = _statecraft_save(model, out)
            except BaseException:
                shutil.rmtree(out, ignore_errors=True)
                raise
            if best_sc is None or seconds < best_sc[0]:
                best_sc = (seconds, report)
            if not keep:
                shutil.rmtree(out, ignore_errors=True)
        saved_root, last_report = out, report
        del model
        gc.collect()
        model_pt = os.path.join(last_report.location, "model.pt")
        loaders: dict[str, Callable[[], tuple[float, list[tuple[str, float]]]]] = {
            "torch_load": lambda: _torch_load(model_pt, size_mib, mmap=False),
            "torch_load_mmap": lambda: _torch_load(model_pt, size_mib, mmap=True),
            "statecraft_resume": lambda: _statecraft_resume(saved_root, size_mib),
        }
        loads: dict[str, dict[str, Any]] = {name: {} for name in loaders}
        try:
            for cache in ("warm", "cold"):  # warm first: the save left the files cached
                for name, load in loaders.items():
                    runs = []
                    for _ in range(repeat):
                        if cache == "cold" and not _evict(saved_root):
                            break
                        runs.append(load())
                        gc.collect()
                    loads[name][cache] = _load_row(state_bytes, runs) if runs else None
            rss = _resume_rss(saved_root, size_mib)
        finally:
            shutil.rmtree(saved_root, ignore_errors=True)

    sc_seconds, sc_report = best_sc
    raw_gbs = _rate(state_bytes, _best(raw))
    tsave_gbs = _rate(tsave_bytes, _best(tsave))
    sc_gbs = _rate(sc_report.bytes_written, sc_seconds)

    def load_ratio(cache: str, baseline: str) -> float | None:
        resume, base = loads["statecraft_resume"][cache], loads[baseline][cache]
        return resume["gb_per_s"] / base["gb_per_s"] if resume and base else None

    return {
        "size_mib": size_mib,
        "state_bytes": state_bytes,
        "repeat": repeat,
        "save": {
            "raw_write_fsync": {"seconds": _best(raw), "gb_per_s": raw_gbs},
            "torch_save_fsync_rename": {
                "seconds": _best(tsave),
                "bytes": tsave_bytes,
                "gb_per_s": tsave_gbs,
            },
            "statecraft": {
                "seconds": sc_seconds,
                "bytes": sc_report.bytes_written,
                "gb_per_s": sc_gbs,
                "machine_seconds": sc_report.seconds,
                "effects": [{"effect": n, "seconds": s} for n, s in sc_report.effects],
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
            "save_vs_torch_save": sc_gbs / tsave_gbs,
            "resume_vs_torch_load": load_ratio("warm", "torch_load"),
            "resume_vs_torch_load_mmap": load_ratio("warm", "torch_load_mmap"),
            "resume_vs_torch_load_cold": load_ratio("cold", "torch_load"),
            "resume_vs_torch_load_mmap_cold": load_ratio("cold", "torch_load_mmap"),
            "resume_rss_increase": rss["increase_bytes"] / rss["state_bytes"],
        },
    }


def _load_row(state_bytes: int, runs: list[tuple[float, list[tuple[str, float]]]]) -> dict:
    seconds, effects = min(runs, key=lambda r: r[0])
    row: dict[str, Any] = {"seconds": seconds, "gb_per_s": _rate(state_bytes, seconds)}
    if effects:
        verify = sum(s for name, s in effects if name.startswith("verify"))
        row["verify_seconds"] = verify
        row["verify_share"] = verify / seconds if seconds > 0 else 0.0
        row["effects"] = [{"effect": n, "seconds": s} for n, s in effects]
    return row


def _verdict(ok: bool) -> str:
    return "ok" if ok else "BELOW TARGET"


def _ratio_text(value: float | None) -> str:
    return "   n/a" if value is None else f"{value:6.2f}"


def format_save(data: dict) -> str:
    """The human table of :func:`measure_save`'s result."""
    s, ld, rss, r = data["save"], data["load"], data["resume_rss"], data["ratios"]
    sc = s["statecraft"]
    lines = [
        f"state: {data['size_mib']} MiB float32 in {_PARTS} parameters, best of {data['repeat']}",
        "",
        f"{'save':<38}{'seconds':>9}{'GB/s':>9}",
    ]
    for name, row in (
        ("raw write + fsync", s["raw_write_fsync"]),
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
        f"resume peak RSS ({rss['method']}): +{rss['increase_bytes'] / _MIB:.0f} MiB over a "
        f"{rss['baseline_bytes'] / _MIB:.0f} MiB baseline (absolute peak "
        f"{rss['peak_bytes'] / _MIB:.0f} MiB)",
        "",
        "ratios:",
        f"  save / raw write                 {r['save_vs_raw']:6.2f}  (target >= "
        f"{SAVE_RAW_TARGET}: {_verdict(r['save_vs_raw'] >= SAVE_RAW_TARGET)})",
        f"  save / torch.save                {r['save_vs_torch_save']:6.2f}",
        f"  resume / torch.load        warm  {_ratio_text(r['resume_vs_torch_load'])}"
        f"   cold {_ratio_text(r['resume_vs_torch_load_cold'])}",
        f"  resume / torch.load(mmap)  warm  {_ratio_text(r['resume_vs_torch_load_mmap'])}"
        f"   cold {_ratio_text(r['resume_vs_torch_load_mmap_cold'])}",
        f"  resume RSS increase / state      {r['resume_rss_increase']:6.2f}  (target <= "
        f"{RESUME_RSS_TARGET}: {_verdict(r['resume_rss_increase'] <= RESUME_RSS_TARGET)})",
    ]
    return "\n".join(lines)


def run_bench_save(args: argparse.Namespace) -> int:
    """``statecraft bench save``: print :func:`measure_save` as a table or the JSON envelope."""
    from statecraft.cli.envelope import emit

    data = measure_save(size_mib=args.size_mib, directory=args.dir, repeat=args.repeat)
    return emit("bench save", as_json=args.json, data=data, text=format_save(data))


# -------------------------------------------------------------------------------- engine
def _chain_machine(length: int) -> Any:
    from statecraft.engine import Bindings, Machine, parse_table

    states: dict[str, dict[str, Any]] = {f"s{i}": {} for i in range(length)}
    states[f"s{length}"] = {"terminal": True}
    transitions = [{"from": f"s{i}", "do": "noop", "to": f"s{i + 1}"} for i in range(length)]
    table = parse_table(
        {"name": f"chain{length}", "initial": "s0", "states": states, "transitions": transitions},
        source=f"<bench chain of {length}>",
    )
    return Machine(table, Bindings(effects={"noop": _noop}))


def _noop(ctx: Any) -> None:
    return None


def _call_loop(calls: int) -> float:
    """Seconds for ``calls`` bare calls of a no-op function in a Python loop."""
    fn, ctx = _noop, object()
    started = time.perf_counter()
    for _ in range(calls):
        fn(ctx)
    return time.perf_counter() - started


def _sim_save_runs(runs: int) -> dict[str, Any]:
    """Full ``save`` machine runs over an in-memory ``SimWorld`` with tiny payloads: the
    observation, then the run, whose time outside the effects is the engine's."""
    import torch

    from statecraft.checkpoint.machines import load_machine
    from statecraft.checkpoint.transactions.save import SaveContext, full_save_plan
    from statecraft.storage import SimWorld

    machine = load_machine("save")
    tiny = {"w": torch.zeros(4)}
    payloads: dict[str, Callable[[], Any]] = {
        "model.pt": lambda: tiny,
        "optim.pt": lambda: {"state": {}, "param_groups": []},
        "trainer.pt": lambda: {"optimizer_step": 1},
    }
    wall, observe, effects, transitions = 0.0, 0.0, 0.0, 0
    for _ in range(runs):
        ctx = SaveContext(
            store=SimWorld().local_store("/ckpt"),
            plan=full_save_plan(1, with_data=False),
            payloads=payloads,
        )
        started = time.perf_counter()
        label = machine.observe(ctx)  # what Machine.recover does, with the observation timed
        observed = time.perf_counter()
        result = machine.run(ctx, start=machine.table.recover[label], observed=label)
        ended = time.perf_counter()
        result.raise_for_failure()
        observe += observed - started
        wall += ended - observed
        effects += sum(e.duration_s for e in result.trace)
        transitions += len(result.trace)
    return {
        "runs": runs,
        "transitions_per_run": transitions // runs,
        "observe_us_per_run": 1e6 * observe / runs,
        "us_per_run": 1e6 * wall / runs,
        "effects_us_per_run": 1e6 * effects / runs,
        "engine_us_per_run": 1e6 * (wall - effects) / runs,
        "engine_us_per_transition": 1e6 * (wall - effects) / transitions,
        "engine_share": (wall - effects) / wall if wall > 0 else 0.0,
    }


def measure_engine(*, transitions: int = 20000, sim_runs: int | None = None) -> dict:
    """Engine overhead per transition (no-op chains) and per full simulated ``save`` run.

    Args:
        transitions: transitions to run per chain length.
        sim_runs: full ``save`` runs over a ``SimWorld`` (default: ``transitions // 100``,
            at least 3).

    Raises:
        ConfigError: ``transitions`` is not a positive integer.
    """
    _check_positive("statecraft bench engine", transitions=transitions)
    sim_runs = sim_runs if sim_runs is not None else max(3, transitions // 100)
    bare_s = min(_call_loop(transitions) for _ in range(3))
    bare_us = 1e6 * bare_s / transitions
    chains = []
    for length in _CHAIN_LENGTHS:
        machine = _chain_machine(length)
        runs = max(1, transitions // length)
        ctx = object()
        machine.run(ctx)  # warm up
        started = time.perf_counter()
        for _ in range(runs):
            machine.run(ctx)
        seconds = time.perf_counter() - started
        done = runs * length
        us = 1e6 * seconds / done
        chains.append(
            {
                "states": length,
                "runs": runs,
                "transitions": done,
                "us_per_transition": us,
                "us_per_run": 1e6 * seconds / runs,
                "vs_bare_call": us / bare_us if bare_us > 0 else float("inf"),
            }
        )
    return {
        "transitions": transitions,
        "bare_call_us": bare_us,
        "chains": chains,
        "sim_save": _sim_save_runs(sim_runs),
    }


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


def run_bench_engine(args: argparse.Namespace) -> int:
    """``statecraft bench engine``: print :func:`measure_engine` as a table or JSON."""
    from statecraft.cli.envelope import emit

    data = measure_engine(transitions=args.transitions)
    return emit("bench engine", as_json=args.json, data=data, text=format_engine(data))
