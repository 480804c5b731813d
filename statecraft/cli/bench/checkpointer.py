"""The statecraft side of ``bench save``: one real ``Checkpointer.save``, a traced
``Checkpointer.resume`` with its effects' durations, and the resume's peak RSS measured in a
fresh subprocess."""

from __future__ import annotations

import gc
import json
import resource
import subprocess
import sys
import time
from typing import Any

from statecraft.cli.bench.common import build_model, checkpointer, state_bytes
from statecraft.errors import StatecraftError


def statecraft_save(model: Any, output_root: str) -> tuple[float, Any]:
    """Seconds for one real ``Checkpointer.save`` into a fresh attempt; and its report."""
    from statecraft import Outcome

    ckpt = checkpointer(output_root, model, resume="off")
    ckpt.record(Outcome.APPLIED)  # step 1: a real iteration, not the initial state
    started = time.perf_counter()
    report = ckpt.save()
    seconds = time.perf_counter() - started
    ckpt.close()  # release the writer lease: the resume measurements run in other processes
    if report is None:  # pragma: no cover - single process is rank 0
        raise StatecraftError("bench: Checkpointer.save returned no report on rank 0")
    return seconds, report


def _traced_resume(ckpt: Any) -> tuple[Any, list[tuple[str, float]]]:
    """``ckpt.resume()`` and the resume machine's effects with their durations."""
    result = ckpt.resume()
    effects = [(e.effect, e.duration_s) for e in ckpt.last_resume_run.trace]
    return result, effects


def statecraft_resume(output_root: str, size_mib: int) -> tuple[float, list[tuple[str, float]]]:
    model = build_model(size_mib, fill=False)
    ckpt = checkpointer(output_root, model, resume="auto")
    started = time.perf_counter()
    result, effects = _traced_resume(ckpt)
    seconds = time.perf_counter() - started
    ckpt.close()
    if not result.resumed:
        raise StatecraftError(f"bench: resume did not load the saved checkpoint ({result.reason})")
    return seconds, effects


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


def resume_rss_child(output_root: str, size_mib: int) -> dict[str, Any]:
    """Run in a fresh process: build the model, reset the peak RSS, resume, read the peak.

    Returns:
        ``{"method", "state_bytes", "baseline_bytes", "peak_bytes", "increase_bytes"}``.
    """
    model = build_model(size_mib, fill=False)
    ckpt = checkpointer(output_root, model, resume="auto")
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
        "state_bytes": state_bytes(model),
        "baseline_bytes": baseline_kib * 1024,
        "peak_bytes": peak_kib * 1024,
        "increase_bytes": max(0, peak_kib - baseline_kib) * 1024,
    }


def resume_rss(output_root: str, size_mib: int) -> dict[str, Any]:
    code = (
        "import json, sys; from statecraft.cli.bench.checkpointer import resume_rss_child; "
        "print(json.dumps(resume_rss_child(sys.argv[1], int(sys.argv[2]))))"
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
