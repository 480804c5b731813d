"""``examples/ppo/``: the actor-critic with critic warm-up, killed with SIGKILL at random points
(during startup, between iterations, inside a boundary's writes) and relaunched with the
unchanged command, ends bit for bit where an uninterrupted run ends.

Every process writes only under ``tmp_path``.
"""

from __future__ import annotations

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
