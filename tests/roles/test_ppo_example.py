"""``examples/ppo/``: the actor-critic with critic warm-up, killed with SIGKILL at random points
(during startup, between iterations, inside a boundary's writes) and relaunched with the
unchanged command, ends bit for bit where an uninterrupted run ends.

Every process writes only under ``tmp_path``.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "ppo" / "train.py"
ARGS = ["--iterations", "10", "--warmup", "3", "--envs", "8", "--steps", "16"]
FINAL = re.compile(r"^final ([0-9a-f]{64})$", re.MULTILINE)
START = re.compile(r"^start at iteration (\d+)", re.MULTILINE)
ITER = re.compile(r"^iter (\d+):")


def command(out: Path, *extra: str) -> list[str]:
    return [sys.executable, str(SCRIPT), "--out", str(out), *ARGS, *extra]


def env(tmp_path: Path) -> dict[str, str]:
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "TMPDIR": str(tmp_path), "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}


def finish(out: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command(out, *extra), env=env(tmp_path), capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip


@pytest.mark.slow
def test_sigkilled_runs_end_bit_for_bit_like_an_uninterrupted_one(tmp_path: Path) -> None:
    """Up to four SIGKILLs at random moments, then a run to the end: the final fingerprint
    (every weight and optimizer moment of both roles) equals the uninterrupted run's, and at
    least one relaunch resumed from a committed boundary."""
    clean = finish(tmp_path / "clean", tmp_path)
    assert clean.returncode == 0, clean.stderr
    (expected,) = FINAL.findall(clean.stdout)

    rng = random.Random(1234)
    out, starts, kills, reached = tmp_path / "killed", [], 0, 0
    for _ in range(4):
        target = rng.randint(reached + 1, 9)
        proc = subprocess.Popen(
            command(out, "--sleep", "0.05"), env=env(tmp_path), text=True,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        assert proc.stdout is not None
        for line in proc.stdout:  # kill once the target iteration's boundary was saved
            if m := START.match(line):
                starts.append(int(m.group(1)))
            if (m := ITER.match(line)) and int(m.group(1)) >= target:
                time.sleep(rng.uniform(0.0, 0.06))  # between iterations or inside a write
                os.kill(proc.pid, signal.SIGKILL)
                kills += 1
                reached = int(m.group(1))
                break
        proc.communicate(timeout=60)
        if reached >= 9:
            break
    last = finish(out, tmp_path)
    assert last.returncode == 0, last.stderr
    starts += [int(s) for s in START.findall(last.stdout)]
    (found,) = FINAL.findall(last.stdout)
    assert kills >= 1
    assert any(s > 0 for s in starts), starts
    assert found == expected


@pytest.mark.slow
def test_sigterm_saves_the_full_boundary_exits_zero_and_requeues_bit_exact(
    tmp_path: Path,
) -> None:
    """A real multi-role process (boundaries every 4 iterations) gets SIGTERM after iteration
    5: its step_end writes the emergency boundary iter 5 (both roles and _SUCCESS), DONE.json
    records the signal, it exits 0, and the requeued command resumes from iteration 5 and ends
    bit for bit where an uninterrupted run ends."""
    every = ("--save-every", "4")
    clean = finish(tmp_path / "clean", tmp_path, *every)
    assert clean.returncode == 0, clean.stderr
    (expected,) = FINAL.findall(clean.stdout)

    out = tmp_path / "stopped"
    proc = subprocess.Popen(
        command(out, *every, "--sleep", "0.5"), env=env(tmp_path), text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if (m := ITER.match(line)) and int(m.group(1)) == 5:
            os.kill(proc.pid, signal.SIGTERM)
            break
    rest, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "stopped at iteration 5" in rest, "".join(lines) + rest
    (boundary,) = out.glob("**/role_checkpoints/iter_000000005")
    assert (boundary / "_SUCCESS").is_file()
    assert {p.name for p in boundary.iterdir()} == {"_SUCCESS", "policy", "critic"}
    (done,) = out.glob("**/DONE.json")
    record = json.loads(done.read_text())
    assert record["step"] == 5
    assert record["preempted"] == "signal SIGTERM"

    requeued = finish(out, tmp_path, *every)
    assert requeued.returncode == 0, requeued.stderr
    assert START.findall(requeued.stdout) == ["5"]
    (found,) = FINAL.findall(requeued.stdout)
    assert found == expected
