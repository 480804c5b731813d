"""Tests of the writer lease (``statecraft.checkpoint.fencing.lease``) and the save's fence.

Unit tests use the real filesystem (``LocalStore`` over ``tmp_path``) and a real second
process where a live owner is needed; the slow test starts two real training processes.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from checkpoint_runs import NoLockStore

from statecraft.checkpoint.facade.attempt_open import ensure_attempt
from statecraft.checkpoint.fencing.lease import (
    LEASE_NAME,
    LEASE_SCHEMA,
    LOCK_NAME,
    LeaseRecord,
    acquire_lease,
)
from statecraft.checkpoint.kernel.layout import LATEST_POINTER, MANIFEST_NAME, iter_dirname
from statecraft.checkpoint.kernel.machines import load_machine
from statecraft.checkpoint.save.bindings import SaveContext, full_save_plan
from statecraft.cli.demo import checkpoints_dir, compare_checkpoints
from statecraft.cli.demo_train import DEMO_RUN
from statecraft.errors import IterationCommittedError, WriterLeaseError
from statecraft.storage.local import LocalStore

HOLD_LOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(60)
"""


TRY_LOCK = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("locked")
except BlockingIOError:
    print("busy")
"""


def try_lock(path: Path) -> str:
    proc = subprocess.run([sys.executable, "-c", TRY_LOCK, str(path)], capture_output=True)
    return proc.stdout.decode().strip()


def tree_sha256(root: Path) -> dict[str, str]:
    """Every file under ``root``: relative path -> SHA-256 of its bytes."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def write_record(run: Path, *, pid: int, host: str = "", generation: int = 1) -> LeaseRecord:
    import socket

    record = LeaseRecord(
        LEASE_SCHEMA,
        f"other:{pid}:abc",
        host or socket.gethostname(),
        pid,
        generation,
        "2026-01-01T00:00:00+00:00",
    )
    (run / LEASE_NAME).write_bytes(record.encode())
    return record


def dead_pid() -> int:
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True
    )
    return int(proc.stdout)


def payloads(iteration: int, salt: int) -> dict:
    def make(name: str):
        return lambda: {"name": name, "t": torch.full((4,), float(iteration * 10 + salt))}

    return {n: make(n) for n in ("model.pt", "optim.pt", "trainer.pt")}


def save(store: LocalStore, iteration: int, *, lease=None, salt: int = 0):
    ctx = SaveContext(
        store=store,
        plan=full_save_plan(iteration, with_data=False),
        payloads=payloads(iteration, salt),
        lease=lease,
    )
    return load_machine("save").recover(ctx), ctx


@pytest.fixture
def run(tmp_path: Path) -> Path:
    path = tmp_path / "run"
    (path / "checkpoints").mkdir(parents=True)
    return path


class TestAcquire:
    def test_fresh_attempt_publishes_generation_one_at_first_save(self, run: Path) -> None:
        """A fresh attempt's lease is published (generation 1) by the first save, not before."""
        lease = acquire_lease(LocalStore(str(run)))
        assert not (run / LEASE_NAME).exists()
        result, _ = save(LocalStore(str(run / "checkpoints")), 2, lease=lease)
        result.raise_for_failure()
        record = json.loads((run / LEASE_NAME).read_text())
        assert record["schema"] == LEASE_SCHEMA
        assert (record["pid"], record["generation"]) == (os.getpid(), 1)

    def test_stale_lease_of_a_dead_pid_is_taken_over(
        self, run: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A record whose process is gone (its lock free) is taken over, logged, generation + 1."""
        old = write_record(run, pid=dead_pid(), generation=3)
        with caplog.at_level("WARNING", logger="statecraft.lease"):
            lease = acquire_lease(LocalStore(str(run)))
            lease.check()  # the first save's check publishes the takeover
        assert "is stale (its lock is free)" in caplog.text
        assert f"taking over the writer lease of owner {old.owner}" in caplog.text
        record = json.loads((run / LEASE_NAME).read_text())
        assert (record["generation"], record["pid"]) == (4, os.getpid())

    def test_dead_pid_without_a_lock_is_taken_over(self, run: Path) -> None:
        """Without an OS lock (a simulated store), a record whose PID is gone is taken over."""
        write_record(run, pid=dead_pid(), generation=1)
        store = LocalStore(str(run))
        lease = acquire_lease(NoLockStore(store))
        lease.check()
        assert json.loads((run / LEASE_NAME).read_text())["generation"] == 2

    def test_live_owner_is_refused_naming_it(self, run: Path) -> None:
        """A lock held by another live process refuses startup, naming host, PID and since."""
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD_LOCK, str(run / LOCK_NAME)], stdout=subprocess.PIPE
        )
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline() == b"locked\n"
            other = write_record(run, pid=holder.pid)
            before = tree_sha256(run)
            with pytest.raises(WriterLeaseError) as caught:
                acquire_lease(LocalStore(str(run)))
        finally:
            holder.kill()
            holder.wait()
        message = str(caught.value)
        assert (
            f"is being written by owner {other.owner} (host {other.host}, PID {holder.pid}"
            in message
        )
        assert "since 2026-01-01T00:00:00+00:00" in message
        assert "whose lock is held" in message
        assert "resume=off" in message
        assert caught.value.pid == holder.pid
        assert tree_sha256(run) == before

    def test_live_pid_without_a_lock_is_refused(self, run: Path) -> None:
        """Without an OS lock, a record whose PID is alive on this host refuses startup."""
        other = write_record(run, pid=os.getppid())
        with pytest.raises(WriterLeaseError, match=f"PID {other.pid}.*whose process is alive"):
            acquire_lease(NoLockStore(LocalStore(str(run))))

    def test_release_frees_the_attempt_for_another_process(self, run: Path) -> None:
        """The lock is held until release; then the record is gone and another process locks."""
        lease = acquire_lease(LocalStore(str(run)))
        lease.publish()
        assert try_lock(run / LOCK_NAME) == "busy"
        lease.release()
        assert not (run / LEASE_NAME).exists()
        assert try_lock(run / LOCK_NAME) == "locked"


class TestFence:
    def test_commit_after_the_lease_was_stolen_refuses(self, run: Path) -> None:
        """A save whose lease was taken over refuses before it commits; committed bytes stay."""
        store = LocalStore(str(run / "checkpoints"))
        lease = acquire_lease(NoLockStore(LocalStore(str(run))))
        save(store, 2, lease=lease)[0].raise_for_failure()
        before = tree_sha256(run / "checkpoints")
        thief = write_record(run, pid=12345, host="elsewhere", generation=2)
        result, _ctx = save(store, 4, lease=lease)
        assert result.failed
        error = result.error
        assert isinstance(error, WriterLeaseError)
        assert f"taken over by owner {thief.owner} (host elsewhere, PID 12345, generation 2" in str(
            error
        )
        assert "stop one of the two processes" in str(error)
        assert (run / "checkpoints" / LATEST_POINTER).read_bytes() == b"iter_000000002\n"
        after = tree_sha256(run / "checkpoints")
        assert {k: v for k, v in after.items() if k.startswith("iter_000000002")} == {
            k: v for k, v in before.items() if k.startswith("iter_000000002")
        }
        assert not (run / "checkpoints" / iter_dirname(4) / MANIFEST_NAME).exists()

    def test_component_write_into_a_committed_iteration_refuses(self, run: Path) -> None:
        """A component write into an iteration that gained a manifest refuses; its bytes stay."""
        store = LocalStore(str(run / "checkpoints"))
        ctx = SaveContext(
            store=store, plan=full_save_plan(4, with_data=False), payloads=payloads(4, 1)
        )
        save(store, 4, salt=0)[0].raise_for_failure()  # the "other writer" commits iter 4
        before = tree_sha256(run / "checkpoints")
        from statecraft.checkpoint.save import bindings
        bindings.stage_payloads(ctx)
        ctx.writer.prepare(ctx.plan, store)  # this save prepared before the other committed
        with pytest.raises(IterationCommittedError) as caught:
            bindings.write_components(ctx)
        assert "holds a manifest (another writer committed it)" in str(caught.value)
        assert "iter_000000004/model.pt" in str(caught.value)
        assert ctx.commit_conflict
        bindings.discard_partial(ctx)  # the abandon path keeps another writer's commit
        assert tree_sha256(run / "checkpoints") == before


# --------------------------------------------------------------------- real processes
TRAIN = """
import sys, time
from statecraft.cli.demo_train import train

class Slow:
    line = ""
    def write(self, text):
        sys.stdout.write(text)
        if text.startswith("step"):
            time.sleep(float(sys.argv[2]))
        self.line += text
        if "\\n" in self.line:
            done, self.line = self.line, ""
            if sys.argv[2] != "0.0" and done.startswith(("save-staged 20 ", "save-end 20 ")):
                sys.stdout.flush()
                time.sleep(60)  # hold the lease after the second save until the kill
    def flush(self):
        sys.stdout.flush()

train(sys.argv[1], steps=40, save_every=10, seed=3, stream=Slow())
"""


def _train(out: Path, delay: float) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-c", TRAIN, str(out), str(delay)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.slow
def test_twin_launch_one_trains_then_kill_and_takeover_resume_bit_exactly(tmp_path: Path) -> None:
    """Two launches at once: one trains, the other fails naming it; after SIGKILL a relaunch
    takes the lease over and ends bit-exact with an uninterrupted run."""
    reference = tmp_path / "reference"
    ref = _train(reference, 0.0)
    ref.communicate(timeout=300)
    assert ref.returncode == 0
    out = tmp_path / "out"
    (DEMO_RUN.job_dir(out) / "20260101000000").mkdir(parents=True)  # the requeued attempt
    first, second = _train(out, 0.05), _train(out, 0.05)
    procs = {first.pid: first, second.pid: second}
    deadline = time.monotonic() + 120
    loser = None
    while loser is None and time.monotonic() < deadline:
        loser = next((p for p in procs.values() if p.poll() is not None), None)
        time.sleep(0.05)
    assert loser is not None, "neither launch stopped: both are training"
    _, err = loser.communicate()
    assert loser.returncode != 0
    owner = procs[first.pid if loser is second else second.pid]
    assert "WriterLeaseError" in err
    assert "is being written by owner" in err
    assert f"PID {owner.pid}" in err
    assert "whose lock is held" in err
    assert owner.stdout is not None
    for line in owner.stdout:  # kill the owner after its second save (staged or written)
        if line.startswith(("save-end 20 ", "save-staged 20 ")):
            break
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    relaunch = _train(out, 0.0)
    _, err = relaunch.communicate(timeout=300)
    assert relaunch.returncode == 0, err
    assert f"PID {owner.pid}" in err
    assert "is stale (its lock is free)" in err
    assert "taking over the writer lease" in err
    assert "(now generation 2)" in err
    # the relaunch exited normally: its lease record is released at exit
    assert not (DEMO_RUN.job_dir(out) / "20260101000000" / LEASE_NAME).exists()
    ref_dir, run_dir = checkpoints_dir(reference), checkpoints_dir(out)
    assert ref_dir is not None
    assert run_dir is not None
    assert compare_checkpoints(ref_dir / iter_dirname(40), run_dir / iter_dirname(40)) == []


def test_simultaneous_launches_on_a_fresh_root_share_one_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two launches that both find no attempt must not each mint one: the job's launch lock
    makes the second resolve after the first, so it adopts the first's new attempt (where
    its lease then fences it). The first launch is held between listing the attempts and
    minting; without the lock the second mints a sibling attempt in that window."""
    import threading

    import statecraft as sc
    from statecraft.checkpoint.kernel import layout
    real_mint = layout._mint
    first_listed = threading.Event()
    calls: list[str] = []

    def slow_first_mint(*args, **kwargs):
        if not calls:
            calls.append("first")
            first_listed.set()
            time.sleep(0.5)  # the window between listing the attempts and minting one
        return real_mint(*args, **kwargs)

    monkeypatch.setattr(layout, "_mint", slow_first_mint)
    out = tmp_path / "out"

    def launch() -> None:
        ckpt = sc.Checkpointer(sc.CheckpointConfig(), run=DEMO_RUN, output_root=out)
        ensure_attempt(ckpt.run_context, ckpt.run_state)

    first = threading.Thread(target=launch)
    first.start()
    assert first_listed.wait(10)
    second = threading.Thread(target=launch)
    second.start()
    first.join(30)
    second.join(30)
    attempts = sorted(p.name for p in DEMO_RUN.job_dir(out).iterdir() if p.is_dir())
    assert len(attempts) == 1, f"two launches minted {attempts}"


EXIT_SCRIPT = """
import os, signal, sys
import torch
import statecraft as sc
out, how = sys.argv[1], sys.argv[2]
config = sc.CheckpointConfig.load(None, ["save_every=1", "save_async=false", "keep_optim_last=0"])
ckpt = sc.Checkpointer(config, run="exit", output_root=out)
model = torch.nn.Linear(2, 2)
ckpt.track(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
ckpt.resume()
ckpt.record(sc.Outcome.APPLIED)
ckpt.step_end()
if how == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_a_normal_exit_releases_the_lease_and_a_kill_leaves_it_to_take_over(
    tmp_path: Path, how: str
) -> None:
    """A process that exits normally without close() removes its lease record (the next
    launch warns of no takeover); a SIGKILLed one leaves it, and the next launch takes it over
    with a warning."""
    script = tmp_path / "exit_script.py"
    script.write_text(EXIT_SCRIPT)
    out = tmp_path / "out"

    def launch() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(script), str(out), how],
            capture_output=True,
            text=True,
            env={**os.environ, "TMPDIR": str(tmp_path)},
            timeout=120,
        )

    first = launch()
    assert first.returncode == (0 if how == "exit" else -signal.SIGKILL), first.stderr
    (attempt,) = [p for p in (out / "default" / "default" / "exit").iterdir() if p.is_dir()]
    assert (attempt / LEASE_NAME).exists() == (how == "kill")
    second = launch()
    takeover = [
        line for line in second.stderr.splitlines() if "taking over the writer lease" in line
    ]
    assert len(takeover) == (1 if how == "kill" else 0), second.stderr
    assert "statecraft: resumed from " in second.stderr
