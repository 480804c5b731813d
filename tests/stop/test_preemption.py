"""Preemption in real processes: a training subprocess (``statecraft.cli.demo_train``) is
stopped by the sentinel file, by SIGUSR1 and by SIGTERM; each exits 0 with the reason in
``DONE.json`` and an emergency checkpoint at the step it stopped, and the requeued (unchanged)
command resumes and finishes bit-identical to an uninterrupted run. A two-rank gloo run where
only rank 1 receives SIGTERM stops both ranks at the same step with one checkpoint.

Every process writes only under ``tmp_path`` (``TMPDIR`` and ``SLURM_LOG_DIR`` point there).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from statecraft.checkpoint.kernel.layout import LATEST_POINTER, parse_latest
from statecraft.checkpoint.resume.bindings import verify_checkpoint
from statecraft.checkpoint.stop.records import DONE_FILE, DONE_SCHEMA
from statecraft.cli.demo.compare import compare_checkpoints
from statecraft.cli.demo.disk import checkpoints_dir, committed_iterations
from statecraft.storage.local import LocalStore

pytestmark = pytest.mark.slow

STEPS = 30
SAVE_EVERY = 10
TRIGGER_STEP = 13  # the two-rank run: off the cadence, the emergency checkpoint is its own
STOP_AFTER = 4  # each single-process window is stopped on this many steps after its resume
STEP_SLEEP = 0.05  # after each step line, before the boundary: time for the parent to act
SENTINEL = "SIGUSR1_RECEIVED"
TIMEOUT_S = 120.0


def _command(out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "statecraft.cli.demo_train",
        "--out",
        str(out),
        "--steps",
        str(STEPS),
        "--save-every",
        str(SAVE_EVERY),
        "--step-sleep",
        str(STEP_SLEEP),
    ]


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_LOG_DIR", "WORLD_SIZE")}
    return {**env, "TMPDIR": str(tmp), "PYTHONUNBUFFERED": "1", **extra}


class Training:
    """One training process, its progress lines read on a thread; killed if it outlives the
    test (by the pid this object started)."""

    def __init__(self, command: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self._stderr = open(log, "w")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=env
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, line: str) -> None:
        """Read progress lines until ``line``; fail when the process ends first."""
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                got = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            if got is None:
                self._queue.put(None)
                pytest.fail(f"the process ended before {line!r}: {self.lines[-3:]}; {self.tail()}")
            self.lines.append(got)
            if got == line:
                return
        pytest.fail(f"no {line!r} within {TIMEOUT_S} s")

    def wait(self) -> int:
        """The exit status, after every progress line was read."""
        try:
            code = self.proc.wait(timeout=TIMEOUT_S)
        finally:
            if self.proc.poll() is None:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            self._stderr.close()
        while (got := self._queue.get(timeout=10)) is not None:
            self.lines.append(got)
        return code

    def tail(self) -> str:
        return " | ".join(self.log.read_text(errors="replace").strip().splitlines()[-8:])

    def find(self, kind: str) -> list[list[str]]:
        return [line.split(" ") for line in self.lines if line.split(" ")[0] == kind]


def _run_to_end(command: list[str], env: dict[str, str], log: Path) -> Training:
    training = Training(command, env, log)
    code = training.wait()
    assert code == 0, training.tail()
    return training


def _stopped(training: Training) -> tuple[int, str, str, float, str]:
    """(step, kind, path, seconds, reason) of the process's one ``stopped`` line."""
    stops = training.find("stopped")
    assert len(stops) == 1, training.lines[-5:]
    _, step, kind, path, seconds, *reason = stops[0]
    return int(step), kind, path, float(seconds), " ".join(reason)


def _done(run_dir: Path) -> dict:
    record = json.loads((run_dir / DONE_FILE).read_text())
    assert record["schema"] == DONE_SCHEMA
    return record


def _final(out: Path) -> Path:
    directory = checkpoints_dir(out)
    assert directory is not None
    return directory / f"iter_{STEPS:09d}"


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The final checkpoint of one uninterrupted single-process run of the same command."""
    tmp = tmp_path_factory.mktemp("reference")
    _run_to_end(_command(tmp / "out"), _env(tmp), tmp / "reference.log")
    return _final(tmp / "out")


def _sentinel(logs: Path, training: Training) -> None:
    (logs / SENTINEL).touch()


def _signal(number: signal.Signals) -> Callable[[Path, Training], None]:
    def send(logs: Path, training: Training) -> None:
        os.kill(training.proc.pid, number)  # the process this test started, by its pid

    return send


#: the three ways a window is stopped, in the order the test's windows meet them
TRIGGERS = (
    (_sentinel, "sentinel"),
    (_signal(signal.SIGUSR1), "signal SIGUSR1"),
    (_signal(signal.SIGTERM), "signal SIGTERM"),
)


class TestOneProcess:
    def test_sentinel_sigusr1_sigterm_each_save_exit_0_and_the_requeue_is_bit_exact(
        self, tmp_path: Path, reference: Path
    ) -> None:
        """Three windows of one run are stopped by the sentinel, SIGUSR1 and SIGTERM: each
        exits 0 with an emergency checkpoint at the step it stopped and the reason in
        DONE.json, and the next window (the unchanged command) resumes there; the fourth
        finishes, bit-identical to the uninterrupted run."""
        logs = tmp_path / "slurm-logs"
        logs.mkdir()
        out = tmp_path / "out"
        env = _env(tmp_path, SLURM_LOG_DIR=str(logs))
        resumed_at, previous = 0, None
        for window, (trigger, reason) in enumerate(TRIGGERS, start=1):
            log = tmp_path / f"window-{window}.log"
            training = Training(_command(out), env, log)
            training.wait_for(f"step {resumed_at + STOP_AFTER}")
            trigger(logs, training)
            assert training.wait() == 0, training.tail()
            assert training.find("resumed")[0][1] == str(resumed_at)
            if previous is not None:
                assert f"previous window ended at step {resumed_at}: preempted: {previous}" in (
                    log.read_text()
                )
            step = self._check_stop(training, out, logs, log, reason, resumed_at)
            resumed_at, previous = step, reason

        log = tmp_path / "window-4.log"
        requeued = _run_to_end(_command(out), env, log)
        resumed = requeued.find("resumed")
        assert resumed[0][1] == str(resumed_at)
        assert resumed[0][2].endswith(f"iter_{resumed_at:09d}")
        assert requeued.lines[-1] == f"done {STEPS}"
        assert not requeued.find("stopped")
        assert compare_checkpoints(reference, _final(out)) == []
        ckpt_dir = checkpoints_dir(out)
        assert ckpt_dir is not None
        done = _done(ckpt_dir.parent)
        assert (done["step"], done["preempted"]) == (STEPS, None)
        assert f"previous window ended at step {resumed_at}: preempted: signal SIGTERM" in (
            log.read_text()
        )

    @staticmethod
    def _check_stop(
        training: Training, out: Path, logs: Path, log: Path, reason: str, resumed_at: int
    ) -> int:
        """The stopped window's promises; returns the step it stopped at."""
        step, kind, path, seconds, said = _stopped(training)
        assert said == reason
        assert resumed_at + STOP_AFTER <= step < STEPS
        assert (kind, path) == ("checkpoint", f"checkpoints/iter_{step:09d}")
        assert seconds > 0
        assert training.lines[-1] == f"done {step}"  # finalize() after the stop saved nothing
        assert not [x for x in training.find("step") if int(x[1]) > step]
        ckpt_dir = checkpoints_dir(out)
        assert ckpt_dir is not None
        assert step in committed_iterations(ckpt_dir)
        assert verify_checkpoint(LocalStore(str(ckpt_dir)), step).iteration == step
        assert parse_latest((ckpt_dir / LATEST_POINTER).read_bytes()) == step
        done = _done(ckpt_dir.parent)
        assert (done["step"], done["preempted"], done["checkpoint"], done["saved"]) == (
            step,
            reason,
            path,
            True,
        )
        assert done["seconds_to_durable"] == pytest.approx(seconds, abs=1e-3)
        assert done["pid"] == training.proc.pid
        assert (
            f"stopping at step {step}: {reason}; emergency save checkpoint {path} durable in "
            in log.read_text()
        )
        # the sentinel, once handled, is consumed: the next window does not stop at once
        assert not (logs / SENTINEL).exists()
        assert (logs / f"{SENTINEL}.consumed").is_file()
        return step


# ------------------------------------------------------------------------------ two ranks
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ranks(out: Path, tmp: Path, window: str) -> list[Training]:
    """Two ranks of the command (torchrun's environment by hand: RANK, WORLD_SIZE,
    MASTER_ADDR, MASTER_PORT), in one gloo process group."""
    port = str(_free_port())
    return [
        Training(
            _command(out),
            _env(
                tmp,
                RANK=str(rank),
                LOCAL_RANK=str(rank),
                WORLD_SIZE="2",
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
            ),
            tmp / f"{window}-rank{rank}.log",
        )
        for rank in (0, 1)
    ]


def _all_exit_0(ranks: list[Training]) -> None:
    codes = [rank.wait() for rank in ranks]
    assert codes == [0, 0], [rank.tail() for rank in ranks]


def _two_rank_differences(single: Path, two: Path) -> list[str]:
    """Every difference between a two-rank checkpoint and the single-process one of the same
    step: both ranks train alike (the same seed, the same batches), so the model and
    optimizer files must be identical, and each rank's RNG streams and data cursor must be
    the single process's rank 0 ones; the rest of ``trainer.pt`` must be identical too."""
    import shutil

    import torch

    from statecraft.cli.demo.compare import _differences

    out = []
    for name in ("model.pt", "optim.pt"):
        a, b = two.parent / f"cmp-single-{name}", two.parent / f"cmp-two-{name}"
        for directory, source in ((a, single), (b, two)):
            directory.mkdir()
            shutil.copy(source / name, directory / name)
        out += compare_checkpoints(a, b)
    one_t, two_t = (torch.load(d / "trainer.pt", weights_only=True) for d in (single, two))
    one_d, two_d = (torch.load(d / "data.pt", weights_only=True) for d in (single, two))
    assert (two_t["rng"]["world_size"], two_d["world_size"]) == (2, 2)
    for rank in (0, 1):
        out += _differences(one_t["rng"]["ranks"][0], two_t["rng"]["ranks"][rank], f"rng{rank}")
        out += _differences(one_d["ranks"][0], two_d["ranks"][rank], f"data{rank}")
    rest = [{k: v for k, v in t.items() if k != "rng"} for t in (one_t, two_t)]
    return out + _differences(rest[0], rest[1], "trainer")


class TestTwoGlooRanks:
    def test_sigterm_to_rank_1_stops_both_at_one_step_and_the_requeue_is_exact(
        self, tmp_path: Path, reference: Path
    ) -> None:
        """Only rank 1 receives SIGTERM: both ranks stop at the same step with one emergency
        checkpoint, exit 0, DONE.json names the reason, and the requeued two ranks finish
        bit-identical to an uninterrupted run (both ranks train alike, so each rank's state is
        the single process's)."""
        out = tmp_path / "out"
        ranks = _ranks(out, tmp_path, "window-1")
        ranks[1].wait_for(f"step {TRIGGER_STEP}")
        os.kill(ranks[1].proc.pid, signal.SIGTERM)  # rank 1 only, the process we started
        _all_exit_0(ranks)
        stops = [_stopped(rank) for rank in ranks]
        step = stops[0][0]
        assert [(s[0], s[1], s[2], s[4]) for s in stops] == [
            (step, "checkpoint", f"checkpoints/iter_{step:09d}", "signal SIGTERM")
        ] * 2
        assert TRIGGER_STEP <= step < STEPS
        assert [rank.lines[-1] for rank in ranks] == [f"done {step}", f"done {step}"]
        ckpt_dir = checkpoints_dir(out)
        assert ckpt_dir is not None
        assert committed_iterations(ckpt_dir) == [10, step]
        assert verify_checkpoint(LocalStore(str(ckpt_dir)), step).iteration == step
        done = _done(ckpt_dir.parent)
        assert (done["step"], done["preempted"], done["saved"]) == (step, "signal SIGTERM", True)

        requeued = _ranks(out, tmp_path, "window-2")
        _all_exit_0(requeued)
        for rank in requeued:
            assert rank.find("resumed")[0][1] == str(step)
            assert rank.lines[-1] == f"done {STEPS}"
        assert _two_rank_differences(reference, _final(out)) == []
        assert _done(ckpt_dir.parent)["preempted"] is None


class TestTorchrun:
    def test_sigterm_to_torchrun_is_forwarded_and_both_ranks_stop_at_one_step(
        self, tmp_path: Path
    ) -> None:
        """SIGTERM to torchrun reaches both ranks (torchrun forwards it): they stop at the same
        step with one emergency checkpoint and DONE.json naming the signal; torchrun itself
        exits non-zero after a forwarded signal, as the docs say (DONE.json is the record)."""
        out = tmp_path / "out"
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node=2",
            f"--master-port={_free_port()}",  # not the default 29500: tests run in parallel
            "--shutdown-timeout=120",
            *_command(out)[1:],
        ]
        torchrun = Training(command, _env(tmp_path), tmp_path / "torchrun.log")
        torchrun.wait_for(f"step {TRIGGER_STEP}")
        os.kill(torchrun.proc.pid, signal.SIGTERM)  # torchrun, the process this test started
        assert torchrun.wait() != 0
        stops = {line for line in torchrun.lines if line.startswith("stopped ")}
        assert len(stops) == 1, torchrun.lines[-6:]  # both ranks printed the same line
        assert len([line for line in torchrun.lines if line.startswith("stopped ")]) == 2
        step, reason = int(stops.pop().split()[1]), "signal SIGTERM"
        assert torchrun.lines.count(f"done {step}") == 2
        ckpt_dir = checkpoints_dir(out)
        assert ckpt_dir is not None
        assert verify_checkpoint(LocalStore(str(ckpt_dir)), step).iteration == step
        done = _done(ckpt_dir.parent)
        assert (done["step"], done["preempted"], done["saved"]) == (step, reason, True)
