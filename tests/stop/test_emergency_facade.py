"""The facade's stop decisions, in process: ``step_end()`` asks the termination watch, runs the
emergency save instead of the due boundary, writes ``DONE.json``, consumes the sentinel, and
refuses every later ``step_end()`` / ``save()``; ``finalize()`` after a stop only joins; a
requeued run resumes from the emergency checkpoint bit for bit. Real torch objects, real
sentinel files, real signals (``os.kill(os.getpid(), SIGUSR1)``), the real filesystem."""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
from checkpoint_runs import open_checkpointer
from stop_runs import assert_same, attempt_dir, latest, run_to, state_of, step

import statecraft as sc
from statecraft.checkpoint.stop.records import DONE_FILE, EmergencyKind
from statecraft.engine.crash import IoGate
from statecraft.errors import (
    ArtifactResumeError,
    CheckpointError,
    ConfigError,
    ResumeRequiredError,
    RunStoppedError,
)
from statecraft.storage.filesystem import OsFilesystem

SENTINEL = "SIGUSR1_RECEIVED"


# ----------------------------------------------------------------------------- helpers
def snapshot(out: Path) -> dict[str, str]:
    """Every file under the output root (but the lease) and the sha256 of its bytes."""
    return {
        str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.rglob("*"))
        if p.is_file() and "lease" not in p.name
    }


def done(out: Path) -> dict[str, Any]:
    return json.loads((attempt_dir(out) / DONE_FILE).read_text())


def stopping(out: Path, sentinels: Path, *overrides: str, **kw: Any) -> Any:
    return open_checkpointer(out, f"termination.sentinel_dir={sentinels}", *overrides, **kw)


def uninterrupted(tmp_path: Path, steps: int, *overrides: str) -> dict[str, Any]:
    ckpt, objects = open_checkpointer(tmp_path / "reference", *overrides)
    ckpt.resume()
    run_to(ckpt, objects, steps)
    ckpt.finalize()
    ckpt.close()
    return state_of(objects)


def requeue(out: Path, sentinels: Path, steps: int, *overrides: str) -> dict[str, Any]:
    """The unchanged command again: resume=auto, train to ``steps``, finalize."""
    ckpt, objects = stopping(out, sentinels, *overrides)
    ckpt.resume()
    assert run_to(ckpt, objects, steps) is None or not ckpt.stopped
    ckpt.finalize()
    ckpt.close()
    return state_of(objects)


class HoldBackground(IoGate):
    """Holds the first I/O of the background write thread (``statecraft-write-*``) until
    ``release`` is set, or fails every I/O of it with ENOSPC (``fail``); the training
    thread's I/O and the lease's background publication pass."""

    def __init__(self, *, fail: bool = False) -> None:
        super().__init__()
        self.fail = fail
        self.release = threading.Event()
        self.held = threading.Event()

    def before_io(self, op: str, target: str) -> Any:
        if threading.current_thread().name.startswith("statecraft-write"):
            if self.fail:
                raise OSError(errno.ENOSPC, "No space left on device (injected)", target)
            if not self.release.is_set():
                self.held.set()
                self.release.wait(30)
        return super().before_io(op, target)


class FailWrites(IoGate):
    """Fails every gated I/O (the gate sees writes, renames, fsyncs, removals) with ENOSPC
    while ``failing`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False

    def before_io(self, op: str, target: str) -> Any:
        if self.failing:
            raise OSError(errno.ENOSPC, "No space left on device (injected)", target)
        return super().before_io(op, target)


# ----------------------------------------------------------------------------- a stop
class TestStopAtAStep:
    def test_sentinel_stop_saves_a_full_checkpoint_after_joining_the_in_flight_write(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """With save_async the cadence save of step 2 is still in flight when the sentinel
        stops step 3: it is joined first, then iter_3 is saved synchronously, DONE.json
        names it with the reason, the sentinel is consumed and the StepEnd says so."""
        out, sentinels = tmp_path / "out", tmp_path / "logs"
        sentinels.mkdir()
        gate = HoldBackground()
        ckpt, objects = stopping(
            out, sentinels, "save_async=true", filesystem=OsFilesystem(gate=gate)
        )
        ckpt.resume()
        run_to(ckpt, objects, 2)  # the cadence save of step 2 goes to the background
        assert gate.held.wait(10)
        assert ckpt.run_state.writes.in_flight()
        (sentinels / SENTINEL).touch()
        threading.Timer(0.3, gate.release.set).start()
        caplog.set_level(logging.INFO, logger="statecraft")
        end = step(ckpt, objects)
        assert end
        assert end.stop
        assert end.reason == "sentinel"
        assert end.emergency is not None
        assert end.emergency.kind is EmergencyKind.CHECKPOINT
        assert end.emergency.path == "checkpoints/iter_000000003"
        assert end.saved is not None
        assert end.saved.iteration == 3
        assert not end.saved.asynchronous
        assert [s.iteration for s in ckpt.saves] == [2, 3]  # joined first, then the stop
        assert latest(out).endswith("iter_000000003")
        record = done(out)
        assert record["preempted"] == "sentinel"
        assert record["step"] == 3
        assert record["saved"]
        assert record["checkpoint"] == "checkpoints/iter_000000003"
        assert not (sentinels / SENTINEL).exists()
        assert (sentinels / f"{SENTINEL}.consumed").exists()
        assert "stopping at step 3: sentinel; emergency save checkpoint " in caplog.text
        assert "checkpoints/iter_000000003 durable in " in caplog.text
        assert ckpt.stopped is not None
        assert ckpt.stopped.reason == "sentinel"
        ckpt.close()

    def test_after_a_stop_finalize_writes_nothing_and_step_end_and_save_refuse(
        self, tmp_path: Path
    ) -> None:
        """finalize() after the stop returns the emergency save's report and writes nothing
        (no second DONE); step_end() and save() raise RunStoppedError naming the step and
        the reason; the committed bytes are unchanged."""
        out, sentinels = tmp_path / "out", tmp_path / "logs"
        sentinels.mkdir()
        ckpt, objects = stopping(out, sentinels)
        ckpt.resume()
        run_to(ckpt, objects, 2)
        os.kill(os.getpid(), signal.SIGUSR1)
        end = step(ckpt, objects)
        assert end.reason == "signal SIGUSR1"
        assert done(out)["preempted"] == "signal SIGUSR1"
        before = snapshot(out)
        assert ckpt.finalize() is end.saved
        assert ckpt.final is end
        assert snapshot(out) == before
        objects.step()
        ckpt.record(sc.Outcome.APPLIED)
        for call, name in ((ckpt.step_end, "step_end()"), (ckpt.save, "save()")):
            with pytest.raises(RunStoppedError) as caught:
                call()
            message = str(caught.value)
            assert f"{name} after the run was stopped at step 3 (signal SIGUSR1)" in message
            assert "break out of the loop and call finalize()" in message
            assert caught.value.step == 3
            assert caught.value.reason == "signal SIGUSR1"
        assert snapshot(out) == before
        ckpt.close()

    def test_a_failed_background_write_is_logged_and_the_emergency_save_goes_on(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The in-flight save of step 2 fails (ENOSPC on its thread): the stop at step 3
        logs it at ERROR naming iter_000000002 and still saves iter_3 and DONE."""
        out, sentinels = tmp_path / "out", tmp_path / "logs"
        sentinels.mkdir()
        gate = HoldBackground(fail=True)
        ckpt, objects = stopping(
            out, sentinels, "save_async=true", filesystem=OsFilesystem(gate=gate)
        )
        ckpt.resume()
        run_to(ckpt, objects, 2)
        (sentinels / SENTINEL).touch()
        caplog.set_level(logging.INFO, logger="statecraft")
        end = step(ckpt, objects)
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert any("background save of iter_000000002 failed" in r.getMessage() for r in errors)
        assert "going on with the emergency save of step 3" in caplog.text
        assert end.emergency is not None
        assert end.emergency.kind is EmergencyKind.CHECKPOINT
        assert done(out)["checkpoint"] == "checkpoints/iter_000000003"
        assert latest(out).endswith("iter_000000003")
        ckpt.close()

    def test_a_failed_emergency_save_writes_no_done_and_leaves_the_previous_checkpoint(
        self, tmp_path: Path
    ) -> None:
        """The emergency save of step 3 fails (ENOSPC on every write): step_end() raises the
        OSError itself (its original type), no DONE.json is written, the run is not marked
        stopped, and the committed iter_2 and latest are unchanged."""
        out, sentinels = tmp_path / "out", tmp_path / "logs"
        sentinels.mkdir()
        gate = FailWrites()
        ckpt, objects = stopping(out, sentinels, filesystem=OsFilesystem(gate=gate))
        ckpt.resume()
        run_to(ckpt, objects, 2)
        before = {k: v for k, v in snapshot(out).items() if "iter_000000002" in k or "latest" in k}
        (sentinels / SENTINEL).touch()
        gate.failing = True
        with pytest.raises(OSError, match=r"No space left on device \(injected\)"):
            step(ckpt, objects)
        gate.failing = False
        assert not (attempt_dir(out) / DONE_FILE).exists()
        assert ckpt.stopped is None
        after = {k: v for k, v in snapshot(out).items() if "iter_000000002" in k or "latest" in k}
        assert after == before
        assert latest(out).endswith("iter_000000002")
        assert not (attempt_dir(out) / "checkpoints" / "iter_000000003" / "manifest.json").exists()
        ckpt.close()

    def test_a_stop_without_resume_in_an_attempt_with_commits_is_refused(
        self, tmp_path: Path
    ) -> None:
        """A process that did not resume() into an attempt holding iter_2 is stopped by the
        sentinel: ResumeRequiredError naming resume(), nothing written, no DONE."""
        out, sentinels = tmp_path / "out", tmp_path / "logs"
        sentinels.mkdir()
        ckpt, objects = stopping(out, sentinels)
        ckpt.resume()
        run_to(ckpt, objects, 2)
        ckpt.close()  # no finalize(): no DONE.json
        before = snapshot(out)
        ckpt, objects = stopping(out, sentinels)
        (sentinels / SENTINEL).touch()
        with pytest.raises(ResumeRequiredError, match=r"resume\(\)"):
            step(ckpt, objects)
        assert snapshot(out) == before
        assert not (attempt_dir(out) / DONE_FILE).exists()
        ckpt.close()

    def test_requeue_resumes_the_emergency_checkpoint_bit_for_bit(self, tmp_path: Path) -> None:
        """Stopped by SIGUSR1 at step 3, the unchanged command resumes iter_3 (resume=auto),
        logs the previous window, and training to 6 equals an uninterrupted run."""
        out, sentinels = tmp_path / "out", tmp_path / "logs"
        sentinels.mkdir()
        ckpt, objects = stopping(out, sentinels)
        ckpt.resume()
        run_to(ckpt, objects, 2)
        os.kill(os.getpid(), signal.SIGUSR1)
        assert step(ckpt, objects).stop
        ckpt.finalize()
        ckpt.close()
        again, _ = stopping(out, sentinels)
        result = again.resume()
        assert result.step == 3
        assert result.source.endswith("iter_000000003")
        again.close()
        assert_same(requeue(out, sentinels, 6), uninterrupted(tmp_path, 6))
        assert done(out)["preempted"] is None
        assert done(out)["step"] == 6

    def test_resume_logs_the_previous_window(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """resume() in the stopped attempt logs 'previous window ended at step 3: preempted:
        sentinel'; after a normal finalize it logs '...: completed'."""
        out, sentinels = tmp_path / "out", tmp_path / "logs"
        sentinels.mkdir()
        ckpt, objects = stopping(out, sentinels)
        ckpt.resume()
        (sentinels / SENTINEL).touch()
        assert run_to(ckpt, objects, 5).stop
        ckpt.close()
        caplog.set_level(logging.INFO, logger="statecraft")
        ckpt, objects = stopping(out, sentinels)
        ckpt.resume()
        assert "previous window ended at step 1: preempted: sentinel" in caplog.text
        run_to(ckpt, objects, 2)
        ckpt.finalize()
        ckpt.close()
        caplog.clear()
        ckpt, _ = stopping(out, sentinels)
        ckpt.resume()
        assert "previous window ended at step 2: completed" in caplog.text
        ckpt.close()

    def test_a_damaged_done_record_is_a_warning_and_changes_nothing(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A DONE.json that is not JSON: resume() warns naming the file and resumes as it
        would without it; the file is left as it is."""
        out, sentinels = tmp_path / "out", tmp_path / "logs"
        sentinels.mkdir()
        ckpt, objects = stopping(out, sentinels)
        ckpt.resume()
        run_to(ckpt, objects, 2)
        ckpt.finalize()
        ckpt.close()
        (attempt_dir(out) / DONE_FILE).write_text("{not json")
        before = snapshot(out)
        caplog.set_level(logging.INFO, logger="statecraft")
        ckpt, _ = stopping(out, sentinels)
        assert ckpt.resume().step == 2
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("ignoring the previous window's end record" in w for w in warnings)
        assert any(f"{DONE_FILE}: is not JSON" in w for w in warnings)
        ckpt.close()
        assert snapshot(out) == before


# ----------------------------------------------------------------------------- coverage
class TestSkipByCoverage:
    def test_save_then_a_stop_at_the_same_step_is_covered(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """save() at step 3, then a stop at the same step: COVERED, nothing written, DONE
        names the checkpoint already on disk (saved: false)."""
        out, sentinels = tmp_path / "out", tmp_path / "logs"
        sentinels.mkdir()
        ckpt, objects = stopping(out, sentinels)
        ckpt.resume()
        run_to(ckpt, objects, 3)
        ckpt.save()
        committed = {k: v for k, v in snapshot(out).items() if "iter_" in k}
        (sentinels / SENTINEL).touch()
        caplog.set_level(logging.INFO, logger="statecraft")
        end = ckpt.step_end()  # the same step, after the save
        assert end.stop
        assert end.emergency is not None
        assert end.emergency.kind is EmergencyKind.COVERED
        assert end.saved is None
        assert {k: v for k, v in snapshot(out).items() if "iter_" in k} == committed
        record = done(out)
        assert record["checkpoint"] == "checkpoints/iter_000000003"
        assert not record["saved"]
        assert (
            "stopping at step 3: sentinel; emergency save already on disk "
            "(checkpoints/iter_000000003), nothing saved"
        ) in caplog.text
        ckpt.close()

    def _validated_artifact_stop(
        self, tmp_path: Path, *overrides: str
    ) -> tuple[Path, sc.Checkpointer, Any]:
        """Validation every 2 with a saving [model] plan and no cadence save: step 2 commits
        a validation artifact [model]; then the sentinel stops step 2 again."""
        out, sentinels = tmp_path / "out", tmp_path / "logs"
        sentinels.mkdir()
        ckpt, objects = stopping(
            out,
            sentinels,
            "save_every=0",
            "validation.every=2",
            "validation.save_checkpoint=true",
            "validation.checkpoint_components=[model]",
            *overrides,
        )
        ckpt.validate_with(lambda step: {"loss": 1.0 / step}, source="heldout")
        ckpt.resume()
        end = run_to(ckpt, objects, 2)
        assert end.artifact is not None
        assert end.artifact.components == ("model",)
        (sentinels / SENTINEL).touch()
        return out, ckpt, ckpt.step_end()

    def test_run_plan_model_is_covered_by_a_validation_artifact_carrying_the_model(
        self, tmp_path: Path
    ) -> None:
        """run plan [model] with the step's validation artifact [model]: COVERED, DONE names
        the artifact."""
        with pytest.warns(UserWarning, match="a partial plan; validation saves"):
            out, ckpt, end = self._validated_artifact_stop(
                tmp_path, "emergency_checkpoint_components=run", "checkpoint_components=[model]"
            )
        assert end.emergency.kind is EmergencyKind.COVERED
        assert done(out)["checkpoint"] == "checkpoint_artifacts/iter_000000002"
        assert not (attempt_dir(out) / "checkpoints" / "iter_000000002").exists()
        ckpt.close()

    def test_full_plan_with_only_a_validation_artifact_writes_a_full_checkpoint(
        self, tmp_path: Path
    ) -> None:
        """full plan with only a validation artifact [model] of the step: a full checkpoint
        iter_2 is written and latest names it."""
        with pytest.warns(UserWarning, match="a partial plan; validation saves"):
            out, ckpt, end = self._validated_artifact_stop(tmp_path)
        assert end.emergency.kind is EmergencyKind.CHECKPOINT
        assert end.saved is not None
        assert done(out)["checkpoint"] == "checkpoints/iter_000000002"
        assert latest(out).endswith("iter_000000002")
        ckpt.close()

    def test_run_plan_not_covered_by_the_validation_plan_is_refused(self) -> None:
        """run + checkpoint_components=[model, training_state] with a saving validation plan
        [model] is a ConfigError naming emergency_checkpoint_components."""
        with pytest.raises(ConfigError) as caught:
            sc.CheckpointConfig.load(
                None,
                [
                    "emergency_checkpoint_components=run",
                    "checkpoint_components=[model, training_state]",
                    "validation.save_checkpoint=true",
                    "validation.checkpoint_components=[model]",
                ],
            )
        message = str(caught.value)
        assert "emergency_checkpoint_components" in message
        assert "validation.checkpoint_components" in message

    def test_run_plan_model_only_writes_an_artifact_and_a_requeue_refuses_it(
        self, tmp_path: Path
    ) -> None:
        """run plan [model] (no cadence), stop at step 1: the artifact
        checkpoint_artifacts/iter_1, no latest pointer; the requeued resume=auto refuses with
        the ArtifactResumeError message (the warm start is documented); nothing changed."""
        out, sentinels = tmp_path / "out", tmp_path / "logs"
        sentinels.mkdir()
        plan = ("save_every=0", "emergency_checkpoint_components=run")
        ckpt, objects = stopping(out, sentinels, *plan, "checkpoint_components=[model]")
        ckpt.resume()
        (sentinels / SENTINEL).touch()
        end = run_to(ckpt, objects, 5)
        assert end.emergency.kind is EmergencyKind.ARTIFACT
        assert end.artifact is not None
        assert end.artifact.components == ("model",)
        assert end.saved is None
        assert end.emergency.path == "checkpoint_artifacts/iter_000000001"
        assert (attempt_dir(out) / "checkpoint_artifacts" / "iter_000000001").is_dir()
        assert not (attempt_dir(out) / "checkpoints" / "latest_checkpoint.txt").exists()
        assert done(out)["checkpoint"] == "checkpoint_artifacts/iter_000000001"
        ckpt.close()
        before = snapshot(out)
        again, _ = stopping(out, sentinels, *plan, "checkpoint_components=[model]")
        with pytest.raises(ArtifactResumeError) as caught:
            again.resume()
        message = str(caught.value)
        assert message.startswith("resume=auto refused: the attempt holds the ")
        assert "iter_000000001" in message
        assert "no resumable checkpoint" in message
        again.close()
        assert snapshot(out) == before

    def test_run_plan_artifact_leaves_latest_on_the_previous_full_checkpoint(
        self, tmp_path: Path
    ) -> None:
        """A full checkpoint iter_2 from an earlier window, then a window with the run plan
        [model] stopped at step 3: checkpoint_artifacts/iter_3, latest still names iter_2,
        and the requeue refuses (the artifact is newer than any full checkpoint)."""
        out, sentinels = tmp_path / "out", tmp_path / "logs"
        sentinels.mkdir()
        ckpt, objects = stopping(out, sentinels)
        ckpt.resume()
        run_to(ckpt, objects, 2)
        ckpt.finalize()
        ckpt.close()
        plan = ("save_every=0", "emergency_checkpoint_components=run")
        ckpt, objects = stopping(out, sentinels, *plan, "checkpoint_components=[model]")
        ckpt.resume()
        (sentinels / SENTINEL).touch()
        end = run_to(ckpt, objects, 5)
        assert end.emergency.kind is EmergencyKind.ARTIFACT
        assert end.emergency.path == "checkpoint_artifacts/iter_000000003"
        assert latest(out).endswith("iter_000000002")
        ckpt.close()
        again, _ = stopping(out, sentinels, *plan, "checkpoint_components=[model]")
        with pytest.raises(ArtifactResumeError, match=r"\(iteration 2\) is older than the "):
            again.resume()
        again.close()


# ----------------------------------------------------------------------------- validation
class TestValidationDueAtTheStop:
    def test_a_due_validation_becomes_an_evaluation_pending_checkpoint(
        self, tmp_path: Path
    ) -> None:
        """Validation due at step 2 when the sentinel stops it: an evaluation-pending full
        checkpoint, no evaluation ran; the requeued resume evaluates it, then publishes, and
        training on equals an uninterrupted run."""
        out, sentinels = tmp_path / "out", tmp_path / "logs"
        sentinels.mkdir()
        knobs = ("save_every=4", "validation.every=2", "validation.save_checkpoint=true")
        calls: list[int] = []

        def evaluate(step: int) -> dict[str, float]:
            calls.append(step)
            return {"loss": 1.0 / step}

        ckpt, objects = stopping(out, sentinels, *knobs)
        ckpt.validate_with(evaluate, source="heldout")
        ckpt.resume()
        step(ckpt, objects)
        (sentinels / SENTINEL).touch()
        end = step(ckpt, objects)
        assert end.emergency.kind is EmergencyKind.EVALUATION_PENDING
        assert calls == []
        assert not end.validated
        assert end.metrics is None
        iteration = attempt_dir(out) / "checkpoints" / "iter_000000002"
        assert not [p for p in iteration.iterdir() if "validation" in p.name]
        ckpt.finalize()
        ckpt.close()
        again, objects = stopping(out, sentinels, *knobs)
        again.validate_with(evaluate, source="heldout")
        result = again.resume()
        assert calls == [2]
        assert result.metrics == {"loss": 0.5}
        run_to(again, objects, 6)
        again.finalize()
        again.close()
        reference_calls: list[int] = []
        ref, ref_objects = open_checkpointer(tmp_path / "reference", *knobs)
        ref.validate_with(lambda s: reference_calls.append(s) or {"loss": 1.0 / s}, source="x")
        ref.resume()
        run_to(ref, ref_objects, 6)
        ref.finalize()
        ref.close()
        assert_same(state_of(objects), state_of(ref_objects))


# ----------------------------------------------------------------------------- the watch
class TestTheWatch:
    def test_a_deadline_in_the_past_stops_at_the_first_boundary(self, tmp_path: Path) -> None:
        """termination.deadline in the past: the first boundary after an update stops with
        reason deadline and saves iter_1."""
        ckpt, objects = open_checkpointer(tmp_path / "out", "termination.deadline=1000000000")
        ckpt.resume()
        end = step(ckpt, objects)
        assert end.stop
        assert end.reason == "deadline"
        assert end.emergency.path == "checkpoints/iter_000000001"
        ckpt.close()

    def test_disabled_termination_never_stops(self, tmp_path: Path) -> None:
        """termination.enabled=false with a sentinel, a past deadline and a delivered SIGUSR1:
        the loop runs to the end and finalize writes DONE with preempted null."""
        out, sentinels = tmp_path / "out", tmp_path / "logs"
        sentinels.mkdir()
        (sentinels / SENTINEL).touch()
        ckpt, objects = stopping(
            out, sentinels, "termination.enabled=false", "termination.deadline=1000000000"
        )
        ckpt.resume()
        previous = signal.signal(signal.SIGUSR1, lambda *_: None)
        try:
            os.kill(os.getpid(), signal.SIGUSR1)
            assert run_to(ckpt, objects, 4) is not None
        finally:
            signal.signal(signal.SIGUSR1, previous)
        assert ckpt.stopped is None
        assert ckpt.step == 4
        ckpt.finalize()
        assert done(out)["preempted"] is None
        assert done(out)["step"] == 4
        assert (sentinels / SENTINEL).exists()
        ckpt.close()

    def test_close_uninstalls_the_handlers_resume_installed(self, tmp_path: Path) -> None:
        """resume() installs statecraft's SIGUSR1 / SIGTERM handlers; close() restores the
        previous ones."""
        before = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGTERM)}
        ckpt, _ = open_checkpointer(tmp_path / "out")
        ckpt.resume()
        assert all(signal.getsignal(s) is not before[s] for s in before)
        ckpt.close()
        assert all(signal.getsignal(s) is before[s] for s in before)

    def test_a_failed_resume_installs_no_handler(self, tmp_path: Path) -> None:
        """resume() that raises (an explicit checkpoint that does not exist) leaves SIGUSR1
        and SIGTERM as they were: nothing would ever poll a flag-only handler."""
        before = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGTERM)}
        ckpt, _ = open_checkpointer(tmp_path / "out", f"resume={tmp_path / 'missing'}")
        with pytest.raises(CheckpointError):
            ckpt.resume()
        assert all(signal.getsignal(s) is before[s] for s in before)
        ckpt.close()

    def test_finalize_restores_the_handlers_after_a_normal_end_and_after_a_stop(
        self, tmp_path: Path
    ) -> None:
        """finalize() (normal, and after a SIGUSR1 stop) restores the previous handlers, so a
        later SIGTERM is not swallowed by a flag no boundary polls any more."""
        before = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGTERM)}
        ckpt, objects = open_checkpointer(tmp_path / "normal")
        ckpt.resume()
        run_to(ckpt, objects, 1)
        ckpt.finalize()
        assert all(signal.getsignal(s) is before[s] for s in before)
        ckpt.close()
        ckpt, objects = open_checkpointer(tmp_path / "stopped")
        ckpt.resume()
        os.kill(os.getpid(), signal.SIGUSR1)
        assert run_to(ckpt, objects, 3).reason == "signal SIGUSR1"
        assert signal.getsignal(signal.SIGUSR1) is not before[signal.SIGUSR1]
        ckpt.finalize()
        assert all(signal.getsignal(s) is before[s] for s in before)
        ckpt.close()

    def test_a_bad_slurm_deadline_fails_at_construction(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """termination.deadline=slurm without $SLURM_JOB_END_TIME is a ConfigError at
        Checkpointer(...) naming the knob and the variable; nothing is created."""
        monkeypatch.delenv("SLURM_JOB_END_TIME", raising=False)
        with pytest.raises(ConfigError) as caught:
            open_checkpointer(tmp_path / "out", "termination.deadline=slurm")
        assert "termination.deadline" in str(caught.value)
        assert "SLURM_JOB_END_TIME" in str(caught.value)
        assert not (tmp_path / "out").exists()
