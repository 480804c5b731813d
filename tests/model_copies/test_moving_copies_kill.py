"""A small RL-style loop with a moving old policy (refreshed every 3 updates) and a moving
reference (every 2), asynchronous saves at every step, SIGKILLed by the parent right after a
step and relaunched with the unchanged command: every step's loss and the final policy, old
policy and reference are bit-identical to an uninterrupted run's (both in child processes,
one torch thread)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow

STEPS = 8
HERE = Path(__file__).resolve().parent


def _launch(out: Path, result: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parents[1]), env.get("PYTHONPATH", "")])
    command = [sys.executable, str(HERE / "copies_loop.py"), str(out), str(STEPS), str(result)]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def _losses(lines: list[str]) -> dict[int, str]:
    return {int(w[1]): w[2] for w in (line.split() for line in lines) if w and w[0] == "step"}


def test_a_killed_rl_loop_with_moving_copies_resumes_bit_exact(tmp_path: Path) -> None:
    whole = _launch(tmp_path / "whole", tmp_path / "whole.pt")
    stdout, stderr = whole.communicate(timeout=300)
    assert whole.returncode == 0, stderr
    expected = _losses(stdout.splitlines())
    assert sorted(expected) == list(range(STEPS))

    killed = _launch(tmp_path / "split", tmp_path / "split.pt")
    assert killed.stdout is not None
    seen = []
    for line in killed.stdout:
        seen.append(line)
        if line.startswith("step 3 "):  # old was just derived at step 3; step 4 is running
            killed.send_signal(signal.SIGKILL)
            break
    killed.wait(timeout=60)
    assert killed.returncode == -signal.SIGKILL
    relaunched = _launch(tmp_path / "split", tmp_path / "split.pt")
    stdout, stderr = relaunched.communicate(timeout=300)
    assert relaunched.returncode == 0, stderr
    first = stdout.splitlines()[0].split()
    assert first[0] == "resumed"
    assert 1 <= int(first[1]) <= STEPS  # a committed checkpoint was adopted, not a fresh start
    assert {**_losses(seen), **_losses(stdout.splitlines())} == expected
    got = torch.load(tmp_path / "split.pt", weights_only=True)
    want = torch.load(tmp_path / "whole.pt", weights_only=True)
    assert got.keys() == want.keys() == {"model", "old", "ref"}
    for name in want:
        assert got[name].keys() == want[name].keys()
        assert all(torch.equal(got[name][k], want[name][k]) for k in want[name]), name
