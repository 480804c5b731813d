"""Tests of ``examples/slurm/train.sbatch`` without Slurm: it parses, and its USR1 trap writes
the sentinel while the launcher runs in the background, and the script ends with the
launcher's status (requeueing itself after a clean stop)."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "examples" / "slurm" / "train.sbatch"
SENTINEL = "SIGUSR1_RECEIVED"

# A stand-in for srun: it says it started, then waits for the sentinel (as a training process
# polls it at each step boundary) and exits with $FAKE_STATUS; it runs at most 20 s.
FAKE_SRUN = """#!/bin/bash
echo "$@" > "$SLURM_LOG_DIR/srun.args"
touch "$SLURM_LOG_DIR/srun.started"
for _ in $(seq 200); do
    if [ -e "$SLURM_LOG_DIR/SIGUSR1_RECEIVED" ]; then exit "${FAKE_STATUS:-0}"; fi
    sleep 0.1
done
exit 99
"""
# A stand-in for scontrol: records its arguments (``show hostnames`` prints localhost).
FAKE_SCONTROL = """#!/bin/bash
if [ "$1" = show ]; then echo localhost; exit 0; fi
echo "$@" >> "$SLURM_LOG_DIR/scontrol.calls"
"""


def _tool(directory: Path, name: str, text: str) -> None:
    path = directory / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _start(tmp_path: Path, **extra: str) -> tuple[subprocess.Popen[bytes], Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _tool(bin_dir, "srun", FAKE_SRUN)
    _tool(bin_dir, "scontrol", FAKE_SCONTROL)
    logs = tmp_path / "slurm-logs"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "SHARED_DIR": str(tmp_path / "shared"),
        "SLURM_LOG_DIR": str(logs),
        "SLURM_JOB_ID": "4242",
        **extra,
    }
    proc = subprocess.Popen(["bash", str(TEMPLATE)], env=env, cwd=REPO)
    deadline = time.monotonic() + 10
    while not (logs / "srun.started").exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            proc.wait()
            pytest.fail(f"the stand-in srun did not start (script status {proc.returncode})")
        time.sleep(0.02)
    return proc, logs


class TestSlurmTemplate:
    def test_it_parses_and_asks_for_the_signal_and_the_requeue(self):
        """``bash -n`` accepts the template, which requests B:SIGUSR1@600 and --requeue."""
        done = subprocess.run(["bash", "-n", str(TEMPLATE)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        text = TEMPLATE.read_text()
        assert "#SBATCH --signal=B:SIGUSR1@600" in text
        assert "#SBATCH --requeue" in text
        assert 'trap \'touch "$SLURM_LOG_DIR/SIGUSR1_RECEIVED"' in text
        assert text.count('wait "$launcher"') == 2

    def test_usr1_to_the_shell_writes_the_sentinel_and_the_script_exits_0(self, tmp_path):
        """SIGUSR1 to the batch shell creates the sentinel while the launcher runs in the
        background; the launcher sees it and exits 0, the script exits 0 and requeues itself."""
        proc, logs = _start(tmp_path)
        assert not (logs / SENTINEL).exists()
        proc.send_signal(signal.SIGUSR1)
        assert proc.wait(timeout=20) == 0
        assert (logs / SENTINEL).is_file()
        assert (logs / "scontrol.calls").read_text().split() == ["requeue", "4242"]
        assert "torchrun" in (logs / "srun.args").read_text()

    def test_the_launchers_failure_is_the_scripts_status_and_nothing_is_requeued(self, tmp_path):
        """A launcher that exits 3 after the stop makes the script exit 3, with no requeue."""
        proc, logs = _start(tmp_path, FAKE_STATUS="3")
        proc.send_signal(signal.SIGUSR1)
        assert proc.wait(timeout=20) == 3
        assert (logs / SENTINEL).is_file()
        assert not (logs / "scontrol.calls").exists()

    def test_a_missing_shared_dir_is_refused_by_name(self, tmp_path):
        """Without SHARED_DIR the script stops before launching anything, naming the variable."""
        env = {k: v for k, v in os.environ.items() if k not in ("SHARED_DIR", "SLURM_LOG_DIR")}
        done = subprocess.run(
            ["bash", str(TEMPLATE)], env=env, cwd=tmp_path, capture_output=True, text=True
        )
        assert done.returncode != 0
        assert "set SHARED_DIR to a directory on the shared filesystem" in done.stderr
