"""The Slurm sentinel appearing at every moment of a run, each one pinned by a deterministic
hook (the real filesystem's I/O gate creates the file from inside the named write, removal
or evaluation; no sleeps): inside a synchronous save, inside a validation, during a background
write, during retention, after the final step and inside ``finalize()``'s own save. Each run
stops at the next quiescent boundary with the emergency checkpoint committed (the one being
written when the file appeared stays committed too), ``DONE.json`` parses and says the right
thing, and the requeued run resumes bit for bit; ``finalize()`` is not a stop point (a signal
inside it is recorded, not acted on). A signal after ``finalize()`` returned:
``test_signal_after_finalize.py``."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from checkpoint_runs import open_checkpointer
from stop_runs import assert_same, attempt_dir, done, latest, run_to, state_of, step

from statecraft.checkpoint.kernel.layout import MANIFEST_NAME
from statecraft.checkpoint.stop.records import DONE_FILE, EmergencyKind
from statecraft.engine.crash import IoGate
from statecraft.storage.filesystem import OsFilesystem

SENTINEL = "SIGUSR1_RECEIVED"


# ----------------------------------------------------------------------------- helpers
def committed(out: Path, step: int) -> bool:
    return (attempt_dir(out) / "checkpoints" / f"iter_{step:09d}" / MANIFEST_NAME).is_file()


def uninterrupted(tmp_path: Path, steps: int, *knobs: str) -> dict[str, Any]:
    ckpt, objects = open_checkpointer(tmp_path / "reference", *knobs)
    ckpt.validate_with(lambda s: {"loss": 1.0 / s}, source="heldout")
    ckpt.resume()
    run_to(ckpt, objects, steps)
    ckpt.finalize()
    ckpt.close()
    return state_of(objects)


def requeue(out: Path, sentinels: Path, steps: int, *knobs: str) -> tuple[Any, dict[str, Any]]:
    """The unchanged command again: resume=auto, train to ``steps`` (no stop), finalize."""
    ckpt, objects = open_checkpointer(out, f"termination.sentinel_dir={sentinels}", *knobs)
    ckpt.validate_with(lambda s: {"loss": 1.0 / s}, source="heldout")
    result = ckpt.resume()
    assert run_to(ckpt, objects, steps) is None or not ckpt.stopped
    assert ckpt.stopped is None
    ckpt.finalize()
    ckpt.close()
    return result, state_of(objects)


class SentinelAt(IoGate):
    """Creates ``sentinel`` (or calls ``then``) from inside the first gated I/O that
    ``match(op, target)`` accepts once ``armed``; ``hold``: that I/O then waits for
    ``release`` (a background thread's only), so the test sees the write still in flight."""

    def __init__(
        self,
        sentinel: Path | None,
        match: Callable[[str, str], bool],
        *,
        hold: bool = False,
        then: Callable[[], None] | None = None,
    ) -> None:
        super().__init__()
        self.sentinel = sentinel
        self.match = match
        self.hold = hold
        self.then = then
        self.armed = False
        self.fired = threading.Event()
        self.where: tuple[str, str, str] | None = None
        self.release = threading.Event()

    def before_io(self, op: str, target: str) -> Any:
        if self.armed and not self.fired.is_set() and self.match(op, target):
            if self.sentinel is not None:
                self.sentinel.touch()
            if self.then is not None:
                self.then()
            self.where = (op, target, threading.current_thread().name)
            self.fired.set()
            if self.hold:
                assert threading.current_thread() is not threading.main_thread()
                self.release.wait(30)
        return super().before_io(op, target)


def assert_stopped_at(out: Path, sentinels: Path, end: Any, at: int) -> None:
    """The contract of a sentinel stop at step ``at``: the emergency checkpoint of ``at``
    committed and latest, DONE.json whole and naming it, the sentinel consumed."""
    assert end
    assert end.stop
    assert end.reason == "sentinel"
    assert end.emergency is not None
    assert end.emergency.kind is EmergencyKind.CHECKPOINT
    assert end.emergency.step == at
    assert end.emergency.path == f"checkpoints/iter_{at:09d}"
    assert committed(out, at)
    assert latest(out).endswith(f"iter_{at:09d}")
    record = done(out)
    assert (record["step"], record["preempted"], record["saved"]) == (at, "sentinel", True)
    assert record["checkpoint"] == f"checkpoints/iter_{at:09d}"
    assert not (sentinels / SENTINEL).exists()
    assert (sentinels / f"{SENTINEL}.consumed").exists()


def dirs(tmp_path: Path) -> tuple[Path, Path]:
    out, sentinels = tmp_path / "out", tmp_path / "logs"
    sentinels.mkdir()
    return out, sentinels


# ----------------------------------------------------------------------------- the moments
class TestTheSentinelAtEveryMoment:
    def test_inside_a_synchronous_save(self, tmp_path: Path) -> None:
        """The sentinel appears while iter_2 is being written (synchronously): that save
        finishes and commits, step 2 is not a stop (the watch was asked before the save),
        step 3 stops with iter_3; the requeue to 6 equals an uninterrupted run."""
        out, sentinels = dirs(tmp_path)
        gate = SentinelAt(
            sentinels / SENTINEL,
            lambda op, target: op == "open_write" and "iter_000000002" in target,
        )
        ckpt, objects = open_checkpointer(
            out, f"termination.sentinel_dir={sentinels}", filesystem=OsFilesystem(gate=gate)
        )
        ckpt.resume()
        step(ckpt, objects)
        gate.armed = True
        second = step(ckpt, objects)
        assert gate.fired.is_set()
        assert gate.where is not None
        assert gate.where[2] == threading.main_thread().name
        assert not second
        assert second.saved is not None
        assert second.saved.iteration == 2
        assert committed(out, 2)
        end = step(ckpt, objects)
        assert_stopped_at(out, sentinels, end, 3)
        assert [s.iteration for s in ckpt.saves] == [2, 3]
        ckpt.finalize()
        ckpt.close()
        result, state = requeue(out, sentinels, 6)
        assert result.step == 3
        assert_same(state, uninterrupted(tmp_path, 6))

    def test_inside_a_validation(self, tmp_path: Path) -> None:
        """The evaluation of step 2 creates the sentinel: the validation completes with its
        metrics, step 3 stops with a full iter_3 (not evaluation-pending: no validation was
        due there); the requeue to 6 equals an uninterrupted run."""
        out, sentinels = dirs(tmp_path)
        knobs = ("save_every=4", "validation.every=2")
        calls: list[int] = []

        def evaluate(at: int) -> dict[str, float]:
            calls.append(at)
            (sentinels / SENTINEL).touch()
            return {"loss": 1.0 / at}

        ckpt, objects = open_checkpointer(out, f"termination.sentinel_dir={sentinels}", *knobs)
        ckpt.validate_with(evaluate, source="heldout")
        ckpt.resume()
        step(ckpt, objects)
        second = step(ckpt, objects)
        assert calls == [2]
        assert not second
        assert second.validated
        assert second.metrics == {"loss": 0.5}
        end = step(ckpt, objects)
        assert_stopped_at(out, sentinels, end, 3)
        assert calls == [2]
        ckpt.finalize()
        ckpt.close()
        result, state = requeue(out, sentinels, 6, *knobs)
        assert result.step == 3
        assert_same(state, uninterrupted(tmp_path, 6, *knobs))

    def test_during_a_background_write(self, tmp_path: Path) -> None:
        """save_async: the background write of iter_2 creates the sentinel and is held there
        until the test has seen it in flight; step 3 stops: iter_2 is joined and committed,
        then iter_3 is the emergency checkpoint; the requeue to 6 equals an uninterrupted
        run."""
        out, sentinels = dirs(tmp_path)
        gate = SentinelAt(
            sentinels / SENTINEL,
            lambda op, target: (
                threading.current_thread() is not threading.main_thread()
                and op == "open_write"
                and "iter_000000002" in target
            ),
            hold=True,
        )
        ckpt, objects = open_checkpointer(
            out,
            f"termination.sentinel_dir={sentinels}",
            "save_async=true",
            filesystem=OsFilesystem(gate=gate),
        )
        ckpt.resume()
        step(ckpt, objects)
        gate.armed = True
        second = step(ckpt, objects)
        assert not second
        try:
            assert gate.fired.wait(30)
            assert ckpt.run_state.writes.in_flight()
            assert not committed(out, 2)
        finally:
            gate.release.set()
        end = step(ckpt, objects)
        assert_stopped_at(out, sentinels, end, 3)
        assert not end.saved.asynchronous
        assert [s.iteration for s in ckpt.saves] == [2, 3]
        assert committed(out, 2)
        ckpt.finalize()
        ckpt.close()
        result, state = requeue(out, sentinels, 6, "save_async=true")
        assert result.step == 3
        assert_same(state, uninterrupted(tmp_path, 6, "save_async=true"))

    @pytest.mark.parametrize("save_async", ["false", "true"])
    def test_during_retention(self, tmp_path: Path, save_async: str) -> None:
        """keep_optim_last=1: the removal of iter_2's optimizer state (retention after iter_4
        committed) creates the sentinel, on the training thread or the background one (held
        there until seen); step 5 stops with iter_5; retention of iter_2 finished, iter_4
        and iter_5 keep their optimizer; the requeue to 8 equals an uninterrupted run."""
        out, sentinels = dirs(tmp_path)
        knobs = ("keep_optim_last=1", f"save_async={save_async}")
        background = save_async == "true"
        gate = SentinelAt(
            sentinels / SENTINEL,
            lambda op, target: op in ("unlink", "rmdir") and "iter_000000002" in target,
            hold=background,
        )
        ckpt, objects = open_checkpointer(
            out, f"termination.sentinel_dir={sentinels}", *knobs, filesystem=OsFilesystem(gate=gate)
        )
        ckpt.resume()
        run_to(ckpt, objects, 3)
        ckpt.wait()
        gate.armed = True
        fourth = step(ckpt, objects)
        assert not fourth
        try:
            assert gate.fired.wait(30)
            assert gate.where is not None
            on_main = gate.where[2] == threading.main_thread().name
            assert on_main is not background
        finally:
            gate.release.set()
        end = step(ckpt, objects)
        assert_stopped_at(out, sentinels, end, 5)
        checkpoints = attempt_dir(out) / "checkpoints"
        assert not (checkpoints / "iter_000000002" / "optim.pt").exists()
        assert (checkpoints / "iter_000000004" / "optim.pt").exists()
        assert (checkpoints / "iter_000000005" / "optim.pt").exists()
        ckpt.finalize()
        ckpt.close()
        result, state = requeue(out, sentinels, 8, *knobs)
        assert result.step == 5
        assert_same(state, uninterrupted(tmp_path, 8, *knobs))

    def test_after_the_final_step(self, tmp_path: Path) -> None:
        """The sentinel appears after the last step_end() (step 4, saved by the cadence),
        before finalize(): there is no boundary left to stop at, so the run completes:
        DONE.json says preempted null at step 4 naming iter_4; the sentinel is left (it is
        older than DONE.json, so the requeued window that the batch script's trap asks for
        takes it as stale, adopts iter_4, trains nothing and does not stop)."""
        out, sentinels = dirs(tmp_path)
        ckpt, objects = open_checkpointer(out, f"termination.sentinel_dir={sentinels}")
        ckpt.resume()
        assert run_to(ckpt, objects, 4) is not None
        (sentinels / SENTINEL).touch()
        ckpt.finalize()
        assert ckpt.stopped is None
        record = done(out)
        assert (record["step"], record["preempted"]) == (4, None)
        assert record["checkpoint"] == "checkpoints/iter_000000004"
        assert latest(out).endswith("iter_000000004")
        ckpt.close()
        result, state = requeue(out, sentinels, 4)
        assert result.step == 4
        assert not (sentinels / SENTINEL).exists()
        assert (sentinels / f"{SENTINEL}.stale").exists()
        assert (done(out)["step"], done(out)["preempted"]) == (4, None)
        assert_same(state, uninterrupted(tmp_path, 4))

    def test_inside_the_final_save_of_finalize(self, tmp_path: Path) -> None:
        """The sentinel appears while finalize() writes the off-cadence final save of step 5:
        finalize() is not a stop point: iter_5 commits and DONE.json says preempted null at
        step 5 naming it; the run is complete and a requeue trains nothing."""
        out, sentinels = dirs(tmp_path)
        gate = SentinelAt(
            sentinels / SENTINEL,
            lambda op, target: op == "open_write" and "iter_000000005" in target,
        )
        ckpt, objects = open_checkpointer(
            out, f"termination.sentinel_dir={sentinels}", filesystem=OsFilesystem(gate=gate)
        )
        ckpt.resume()
        assert not run_to(ckpt, objects, 5)
        gate.armed = True
        report = ckpt.finalize()
        assert gate.fired.is_set()
        assert report is not None
        assert report.iteration == 5
        record = done(out)
        assert (record["step"], record["preempted"], record["saved"]) == (5, None, True)
        assert record["checkpoint"] == "checkpoints/iter_000000005"
        ckpt.close()
        result, state = requeue(out, sentinels, 5)
        assert result.step == 5
        assert_same(state, uninterrupted(tmp_path, 5))

    @pytest.mark.parametrize("moment", ["iter_000000003", DONE_FILE])
    def test_a_signal_inside_finalize_goes_on_to_the_restored_handler(
        self, tmp_path: Path, moment: str
    ) -> None:
        """SIGTERM delivered while finalize() writes the final save of step 3, or while it
        writes DONE.json (the flag-only handler is still installed): finalize() is not a stop
        point, the save and DONE.json complete (preempted null); then the handlers are
        restored and the signal, never acted on, is sent again: the handler in place before
        resume() gets it once, when DONE.json is already whole."""
        out, sentinels = dirs(tmp_path)
        seen: list[dict[str, Any]] = []
        previous = signal.signal(signal.SIGTERM, lambda *_: seen.append(done(out)))
        try:
            before = signal.getsignal(signal.SIGTERM)
            gate = SentinelAt(
                None,
                lambda op, target: op == "open_write" and moment in target,
                then=lambda: os.kill(os.getpid(), signal.SIGTERM),  # this process: the flag
            )
            ckpt, objects = open_checkpointer(
                out, f"termination.sentinel_dir={sentinels}", filesystem=OsFilesystem(gate=gate)
            )
            ckpt.resume()
            run_to(ckpt, objects, 3)
            gate.armed = True
            ckpt.finalize()
            assert gate.fired.is_set()
            assert ckpt.run_context.termination.signals_received == ("SIGTERM",)
            assert ckpt.stopped is None
            assert signal.getsignal(signal.SIGTERM) is before
            assert len(seen) == 1
            assert seen[0] == done(out)
            record = seen[0]
            assert (record["step"], record["preempted"], record["saved"]) == (3, None, True)
            assert record["checkpoint"] == "checkpoints/iter_000000003"
            ckpt.close()
            assert len(seen) == 1
        finally:
            signal.signal(signal.SIGTERM, previous)
