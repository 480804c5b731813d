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

    from statecraft.checkpoint.stop.records import DONE_FILE
    from statecraft.engine.crash import IoGate
    from statecraft.storage.filesystem import OsFilesystem

    out, signum, own = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "own"
    during = sys.argv[4] == "during"
    if own:  # the script's own handler, in place before resume()
        signal.signal(signum, lambda *_: os._exit(7))


    class SignalInsideDone(IoGate):  # the signal arrives while finalize() writes DONE.json
        def before_io(self, op, target):
            if during and op == "open_write" and DONE_FILE in target:
                print("signalled", flush=True)
                os.kill(os.getpid(), signum)
            return super().before_io(op, target)


    ckpt, objects = open_checkpointer(out, filesystem=OsFilesystem(gate=SignalInsideDone()))
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


def child(tmp_path: Path, signum: signal.Signals, handler: str, when: str) -> subprocess.Popen:
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_LOG_DIR", "WORLD_SIZE")}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")])
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(out), str(int(signum)), handler, when],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**env, "TMPDIR": str(tmp_path), "PYTHONUNBUFFERED": "1"},
    )


def assert_completed(written: bytes) -> None:
    record = json.loads(written)
    assert record["schema"] == DONE_SCHEMA
    assert (record["step"], record["preempted"], record["saved"]) == (3, None, True)
    assert record["checkpoint"] == "checkpoints/iter_000000003"


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
    proc = child(tmp_path, signum, handler, "after")
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
    assert_completed(written)


@pytest.mark.parametrize("handler", ["default", "own"])
def test_a_signal_while_finalize_writes_done_ends_the_process_once_done_is_whole(
    tmp_path: Path, handler: str
) -> None:
    """SIGTERM arrives while finalize() writes DONE.json (statecraft's flag-only handler is
    still in place): finalize() finishes DONE.json, restores the handlers and passes the
    signal on, so the process ends of it there (the default action: returncode -SIGTERM;
    the script's own handler: 7) before finalize() returns; DONE.json is whole and says the
    run completed."""
    proc = child(tmp_path, signal.SIGTERM, handler, "during")
    try:
        rest, errors = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)  # the process this test started
            proc.wait()
    expected = -signal.SIGTERM if handler == "default" else 7
    assert proc.returncode == expected, (rest, errors[-2000:])
    assert rest.splitlines() == ["signalled"]
    assert "passing it on to the handler in place before resume()" in errors
    assert_completed(done_path(tmp_path / "out").read_bytes())
