"""End to end: model validation with a real torch loop in real processes.

A failed evaluation leaves the durable validation checkpoint evaluation-pending and a new
process's ``resume()`` re-runs the evaluation for that step; a SIGKILL after the evaluation
succeeded (inside publication) leaves it publication-pending and the resumed process
publishes without calling the evaluation again. Both resumed runs end bit-identical to an
uninterrupted run. Evaluation calls are counted through a file the child appends to.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from checkpoint_runs import Objects

import statecraft as sc
from statecraft.checkpoint.kernel.layout import LATEST_POINTER, parse_latest
from statecraft.checkpoint.kernel.validation_records import (
    EVALUATED_RECORD,
    PUBLISHED_RECORD,
    ValidationStage,
    read_stage,
)
from statecraft.checkpoint.state import TrainerState
from statecraft.errors import TrackingError, ValidationFailedError, ValidationIdentityError
from statecraft.storage.local import LocalStore

STEPS = 7
#: validation every 3 steps (durable: save_checkpoint=true, the full plan), saves every 4:
#: iter_3 and iter_6 are validation checkpoints, iter_4 a regular one, iter_7 the union of
#: the final save and the final validation (one durable validation save).
CONFIG = [
    "save_every=4",
    "save_async=false",
    "keep_optim_last=0",
    "validation.every=3",
    "validation.save_checkpoint=true",
]
RUN = sc.RunIdentity("proj", "group", "name")

CHILD = textwrap.dedent(
    """
    import json, os, signal, sys
    sys.path.insert(0, os.environ["TESTS_DIR"])
    import torch
    import statecraft as sc
    from checkpoint_runs import Objects
    from statecraft.storage import OsFilesystem

    class KillAtPublish:
        '''SIGKILL this process at the first I/O of the published record of KILL_AT.'''
        def before_io(self, op, target):
            kill_at = os.environ.get("KILL_AT")
            if kill_at and f"iter_{int(kill_at):09d}" in target and (
                "validation-publication-published" in target
            ):
                os.kill(os.getpid(), signal.SIGKILL)
            return None

    out, steps, calls = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    config = json.loads(os.environ["CONFIG"])
    objects = Objects()
    heldout = torch.randn(16, 4, generator=torch.Generator().manual_seed(99))

    def evaluate(step):
        with open(calls, "a") as f:
            f.write(f"{step}\\n")
        if os.environ.get("FAIL_AT") == str(step):
            raise RuntimeError(f"held-out loader broke at step {step}")
        with torch.no_grad():
            return {"val_loss": float(objects.model(heldout).pow(2).mean())}

    ckpt = sc.Checkpointer(
        sc.CheckpointConfig.load(None, config),
        run=sc.RunIdentity("proj", "group", "name"),
        output_root=out,
        filesystem=OsFilesystem(gate=KillAtPublish()),
    )
    ckpt.track(model=objects.model, optimizer=objects.optimizer,
               scheduler=objects.scheduler, data=objects.cursor)
    ckpt.validate_with(evaluate, source="heldout-16")
    start = ckpt.resume()
    print("resumed", start.step, start.validation_stage.value, flush=True)
    for _ in range(start.step, steps):
        objects.step()
        ckpt.record(sc.Outcome.APPLIED)
        end = ckpt.step_end()
        if end.validated:
            print("validated", ckpt.step, flush=True)
    ckpt.finalize()
    torch.save(objects.model.state_dict(), os.path.join(out, "final_model.pt"))
    print("done", ckpt.step, flush=True)
    """
)


def launch(
    out: Path, script: Path, calls: Path, *, fail_at: int = 0, kill_at: int = 0
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "TESTS_DIR": str(Path(__file__).resolve().parents[1]),
        "CONFIG": json.dumps(CONFIG),
        "FAIL_AT": str(fail_at) if fail_at else "",
        "KILL_AT": str(kill_at) if kill_at else "",
    }
    return subprocess.run(
        [sys.executable, str(script), str(out), str(STEPS), str(calls)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def checkpoints(out: Path) -> Path:
    (attempt,) = (p for p in (out / "proj" / "group" / "name").iterdir() if p.is_dir())
    return attempt / "checkpoints"


def stage_of(out: Path, iteration: int) -> ValidationStage:
    store = LocalStore(str(checkpoints(out)))
    name = f"iter_{iteration:09d}"
    path = checkpoints(out) / name / "trainer.pt"
    trainer = TrainerState.from_payload(torch.load(path, weights_only=True), source=str(path))
    return read_stage(store, iteration, trainer.validation).stage


def calls_of(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("child") / "train.py"
    path.write_text(CHILD)
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, script: Path) -> tuple[Path, Path]:
    """An uninterrupted run: its output root and its evaluation calls."""
    base = tmp_path_factory.mktemp("reference")
    out, calls = base / "out", base / "calls.txt"
    child = launch(out, script, calls)
    assert child.returncode == 0, child.stderr
    return out, calls


@pytest.mark.slow
def test_uninterrupted_run_publishes_every_validation_checkpoint(reference):
    """Without faults, iter_3, iter_6 and iter_7 are published and iter_4 is a plain save."""
    out, calls = reference
    assert calls_of(calls) == [3, 6, 7]
    assert [stage_of(out, i) for i in (3, 4, 6, 7)] == [
        ValidationStage.PUBLISHED,
        ValidationStage.NONE,
        ValidationStage.PUBLISHED,
        ValidationStage.PUBLISHED,
    ]


@pytest.mark.slow
def test_failed_evaluation_leaves_pending_and_resume_retries_it(tmp_path, script, reference):
    """An evaluation that raises at step 3 stops the loop with ValidationFailedError and
    leaves iter_3 evaluation-pending (and adopted by resume=auto); the next process re-runs
    the evaluation of step 3, publishes it, and ends bit-identical to the uninterrupted run."""
    out, calls = tmp_path / "out", tmp_path / "calls.txt"
    first = launch(out, script, calls, fail_at=3)
    assert first.returncode == 1
    assert "ValidationFailedError" in first.stderr
    assert "held-out loader broke at step 3" in first.stderr
    assert calls_of(calls) == [3]
    ckpts = checkpoints(out)
    assert stage_of(out, 3) is ValidationStage.EVALUATION_PENDING
    assert not (ckpts / "iter_000000003" / EVALUATED_RECORD).exists()
    assert parse_latest((ckpts / LATEST_POINTER).read_bytes()) == 3  # adopted by resume=auto

    second = launch(out, script, calls)
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[0] == "resumed 3 evaluation_pending"
    assert calls_of(calls) == [3, 3, 6, 7]  # step 3 evaluated again, by the resumed process
    assert [stage_of(out, i) for i in (3, 6, 7)] == [ValidationStage.PUBLISHED] * 3
    ref_out, _ = reference
    final = torch.load(out / "final_model.pt", weights_only=True)
    expected = torch.load(ref_out / "final_model.pt", weights_only=True)
    assert final.keys() == expected.keys()
    assert all(torch.equal(final[k], expected[k]) for k in final)


@pytest.mark.slow
def test_kill_after_evaluation_resumes_publication_only(tmp_path, script, reference):
    """A SIGKILL at the start of iter_3's publication (its evaluation durably recorded)
    leaves it publication-pending; the resumed process publishes it without calling the
    evaluation again, and the run ends bit-identical to the uninterrupted one."""
    out, calls = tmp_path / "out", tmp_path / "calls.txt"
    first = launch(out, script, calls, kill_at=3)
    assert first.returncode == -9, first.stderr
    assert calls_of(calls) == [3]
    name = checkpoints(out) / "iter_000000003"
    assert (name / EVALUATED_RECORD).exists()
    assert not (name / PUBLISHED_RECORD).exists()
    assert stage_of(out, 3) is ValidationStage.PUBLICATION_PENDING

    second = launch(out, script, calls)
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[0] == "resumed 3 publication_pending"
    assert calls_of(calls) == [3, 6, 7]  # step 3 was NOT evaluated again
    assert stage_of(out, 3) is ValidationStage.PUBLISHED
    ref_out, _ = reference
    final = torch.load(out / "final_model.pt", weights_only=True)
    expected = torch.load(ref_out / "final_model.pt", weights_only=True)
    assert all(torch.equal(final[k], expected[k]) for k in final)


@pytest.mark.slow
def test_pending_checkpoint_without_validate_with_is_refused(tmp_path, script):
    """Resuming an evaluation-pending checkpoint in a process that registered no
    evaluation fails naming ckpt.validate_with and the checkpoint, and changes nothing."""
    out, calls = tmp_path / "out", tmp_path / "calls.txt"
    assert launch(out, script, calls, fail_at=3).returncode == 1
    before = tree_bytes(out)
    objects = Objects()
    ckpt = sc.Checkpointer(sc.CheckpointConfig.load(None, CONFIG), run=RUN, output_root=out)
    ckpt.track(
        model=objects.model,
        optimizer=objects.optimizer,
        scheduler=objects.scheduler,
        data=objects.cursor,
    )
    with pytest.raises(ValidationIdentityError, match=r"ckpt\.validate_with") as caught:
        ckpt.resume()
    assert "iter_000000003" in str(caught.value)
    ckpt.close()
    after = tree_bytes(out)
    assert {k: v for k, v in after.items() if ".lease" not in k} == {
        k: v for k, v in before.items() if ".lease" not in k
    }


def test_in_process_failure_reaches_the_loop_and_validate_with_after_resume_is_refused(
    tmp_path,
):
    """In one process: validate_with after resume() is a TrackingError naming the fix, and a
    failed evaluation raises ValidationFailedError from step_end with the step."""
    objects = Objects()
    ckpt = sc.Checkpointer(sc.CheckpointConfig.load(None, CONFIG), run=RUN, output_root=tmp_path)
    ckpt.track(model=objects.model, optimizer=objects.optimizer)

    def evaluate(step: int) -> dict[str, float]:
        raise ValueError("no held-out data")

    ckpt.validate_with(evaluate, source="none")
    ckpt.resume()
    with pytest.raises(TrackingError, match=r"before ckpt\.resume\(\)"):
        ckpt.validate_with(evaluate)
    for _ in range(2):
        objects.step()
        ckpt.record(sc.Outcome.APPLIED)
        assert not ckpt.step_end().validated
    objects.step()
    ckpt.record(sc.Outcome.APPLIED)
    with pytest.raises(ValidationFailedError, match="no held-out data") as caught:
        ckpt.step_end()
    assert caught.value.step == 3
    assert ckpt.last_saved_step == 3  # the evaluation-pending checkpoint stays committed
    assert stage_of(tmp_path, 3) is ValidationStage.EVALUATION_PENDING


def test_the_user_guide_example_runs(tmp_path, capsys):
    """docs/checkpointing.md's validation example runs as written: it validates at steps 5,
    10, 15 and 20 and publishes each durable validation checkpoint."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "checkpointing.md").read_text()
    after = text.split("<!-- example: validation", 1)[1]
    code = after.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "checkpointing.md", "exec"), {"out": tmp_path})
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["step 5", "step 10", "step 15", "step 20"]
    job = tmp_path / "default" / "default" / "linear"
    ckpts = next(p for p in job.iterdir() if p.is_dir()) / "checkpoints"
    store = LocalStore(str(ckpts))
    for iteration in (5, 10, 15, 20):
        path = ckpts / f"iter_{iteration:09d}" / "trainer.pt"
        trainer = TrainerState.from_payload(torch.load(path, weights_only=True), source=str(path))
        assert read_stage(store, iteration, trainer.validation).stage is ValidationStage.PUBLISHED


def test_an_explicit_pending_source_is_resumed_but_never_written(tmp_path, caplog):
    """resume=<a pending iter_3> loads it into a new attempt, warns that its validation is
    not finished there (statecraft never writes into an explicit source), and leaves the
    source's bytes as they were."""
    objects = Objects()
    ckpt = sc.Checkpointer(sc.CheckpointConfig.load(None, CONFIG), run=RUN, output_root=tmp_path)
    ckpt.track(model=objects.model, optimizer=objects.optimizer)

    def failing(step: int) -> dict[str, float]:
        raise ValueError("no held-out data")

    ckpt.validate_with(failing, source="heldout")
    ckpt.resume()
    for _ in range(3):
        objects.step()
        ckpt.record(sc.Outcome.APPLIED)
        try:
            ckpt.step_end()
        except ValidationFailedError:
            pass
    ckpt.close()
    source = checkpoints(tmp_path) / "iter_000000003"
    before = tree_bytes(source)
    again = sc.Checkpointer(
        sc.CheckpointConfig.load(None, [*CONFIG, f"resume={source}"]), run=RUN, output_root=tmp_path
    )
    fresh = Objects()
    again.track(model=fresh.model, optimizer=fresh.optimizer)
    again.validate_with(lambda step: {"val_loss": 0.5}, source="heldout")
    with caplog.at_level("WARNING", logger="statecraft"):
        result = again.resume()
    assert result.step == 3
    assert result.validation_stage is ValidationStage.EVALUATION_PENDING
    assert "is not finished here" in caplog.text
    assert tree_bytes(source) == before
    again.close()
