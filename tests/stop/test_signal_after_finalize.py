"""A signal after ``finalize()`` returned, in a real subprocess: ``finalize()`` restored the
handlers that were in place before ``resume()``, so the signal's default action ends the
process (or the script's own handler runs), and ``DONE.json``, written atomically before
``finalize()`` returned, is whole, parses, and is unchanged."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from checkpoint_runs import RUN

from statecraft.checkpoint.stop.records import DONE_FILE, DONE_SCHEMA

pytestmark = pytest.mark.slow

TESTS_DIR = Path(__file__).resolve().parents[1]


def done_path(out: Path) -> Path:
    attempt = next(p for p in RUN.job_dir(out).iterdir() if p.is_dir())
    return attempt / DONE_FILE


CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path
    from checkpoint_runs import open_checkpointer
    import statecraft as sc

    out, signum, own = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "own"
    if own:  # the script's own handler, in place before resume()
        signal.signal(signum, lambda *_: os._exit(7))
    ckpt, objects = open_checkpointer(out)
    ckpt.resume()
    for _ in range(3):
        objects.step()
        ckpt.record(sc.Outcome.APPLIED)
        ckpt.step_end()
    ckpt.finalize()
    print("finalized", flush=True)
    end = time.monotonic() + 30  # the signal ends the process in this loop
    while time.monotonic() < end and not ckpt.run_context.termination.signals_received:
        time.sleep(0.01)
    print("survived", ckpt.run_context.termination.signals_received, flush=True)
    sys.exit(3)
    """
)


@pytest.mark.parametrize("handler", ["default", "own"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1])
def test_a_signal_after_finalize_returned_ends_the_process_and_done_is_unchanged(
    tmp_path: Path, signum: signal.Signals, handler: str
) -> None:
    """A real subprocess runs 3 steps and finalize() returns (DONE.json written, handlers
    restored); then SIGTERM / SIGUSR1 arrives. With no handler of the script's own, the
    default action kills the process (returncode -signum); with the script's own handler
    installed before resume(), that handler runs (it exits 7). Never 'survived': statecraft's
    flag-only handler no longer swallows it. DONE.json is whole, parses, and is byte for
    byte the one finalize() wrote."""
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_LOG_DIR", "WORLD_SIZE")}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")])
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(out), str(int(signum)), handler],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**env, "TMPDIR": str(tmp_path), "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line != "finalized\n":
            proc.kill()
            pytest.fail(f"the child did not finalize: {line!r} {proc.communicate()[1][-2000:]}")
        written = done_path(out).read_bytes()
        os.kill(proc.pid, signum)  # the process this test started
        rest, errors = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == (-signum if handler == "default" else 7), (rest, errors[-2000:])
    assert "survived" not in rest
    assert done_path(out).read_bytes() == written
    record = json.loads(written)
    assert record["schema"] == DONE_SCHEMA
    assert (record["step"], record["preempted"], record["saved"]) == (3, None, True)
    assert record["checkpoint"] == "checkpoints/iter_000000003"
