"""The demo's kill reaches every rank: ``torchrun`` starts each worker in a session of its own,
so SIGKILL of the launcher's process group alone would leave the workers running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from statecraft.cli.demo.launch import _kill_group

_AGENT = """
import subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                          start_new_session=True)  # as torchrun starts a rank
open(sys.argv[1], "w").write(str(worker.pid))
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_kill_group_kills_a_worker_in_its_own_session(tmp_path: Path) -> None:
    """An agent whose worker leads its own session: after _kill_group both are dead (killing
    the agent's group alone leaves the worker alive, which the control kill shows)."""
    marker = tmp_path / "worker.pid"
    agent = subprocess.Popen(
        [sys.executable, "-c", _AGENT, str(marker)], start_new_session=True, text=True
    )
    deadline = time.monotonic() + 60
    while not marker.exists() or not marker.read_text():
        assert time.monotonic() < deadline, "the worker never started"
        time.sleep(0.05)
    worker = int(marker.read_text())
    try:
        assert _alive(worker)
        assert os.getpgid(worker) != agent.pid  # its own group, as under torchrun
        _kill_group(agent)  # type: ignore[arg-type]
        agent.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _alive(worker):
            assert time.monotonic() < deadline, f"worker {worker} survived the kill"
            time.sleep(0.05)
    finally:
        for pid in (worker, agent.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
