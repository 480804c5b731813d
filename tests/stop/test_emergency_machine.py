"""The emergency transaction on a real filesystem with real torch objects: the table's paths
(save, covered, failed save, a due validation, a restarted process), the DONE.json record's
round trip and its refusal when damaged, and what read_step_coverage counts."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from statecraft.checkpoint.config import CheckpointConfig
from statecraft.checkpoint.kernel.layout import RunAttempt, iter_dirname
from statecraft.checkpoint.kernel.machines import shipped_machine
from statecraft.checkpoint.kernel.retention_marks import INVALIDATED_MARKER, WEIGHTS_ONLY_MARKER
from statecraft.checkpoint.save.saving import save_full_checkpoint
from statecraft.checkpoint.stop.bindings import (
    EmergencyContext,
    read_step_coverage,
    run_emergency,
    write_emergency,
)
from statecraft.checkpoint.stop.bindings import write_done as write_done_effect
from statecraft.checkpoint.stop.emergency_plan import EmergencyBoundary, StepCoverage
from statecraft.checkpoint.stop.records import DONE_FILE, EmergencyKind, StopDecision
from statecraft.checkpoint.stop.run_done import done_record, read_done, write_done
from statecraft.errors import CheckpointCorruptError, CheckpointError
from statecraft.parallel.collectives import SingleProcess
from statecraft.proofs.artifacts.scenarios import artifact_context
from statecraft.proofs.save.scenarios import save_context
from statecraft.proofs.training import rng_at, tracked_at
from statecraft.proofs.validation.scenarios import save_evaluation_pending
from statecraft.storage.local import LocalStore

REASON = "signal SIGTERM"


def attempt_at(tmp_path: Path) -> RunAttempt:
    run_dir = tmp_path / "job" / "20260101000000"
    run_dir.mkdir(parents=True)
    return RunAttempt(run_dir, "20260101000000", False, False, "test")


def checkpoints(attempt: RunAttempt) -> LocalStore:
    return LocalStore(str(attempt.checkpoints_dir))


def commit_full(attempt: RunAttempt, step: int) -> None:
    ctx = save_context(checkpoints(attempt), step, with_data=False, salt=0)
    shipped_machine("save").recover(ctx).raise_for_failure()


def commit_artifact(attempt: RunAttempt, step: int, components: tuple[str, ...]) -> None:
    store = LocalStore(str(attempt.artifacts_dir))
    ctx = artifact_context(store, step, components, with_data=False, salt=0)
    shipped_machine("artifact").recover(ctx).raise_for_failure()


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` and its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


class Writes:
    """The context's ``write``: the production full save, recording each boundary."""

    def __init__(self, attempt: RunAttempt, *, fails: bool = False) -> None:
        self.attempt = attempt
        self.fails = fails
        self.boundaries: list[EmergencyBoundary] = []

    def __call__(self, boundary: EmergencyBoundary) -> str:
        self.boundaries.append(boundary)
        if self.fails:
            raise OSError(28, "No space left on device", str(self.attempt.checkpoints_dir))
        step = 4
        store = checkpoints(self.attempt)
        if boundary.kind is EmergencyKind.EVALUATION_PENDING:
            save_evaluation_pending(store, step, salt=1, location=store.describe())
        else:
            save_full_checkpoint(
                tracked_at(step, salt=1),
                store,
                rng=rng_at(step),
                data=None,
                step=step,
                lease=None,
                machine=shipped_machine("save"),
                location=store.describe(),
            )
        return f"checkpoints/{iter_dirname(step)}"


def context(
    attempt: RunAttempt,
    write: Callable[[EmergencyBoundary], str],
    *,
    validation_due: bool = False,
    config: CheckpointConfig | None = None,
) -> EmergencyContext:
    return EmergencyContext(
        config=config or CheckpointConfig(),
        decision=StopDecision(True, REASON, (0,), decided_at=100.0),
        step=4,
        validation_due=validation_due,
        attempt=attempt,
        filesystem=None,
        write=write,
        clock=lambda: 100.5,
    )


def run(ctx: EmergencyContext):
    return run_emergency(ctx, shipped_machine("emergency"), SingleProcess())


class TestTablePaths:
    def test_uncovered_step_saves_then_writes_done(self, tmp_path: Path) -> None:
        """A stop at an unsaved step saves the full plan once, then DONE.json records the
        reason and the committed directory."""
        attempt = attempt_at(tmp_path)
        commit_full(attempt, 2)
        writes = Writes(attempt)
        report = run(context(attempt, writes))
        assert [b.kind for b in writes.boundaries] == [EmergencyKind.CHECKPOINT]
        assert report.kind is EmergencyKind.CHECKPOINT
        assert report.path == "checkpoints/iter_000000004"
        assert report.components == ("model", "optimizer", "training_state")
        assert report.reason == REASON
        assert report.seconds_to_durable == pytest.approx(0.5)
        done = read_done(attempt, None)
        assert done is not None
        assert (done.step, done.preempted, done.checkpoint, done.saved) == (
            4,
            REASON,
            "checkpoints/iter_000000004",
            True,
        )
        assert read_step_coverage(attempt, None, 4).checkpoint

    def test_covered_step_writes_nothing_but_done(self, tmp_path: Path) -> None:
        """A step with a committed full checkpoint is not saved again: its bytes are
        unchanged and DONE.json names it with saved false."""
        attempt = attempt_at(tmp_path)
        commit_full(attempt, 4)
        before = snapshot(attempt.checkpoints_dir)
        writes = Writes(attempt)
        report = run(context(attempt, writes))
        assert writes.boundaries == []
        assert report.kind is EmergencyKind.COVERED
        assert report.path == "checkpoints/iter_000000004"
        assert snapshot(attempt.checkpoints_dir) == before
        done = read_done(attempt, None)
        assert done is not None
        assert done.saved is False
        assert done.checkpoint == "checkpoints/iter_000000004"

    def test_run_plan_covered_by_a_validation_artifact(self, tmp_path: Path) -> None:
        """A ``run`` plan ``[model]`` is covered by the step's validation artifact
        ``[model]``: nothing is written, DONE names the artifact."""
        attempt = attempt_at(tmp_path)
        commit_artifact(attempt, 4, ("model",))
        before = snapshot(attempt.run_dir)
        config = CheckpointConfig(
            emergency_checkpoint_components="run", checkpoint_components=("model",)
        )
        writes = Writes(attempt)
        report = run(context(attempt, writes, config=config))
        assert writes.boundaries == []
        assert report.kind is EmergencyKind.COVERED
        assert report.path == "checkpoint_artifacts/iter_000000004"
        after = snapshot(attempt.run_dir)
        assert set(after) - set(before) == {DONE_FILE}
        assert {k: v for k, v in after.items() if k != DONE_FILE} == before

    def test_validation_artifact_lacking_a_component_is_not_coverage(
        self, tmp_path: Path, caplog
    ) -> None:
        """A ``run`` plan ``[model, training_state]`` at a step whose validation artifact
        holds only ``[model]`` escalates to the full checkpoint, with a WARNING."""
        attempt = attempt_at(tmp_path)
        commit_artifact(attempt, 4, ("model",))
        config = CheckpointConfig(
            emergency_checkpoint_components="run",
            checkpoint_components=("model", "training_state"),
        )
        writes = Writes(attempt)
        with caplog.at_level(logging.WARNING, logger="statecraft.emergency"):
            report = run(context(attempt, writes, config=config))
        assert [b.escalated for b in writes.boundaries] == [True]
        assert report.kind is EmergencyKind.CHECKPOINT
        assert "lacks a component of the run plan" in caplog.text

    def test_damaged_artifact_of_the_step_escalates(self, tmp_path: Path, caplog) -> None:
        """A ``run`` plan at a step whose artifact's manifest does not verify saves the full
        checkpoint (the damaged commit is never re-committed), with a WARNING, and leaves the
        damaged artifact byte-identical."""
        attempt = attempt_at(tmp_path)
        commit_artifact(attempt, 4, ("model",))
        (attempt.artifacts_dir / iter_dirname(4) / "model.pt").write_bytes(b"torn")
        before = snapshot(attempt.artifacts_dir)
        config = CheckpointConfig(
            emergency_checkpoint_components="run", checkpoint_components=("model",)
        )
        writes = Writes(attempt)
        with caplog.at_level(logging.WARNING, logger="statecraft.emergency"):
            report = run(context(attempt, writes, config=config))
        assert [b.kind for b in writes.boundaries] == [EmergencyKind.CHECKPOINT]
        assert report.path == "checkpoints/iter_000000004"
        assert "holds a manifest that does not verify" in caplog.text
        assert snapshot(attempt.artifacts_dir) == before

    def test_due_validation_saves_evaluation_pending(self, tmp_path: Path) -> None:
        """A stop before a due validation writes the full evaluation-pending checkpoint."""
        attempt = attempt_at(tmp_path)
        writes = Writes(attempt)
        report = run(context(attempt, writes, validation_due=True))
        assert report.kind is EmergencyKind.EVALUATION_PENDING
        assert read_step_coverage(attempt, None, 4).checkpoint  # pending counts as covered

    def test_failed_save_raises_and_writes_no_done(self, tmp_path: Path) -> None:
        """The save's error propagates with its type; no DONE.json; the previous checkpoint
        and latest are byte-identical."""
        attempt = attempt_at(tmp_path)
        commit_full(attempt, 2)
        before = snapshot(attempt.run_dir)
        with pytest.raises(OSError, match="No space left on device"):
            run(context(attempt, Writes(attempt, fails=True)))
        assert not (attempt.run_dir / DONE_FILE).exists()
        assert snapshot(attempt.run_dir) == before

    def test_second_save_in_one_transaction_is_refused(self, tmp_path: Path) -> None:
        """write_emergency refuses a second save of the same stop, writing nothing."""
        attempt = attempt_at(tmp_path)
        writes = Writes(attempt)
        ctx = context(attempt, writes)
        shipped_machine("emergency").bindings.effects["decide"](ctx)
        write_emergency(ctx)
        before = snapshot(attempt.run_dir)
        with pytest.raises(CheckpointError, match="a second emergency save of step 4"):
            write_emergency(ctx)
        assert len(writes.boundaries) == 1
        assert snapshot(attempt.run_dir) == before

    def test_done_before_a_durable_save_is_refused(self, tmp_path: Path) -> None:
        """write_done refuses to run before a save is recorded durable, writing nothing."""
        attempt = attempt_at(tmp_path)
        ctx = context(attempt, Writes(attempt))
        with pytest.raises(CheckpointError, match="before the emergency save of step 4"):
            write_done_effect(ctx)
        assert not (attempt.run_dir / DONE_FILE).exists()

    @pytest.mark.parametrize(
        ("prepare", "label", "final"),
        [
            ("nothing", "nothing", "restarted"),
            ("saved", "durable", "restarted"),
            ("done", "done", "done"),
        ],
    )
    def test_restarted_process_never_saves_again(
        self, tmp_path: Path, prepare: str, label: str, final: str
    ) -> None:
        """A requeued process's recover observes the stop and ends without an effect."""
        attempt = attempt_at(tmp_path)
        if prepare in ("saved", "done"):
            commit_full(attempt, 4)
        if prepare == "done":
            record = done_record(
                step=4,
                preempted=REASON,
                checkpoint="checkpoints/iter_000000004",
                saved=True,
                seconds_to_durable=0.5,
            )
            write_done(attempt, None, record)
        before = snapshot(attempt.run_dir)
        writes = Writes(attempt)
        result = shipped_machine("emergency").recover(context(attempt, writes))
        assert (result.observed, result.final_state, result.trace) == (label, final, ())
        assert writes.boundaries == []
        assert snapshot(attempt.run_dir) == before


class TestDoneRecord:
    def test_round_trip(self, tmp_path: Path) -> None:
        """write_done then read_done gives the same record, schema statecraft.done.v1."""
        attempt = attempt_at(tmp_path)
        record = done_record(
            step=7, preempted=None, checkpoint=None, saved=False, seconds_to_durable=None
        )
        write_done(attempt, None, record)
        assert read_done(attempt, None) == record
        raw = json.loads((attempt.run_dir / DONE_FILE).read_text())
        assert raw["schema"] == "statecraft.done.v1"
        assert raw["preempted"] is None

    def test_record_breaking_the_schema_is_not_written(self, tmp_path: Path) -> None:
        """A record with an unknown stop reason is refused before anything is written."""
        attempt = attempt_at(tmp_path)
        record = done_record(
            step=4, preempted="bored", checkpoint=None, saved=False, seconds_to_durable=0.0
        )
        with pytest.raises(CheckpointError, match=r"refusing to write DONE\.json"):
            write_done(attempt, None, record)
        assert list(attempt.run_dir.iterdir()) == []

    def test_absent_is_none_and_creates_nothing(self, tmp_path: Path) -> None:
        """No DONE.json (or no run dir at all) reads as None; nothing is created."""
        attempt = attempt_at(tmp_path)
        assert read_done(attempt, None) is None
        missing = RunAttempt(tmp_path / "nope", "x", False, False, "test")
        assert read_done(missing, None) is None
        assert not (tmp_path / "nope").exists()

    @pytest.mark.parametrize(
        ("content", "problem"),
        [
            (b"{not json", "is not JSON"),
            (b'{"schema": "statecraft.done.v0"}', "is not a statecraft.done.v1 record"),
            (b"[]", "is not a statecraft.done.v1 record"),
            (None, "violates specs/done.schema.json"),
            (b'{"schema": "statecraft.done.v1", "step": "4"}', "violates specs/done.schema.json"),
        ],
    )
    def test_damaged_record_is_refused(
        self, tmp_path: Path, content: bytes | None, problem: str
    ) -> None:
        """A damaged DONE.json raises CheckpointCorruptError naming the file and the fix,
        and stays byte-identical."""
        attempt = attempt_at(tmp_path)
        path = attempt.run_dir / DONE_FILE
        if content is None:  # an unknown key beside valid ones
            record = done_record(
                step=1, preempted="sentinel", checkpoint=None, saved=False, seconds_to_durable=0.0
            )
            write_done(attempt, None, record)
            raw = json.loads(path.read_text())
            raw["extra"] = 1
            content = json.dumps(raw).encode()
        path.write_bytes(content)
        with pytest.raises(CheckpointCorruptError) as caught:
            read_done(attempt, None)
        message = str(caught.value)
        assert str(path) in message
        assert problem in message
        assert "move it aside" in message
        assert path.read_bytes() == content


class TestStepCoverage:
    def test_empty_attempt_covers_nothing(self, tmp_path: Path) -> None:
        """An attempt without checkpoints or artifacts covers nothing, and is not created."""
        attempt = attempt_at(tmp_path)
        assert read_step_coverage(attempt, None, 4) == StepCoverage()
        assert not attempt.checkpoints_dir.exists()
        assert not attempt.artifacts_dir.exists()

    def test_committed_and_pending_checkpoints_count(self, tmp_path: Path) -> None:
        """A committed full checkpoint and an evaluation-pending one both cover their step;
        another step is not covered."""
        attempt = attempt_at(tmp_path)
        commit_full(attempt, 4)
        save_evaluation_pending(checkpoints(attempt), 6, salt=0, location="checkpoints")
        assert read_step_coverage(attempt, None, 4) == StepCoverage(checkpoint=True)
        assert read_step_coverage(attempt, None, 6) == StepCoverage(checkpoint=True)
        assert read_step_coverage(attempt, None, 8) == StepCoverage()

    @pytest.mark.parametrize("damage", ["partial", "corrupt", "weights_only", "invalidated"])
    def test_damaged_or_marked_checkpoints_do_not_count(self, tmp_path: Path, damage: str) -> None:
        """A partial, corrupt, weights-only or invalidated iter_N covers nothing."""
        attempt = attempt_at(tmp_path)
        commit_full(attempt, 4)
        where = attempt.checkpoints_dir / iter_dirname(4)
        if damage == "partial":
            (where / ".posttrain-manifest.json").unlink()
        elif damage == "corrupt":
            (where / "model.pt").write_bytes(b"truncated")
        else:  # a damaged marker still counts (fail closed)
            marker = WEIGHTS_ONLY_MARKER if damage == "weights_only" else INVALIDATED_MARKER
            (where / marker).write_bytes(b"{}")
        assert read_step_coverage(attempt, None, 4) == StepCoverage()

    def test_committed_artifact_gives_its_plan(self, tmp_path: Path) -> None:
        """A committed artifact contributes its components; a partial one nothing."""
        attempt = attempt_at(tmp_path)
        commit_artifact(attempt, 4, ("model",))
        coverage = read_step_coverage(attempt, None, 4)
        assert not coverage.checkpoint
        assert coverage.artifact is not None
        assert coverage.artifact.components == ("model",)
        (attempt.artifacts_dir / iter_dirname(4) / ".posttrain-checkpoint-artifact.json").unlink()
        assert read_step_coverage(attempt, None, 4) == StepCoverage()

    def test_artifact_whose_manifest_does_not_verify_is_damaged(self, tmp_path: Path) -> None:
        """An artifact whose payload was torn after its commit covers nothing and is
        reported damaged (no artifact can be committed at that step)."""
        attempt = attempt_at(tmp_path)
        commit_artifact(attempt, 4, ("model",))
        (attempt.artifacts_dir / iter_dirname(4) / "model.pt").write_bytes(b"torn")
        assert read_step_coverage(attempt, None, 4) == StepCoverage(artifact_damaged=True)
