"""The facade's lifecycle traps (issue 7, traps 1 and 3), each reproduced on a real run.

Trap 1: a loop that saves without ``resume()`` into an attempt holding committed checkpoints
used to be taken for a retry (the committed iterations skipped as "retried commit", later ones
written: two trajectories in one series). It now refuses with ``ResumeRequiredError`` and
writes nothing. Trap 3: a kill between the final save's manifest commit and its pointer update
left ``latest_checkpoint.txt`` naming the older iteration and a ``.latest_checkpoint.txt.tmp-*``
file behind for good; the relaunch's resume now rolls the pointer forward through the save
machine's reconcile path and sweeps the dead writer's temporaries.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from checkpoint_runs import RUN, Objects, committed_run, flip_tensor_bit, open_checkpointer, train

import statecraft as sc
from statecraft.checkpoint.kernel.layout import LATEST_POINTER, MANIFEST_NAME
from statecraft.engine.crash import Fault, FaultKind
from statecraft.errors import ResumeError, ResumeRequiredError, StoreError
from statecraft.storage import OsFilesystem, is_temporary_name

# ----------------------------------------------------------------------------- helpers


def attempt_dir(out: Path) -> Path:
    (attempt,) = [p for p in RUN.job_dir(out).iterdir() if p.is_dir()]
    return attempt


def checkpoints(out: Path) -> Path:
    return attempt_dir(out) / "checkpoints"


def tree_bytes(root: Path) -> dict[str, str]:
    """Every file under ``root`` but the writer lease and the launch lock (rewritten by every
    launch, never part of a checkpoint): relative path -> SHA-256 of its bytes; directories
    map to ``"dir"`` so a new empty iteration directory shows too."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.name.startswith((".statecraft-writer.", ".statecraft-launch.")):
            continue
        key = str(path.relative_to(root))
        found[key] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def latest(out: Path) -> str:
    return (checkpoints(out) / LATEST_POINTER).read_text()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One attempt holding committed iterations 2, 4, 6 and 8 (latest names 8)."""
    return committed_run(tmp_path_factory.mktemp("committed") / "out", data=True)


@pytest.fixture
def out(pristine: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "out"
    shutil.copytree(pristine, copy)
    return copy


# ------------------------------------------------------------------- trap 1: no resume
class TestSaveWithoutResume:
    def _assert_refused(self, error: ResumeRequiredError, out: Path) -> None:
        message = str(error)
        assert f"{attempt_dir(out)} already holds committed checkpoints" in message
        assert "(newest iter_000000008)" in message
        assert "did not call Checkpointer.resume()" in message
        assert "Nothing was written" in message
        assert "Call ckpt.resume() before the training loop" in message
        assert "set resume=off to start a new attempt" in message
        assert error.fields == {"attempt": str(attempt_dir(out)), "iteration": 8}

    def test_direct_save_refuses_and_writes_nothing(self, out: Path) -> None:
        """save() without resume() in an attempt with commits refuses; the tree is unchanged."""
        before = tree_bytes(out)
        ckpt, objects = open_checkpointer(out)
        objects.step()
        ckpt.record(sc.Outcome.APPLIED)
        objects.step()
        ckpt.record(sc.Outcome.APPLIED)
        with pytest.raises(ResumeRequiredError) as caught:
            ckpt.save()
        self._assert_refused(caught.value, out)
        assert tree_bytes(out) == before
        assert ckpt.saves == []

    def test_step_end_refuses_at_the_first_due_save(self, out: Path) -> None:
        """A loop that forgets resume() is stopped by step_end at its first due save (iter 2,
        already committed: main skipped it as a retried commit and wrote iter 10 later)."""
        before = tree_bytes(out)
        ckpt, objects = open_checkpointer(out)
        with pytest.raises(ResumeRequiredError) as caught:
            train(ckpt, objects, 10)
        self._assert_refused(caught.value, out)
        assert ckpt.step == 2  # it stopped at the first save, not after the loop
        assert tree_bytes(out) == before

    def test_finalize_refuses(self, out: Path) -> None:
        """finalize() off cadence (step 1) without resume() refuses the same way."""
        before = tree_bytes(out)
        ckpt, objects = open_checkpointer(out)
        train(ckpt, objects, 1)
        with pytest.raises(ResumeRequiredError) as caught:
            ckpt.finalize()
        self._assert_refused(caught.value, out)
        assert tree_bytes(out) == before

    def test_resume_after_the_refusal_continues_the_series(self, out: Path) -> None:
        """After the refusal, resume() is still allowed and the loop continues from iter 8."""
        ckpt, objects = open_checkpointer(out)
        with pytest.raises(ResumeRequiredError):
            ckpt.save()
        start = ckpt.resume()
        assert start.step == 8
        train(ckpt, objects, 2)
        assert [r.iteration for r in ckpt.saves] == [10]
        assert not ckpt.saves[0].retried_commit
        assert latest(out) == "iter_000000010\n"

    def test_resume_off_without_resume_call_saves_in_a_new_attempt(self, out: Path) -> None:
        """resume=off mints an empty sibling attempt, so its saves need no resume() call."""
        ckpt, objects = open_checkpointer(out, "resume=off")
        train(ckpt, objects, 2)
        assert [r.iteration for r in ckpt.saves] == [2]
        assert ckpt.attempt is not None
        assert ckpt.attempt.minted
        assert not ckpt.saves[0].retried_commit

    def test_empty_attempt_needs_no_resume_call(self, tmp_path: Path) -> None:
        """A first launch (no attempt yet) may save without resume(): nothing to continue."""
        ckpt, objects = open_checkpointer(tmp_path / "out")
        train(ckpt, objects, 4)
        assert [r.iteration for r in ckpt.saves] == [2, 4]


class TestResumeOnce:
    def test_second_resume_refuses(self, out: Path) -> None:
        """resume() twice is refused with the attempt named; nothing on disk changes."""
        ckpt, _ = open_checkpointer(out)
        assert ckpt.resume().step == 8
        before = tree_bytes(out)
        with pytest.raises(ResumeError) as caught:
            ckpt.resume()
        message = str(caught.value)
        assert f"resume() was already called for {attempt_dir(out)}" in message
        assert "Call resume() once, before the training loop" in message
        assert tree_bytes(out) == before

    def test_resume_after_a_save_refuses(self, tmp_path: Path) -> None:
        """resume() after this process saved is refused, naming the saved iteration."""
        root = tmp_path / "out"
        ckpt, objects = open_checkpointer(root)
        train(ckpt, objects, 2)
        before = tree_bytes(root)
        with pytest.raises(ResumeError) as caught:
            ckpt.resume()
        message = str(caught.value)
        assert f"resume() after a save in {attempt_dir(root)}" in message
        assert "already saved iteration 2" in message
        assert "before the training loop and the first save" in message
        assert caught.value.fields["iteration"] == 2
        assert tree_bytes(root) == before


# ------------------------------------------------------ trap 3: a pointer left behind
# A training script killed with SIGKILL just before the pointer update of its save at
# iteration 20 (the gate runs in the real OS filesystem path of the child process).
CHILD = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, os.environ["TESTS_DIR"])
    import statecraft as sc
    from checkpoint_runs import Objects
    from statecraft.storage import OsFilesystem

    class KillAtPointer:
        renames = 0
        def before_io(self, op, target):
            if op == "rename" and target.endswith("/checkpoints/latest_checkpoint.txt"):
                self.renames += 1
                if self.renames == int(os.environ.get("KILL_AT_POINTER", "0")):
                    os.kill(os.getpid(), signal.SIGKILL)
            return None

    out, steps = sys.argv[1], int(sys.argv[2])
    objects = Objects()
    ckpt = sc.Checkpointer(
        sc.CheckpointConfig.load(None, ["save_every=10", "save_async=false", "keep_optim_last=0"]),
        run=sc.RunIdentity("proj", "group", "name"),
        output_root=out,
        filesystem=OsFilesystem(gate=KillAtPointer()),
    )
    ckpt.track(model=objects.model, optimizer=objects.optimizer,
               scheduler=objects.scheduler, data=objects.cursor)
    start = ckpt.resume()
    for _ in range(start.step, steps):
        objects.step()
        ckpt.record(sc.Outcome.APPLIED)
        if ckpt.step_end():
            break
    ckpt.finalize()
    print("done", start.step, ckpt.step)
    """
)


def launch(out: Path, script: Path, *, kill_at_pointer: int = 0) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "TESTS_DIR": str(Path(__file__).resolve().parents[1]),
        "KILL_AT_POINTER": str(kill_at_pointer),
    }
    return subprocess.run(
        [sys.executable, str(script), str(out), "20"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def killed_at_pointer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An output root whose run was SIGKILLed after iteration 20's manifest commit, before
    its pointer update: iterations 10 and 20 committed, latest naming 10, the pointer's
    temporary left behind."""
    base = tmp_path_factory.mktemp("killed")
    script = base / "train.py"
    script.write_text(CHILD)
    out = base / "out"
    child = launch(out, script, kill_at_pointer=2)
    assert child.returncode == -9, child.stderr
    return out


def committed_files(out: Path) -> dict[str, str]:
    """The bytes of every file of a committed iteration (one with a manifest)."""
    return {
        key: digest
        for key, digest in tree_bytes(out).items()
        if (out / key).parent.joinpath(MANIFEST_NAME).exists() and digest != "dir"
    }


def temporaries(out: Path) -> list[str]:
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if is_temporary_name(p.name))


class TestPointerRollForward:
    def test_the_kill_leaves_the_pointer_behind(self, killed_at_pointer: Path) -> None:
        """The reproduction: iter 20 is committed, latest still names iter 10, a pointer
        temporary of the dead writer is left over."""
        ckpts = checkpoints(killed_at_pointer)
        assert (ckpts / "iter_000000020" / MANIFEST_NAME).exists()
        assert latest(killed_at_pointer) == "iter_000000010\n"
        assert [
            Path(t).name.startswith(".latest_checkpoint.txt.tmp-")
            for t in temporaries(killed_at_pointer)
        ] == [True]

    def test_relaunch_with_nothing_left_rolls_the_pointer_forward(
        self, killed_at_pointer: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The unchanged command relaunched resumes at 20, has nothing left to train and
        exits; latest names iter 20, the dead writer's temporary is gone, and no committed
        byte changed (main left latest at iter 10 and the temporary for good)."""
        out = tmp_path / "out"
        shutil.copytree(killed_at_pointer, out)
        committed = committed_files(out)
        objects = Objects()
        ckpt = sc.Checkpointer(
            sc.CheckpointConfig.load(
                None, ["save_every=10", "save_async=false", "keep_optim_last=0"]
            ),
            run=RUN,
            output_root=out,
        )
        ckpt.track(
            model=objects.model,
            optimizer=objects.optimizer,
            scheduler=objects.scheduler,
            data=objects.cursor,
        )
        with caplog.at_level(logging.INFO, logger="statecraft"):
            start = ckpt.resume()
        assert start.step == 20
        train(ckpt, objects, 20 - start.step)
        ckpt.finalize()
        assert ckpt.saves == []  # nothing left to train, nothing saved
        assert latest(out) == "iter_000000020\n"
        assert temporaries(out) == []
        assert committed_files(out) == committed
        lines = [r.getMessage() for r in caplog.records]
        assert "latest pointer rolled forward to iter_000000020 (was iter_000000010)" in lines

    def test_relaunch_in_a_real_process(self, killed_at_pointer: Path, tmp_path: Path) -> None:
        """The same relaunch as a real process running the unchanged script exits 0 and
        leaves latest naming iter 20 with no temporaries."""
        out = tmp_path / "out"
        shutil.copytree(killed_at_pointer, out)
        committed = committed_files(out)
        child = launch(out, killed_at_pointer.parent / "train.py")
        assert child.returncode == 0, child.stderr
        assert child.stdout.split() == ["done", "20", "20"]
        assert latest(out) == "iter_000000020\n"
        assert temporaries(out) == []
        assert committed_files(out) == committed

    def test_missing_pointer_is_completed(
        self, out: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A missing latest pointer is written by the resume that adopts iter 8."""
        (checkpoints(out) / LATEST_POINTER).unlink()
        committed = committed_files(out)
        ckpt, _ = open_checkpointer(out)
        with caplog.at_level(logging.INFO, logger="statecraft"):
            ckpt.resume()
        assert latest(out) == "iter_000000008\n"
        assert committed_files(out) == committed
        lines = [r.getMessage() for r in caplog.records]
        assert "latest pointer rolled forward to iter_000000008 (was missing)" in lines

    def test_current_pointer_is_not_rewritten(self, out: Path) -> None:
        """A pointer that already names the adopted iteration is left alone (no write)."""
        pointer = checkpoints(out) / LATEST_POINTER
        stamp = pointer.stat().st_mtime_ns
        before = tree_bytes(out)
        ckpt, _ = open_checkpointer(out)
        ckpt.resume()
        assert pointer.stat().st_mtime_ns == stamp
        assert tree_bytes(out) == before

    def test_dead_writers_temporaries_in_uncommitted_iterations_are_swept(self, out: Path) -> None:
        """A partial iter 10 holding a dead writer's temporary keeps its directory but loses
        the temporary; committed iterations are untouched."""
        partial = checkpoints(out) / "iter_000000010"
        partial.mkdir()
        (partial / ".model.pt.tmp-999999-1").write_bytes(b"half a model")
        (checkpoints(out) / ".latest_checkpoint.txt.tmp-999999-2").write_bytes(b"iter_0")
        committed = committed_files(out)
        ckpt, _ = open_checkpointer(out)
        assert ckpt.resume().step == 8
        assert temporaries(out) == []
        assert partial.is_dir()
        assert committed_files(out) == committed
        assert latest(out) == "iter_000000008\n"


# ------------------------------------------------------------ trap 1 under two ranks
def _save_without_resume(rank: int, world_size: int, tmp: str) -> None:
    """One rank of a two-rank gloo group that trains and saves without resume(); it records
    the error class, message and fields it raised."""
    import json

    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"file://{tmp}/store", rank=rank, world_size=world_size
    )
    try:
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        ckpt = sc.Checkpointer(
            sc.CheckpointConfig.load(None, ["save_every=2", "save_async=false"]),
            run=sc.RunIdentity("p", "g", "dist"),
            output_root=f"{tmp}/out",
        )
        ckpt.track(model=model, optimizer=optimizer)
        for _ in range(2):
            ckpt.record(sc.Outcome.APPLIED)
        try:
            ckpt.step_end()
            outcome: dict[str, object] = {"raised": None}
        except Exception as exc:  # the test compares what each rank raised
            outcome = {"raised": type(exc).__name__, "message": str(exc), **exc.fields}
        Path(f"{tmp}/rank{rank}.json").write_text(json.dumps(outcome))
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
class TestSaveWithoutResumeUnderTwoRanks:
    def test_every_rank_refuses_with_rank_zeros_decision(self, tmp_path: Path) -> None:
        """Under two gloo ranks a save without resume() into an attempt with commits raises
        the same ResumeRequiredError on both ranks; nothing is written."""
        import json

        import torch

        ckpt = sc.Checkpointer(
            sc.CheckpointConfig.load(None, ["save_every=2", "save_async=false"]),
            run=sc.RunIdentity("p", "g", "dist"),
            output_root=tmp_path / "out",
        )
        model = torch.nn.Linear(4, 2)
        ckpt.track(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
        ckpt.resume()
        for _ in range(2):
            ckpt.record(sc.Outcome.APPLIED)
        assert ckpt.step_end().saved is not None
        ckpt.close()
        before = tree_bytes(tmp_path / "out")
        torch.multiprocessing.spawn(
            _save_without_resume, args=(2, str(tmp_path)), nprocs=2, join=True
        )
        outcomes = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
        assert outcomes[0] == outcomes[1]
        assert outcomes[0]["raised"] == "ResumeRequiredError"
        assert "(newest iter_000000002)" in outcomes[0]["message"]
        assert outcomes[0]["iteration"] == 2
        assert tree_bytes(tmp_path / "out") == before


class PointerWriteFails:
    """An I/O gate that fails the rename onto ``latest_checkpoint.txt`` with EIO."""

    def before_io(self, op: str, target: str) -> Fault | None:
        if op == "rename" and target.endswith(f"/checkpoints/{LATEST_POINTER}"):
            return Fault(FaultKind.IO_ERROR, 0)
        return None


class TestPointerRollForwardFailures:
    def test_a_failed_pointer_write_fails_the_resume_and_changes_nothing(self, out: Path) -> None:
        """When the roll-forward's pointer write fails, resume raises the store's error, the
        pointer still names iter 6, no committed byte changed, and a later resume completes it
        (sweeping the failed write's temporary)."""
        (checkpoints(out) / LATEST_POINTER).write_bytes(b"iter_000000006\n")
        committed = committed_files(out)
        ckpt, _ = open_checkpointer(out, filesystem=OsFilesystem(gate=PointerWriteFails()))
        with pytest.raises(StoreError) as caught:
            ckpt.resume()
        assert LATEST_POINTER in str(caught.value)
        assert latest(out) == "iter_000000006\n"
        assert committed_files(out) == committed
        ckpt.close()
        again, _ = open_checkpointer(out)
        assert again.resume().step == 8
        assert latest(out) == "iter_000000008\n"
        assert temporaries(out) == []  # the failed write's temporary is swept by the relaunch
        assert committed_files(out) == committed

    def test_a_special_file_pointer_is_left_alone(
        self, out: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A FIFO where the pointer belongs is never replaced: resume adopts iter 8, warns that
        the pointer is not rolled forward, and the tree is unchanged."""
        pointer = checkpoints(out) / LATEST_POINTER
        pointer.unlink()
        os.mkfifo(pointer)
        before = tree_bytes_no_fifo(out)
        ckpt, _ = open_checkpointer(out)
        with caplog.at_level(logging.WARNING, logger="statecraft"):
            assert ckpt.resume().step == 8
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any(
            f"{LATEST_POINTER} is a fifo, not a regular file: it is not rolled forward to "
            "iter_000000008; remove it (the next save writes the pointer)" in line
            for line in warned
        ), warned
        assert tree_bytes_no_fifo(out) == before
        assert pointer.is_fifo()


def tree_bytes_no_fifo(root: Path) -> dict[str, str]:
    """:func:`tree_bytes` with special files shown by kind (a FIFO is never read)."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.name.startswith((".statecraft-writer.", ".statecraft-launch.")):
            continue
        key = str(path.relative_to(root))
        if path.is_fifo():
            found[key] = "fifo"
        else:
            found[key] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return found


class TestFreshStartInAnAttemptWithCommits:
    def test_resume_off_with_a_pinned_run_ts_refuses_to_save(self, out: Path) -> None:
        """resume=off pinned to the committed attempt's run_ts starts fresh there; its first
        save (iter 2, committed by the other trajectory) refuses instead of being taken for a
        retried commit, and nothing is written."""
        run_ts = attempt_dir(out).name
        before = tree_bytes(out)
        ckpt, objects = open_checkpointer(out, "resume=off", f"run_ts={run_ts}")
        assert not ckpt.resume().resumed
        with pytest.raises(ResumeRequiredError) as caught:
            train(ckpt, objects, 2)
        message = str(caught.value)
        assert (
            f"{attempt_dir(out)} already holds committed checkpoints (newest iter_000000008)"
            in message
        )
        assert "but this process started fresh in it (resume=off" in message
        assert "Nothing was written" in message
        assert "Set resume=off without a pinned run_ts to start a new attempt" in message
        assert tree_bytes(out) == before

    def test_auto_fresh_start_past_damaged_commits_refuses_to_save(self, out: Path) -> None:
        """resume=auto passing over every commit (each model.pt damaged) starts fresh; its
        first save at iter 2 (a damaged commit of the same size: main took it for a retried
        commit and pointed latest at it) refuses, and nothing is written."""
        for iteration in (2, 4, 6, 8):
            flip_tensor_bit(checkpoints(out) / f"iter_{iteration:09d}" / "model.pt")
        before = tree_bytes(out)
        ckpt, objects = open_checkpointer(out)
        start = ckpt.resume()
        assert not start.resumed
        assert len(start.passed_over) == 4
        with pytest.raises(ResumeRequiredError) as caught:
            train(ckpt, objects, 2)
        message = str(caught.value)
        assert "(newest iter_000000008) but this process started fresh in it (resume=auto " in (
            message
        )
        assert "or move the attempt's checkpoints aside" in message
        assert tree_bytes(out) == before

    def test_auto_fresh_start_in_an_empty_adopted_attempt_saves(self, tmp_path: Path) -> None:
        """resume=auto adopting an attempt with no commit starts fresh and saves normally."""
        root = tmp_path / "out"
        first, _ = open_checkpointer(root)
        first.resume()  # mints the attempt, saves nothing
        first.close()
        ckpt, objects = open_checkpointer(root)
        assert not ckpt.resume().resumed
        assert ckpt.attempt is not None
        assert not ckpt.attempt.minted
        train(ckpt, objects, 2)
        assert [r.iteration for r in ckpt.saves] == [2]
