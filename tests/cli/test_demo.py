"""Tests of ``statecraft demo``, its comparator, its training process and the example loop.

The slow tests run real processes and SIGKILL them; every one writes only under ``tmp_path``
(``TMPDIR`` is pointed there for subprocesses).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from statecraft.checkpoint.kernel.layout import LATEST_POINTER, parse_latest
from statecraft.checkpoint.resume.bindings import verify_checkpoint
from statecraft.cli.demo import (
    SAVE_KILL_DELAY_S,
    DemoError,
    DemoReport,
    Launch,
    _choose_trigger,
    checkpoints_dir,
    committed_iterations,
    compare_checkpoints,
    render,
    run_demo,
    run_kill_demo,
)
from statecraft.cli.demo.launch import parse_progress
from statecraft.cli.demo.preempt import choose_preempt, stop_problems
from statecraft.cli.demo_train import ShuffledBatches, train
from statecraft.storage.local import LocalStore

REPO = Path(__file__).resolve().parents[2]


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "TMPDIR": str(tmp_path)}


def _statecraft_command() -> list[str]:
    script = Path(sys.executable).with_name("statecraft")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from statecraft.cli import main; sys.exit(main())"]


# ----------------------------------------------------------------------- fast unit tests
class TestValidatingTrainProcess:
    def test_validation_steps_print_evaluated_then_published(self, tmp_path):
        """With validate_every the training process evaluates at every validation step and
        publishes it (the durable path, synchronous), printing both lines after the save
        lines; a regular save is staged and its save-end comes at the next join."""
        threads = torch.get_num_threads()
        saved = random.getstate(), np.random.get_state(), torch.get_rng_state()
        stream = io.StringIO()
        try:
            train(str(tmp_path), steps=4, save_every=3, validate_every=2, stream=stream)
        finally:
            torch.set_num_threads(threads)
            random.setstate(saved[0])
            np.random.set_state(saved[1])
            torch.set_rng_state(saved[2])
        lines = [line.split()[:2] for line in stream.getvalue().splitlines()]
        assert lines == [
            ["resumed", "0"],
            ["step", "1"],
            ["step", "2"],
            ["save-begin", "2"],
            ["evaluated", "2"],
            ["save-end", "2"],
            ["published", "2"],
            ["step", "3"],
            ["save-begin", "3"],
            ["save-staged", "3"],  # the regular save is asynchronous: joined at step 4
            ["step", "4"],
            ["save-begin", "4"],
            ["evaluated", "4"],
            ["save-end", "3"],
            ["save-end", "4"],
            ["published", "4"],
            ["done", "4"],
        ]


class TestRenderValidation:
    def test_a_validation_kill_and_its_relaunch_read_pending_to_published(self):
        """The text report names the kill inside a validation, the stage it left on disk, and
        the relaunch finishing it (evaluated again only when it had not been recorded)."""
        killed = Launch("killed", 1, [], resumed_step=0, trigger="evaluated 20", killed=True)
        killed.killed_in_validation, killed.validation_state = 20, "evaluation_pending"
        killed.latest, killed.latest_verified = 20, True
        relaunch = Launch(
            "killed", 2, [], resumed_step=20, resume_source="a/checkpoints/iter_000000020"
        )
        relaunch.resumed_stage, relaunch.evaluated, relaunch.published = (
            "evaluation_pending",
            [20, 40],
            [20, 40],
        )
        report = DemoReport("out", 1, 40, 10, 1, 20, launches=[killed, relaunch])
        report.reference_published = report.killed_published = [20, 40]
        text = render(report)
        assert "validate every 20 (durable)" in text
        assert "INSIDE the validation of iter 20" in text
        assert "iter 20 on disk: committed, validation evaluation-pending" in text
        assert "(evaluation-pending -> evaluated again, published)" in text
        assert "validated (pending -> published) 40" in text
        assert "validation: published iterations: reference [20, 40], killed run [20, 40]" in text
        relaunch.resumed_stage = "publication_pending"
        relaunch.evaluated = [40]
        assert "(publication-pending -> evaluation not repeated, published)" in render(report)


def _stopped_launch(**changes: Any) -> Launch:
    """A killed-run launch that the sentinel stopped at step 27, as the demo records it."""
    launch = Launch("killed", 3, [], resumed_step=20, resume_source="a/checkpoints/iter_20")
    launch.action, launch.trigger, launch.sentinel_created = "sentinel", "step 26", True
    launch.stop_step, launch.stop_kind = 27, "checkpoint"
    launch.stop_path, launch.stop_seconds = "checkpoints/iter_000000027", 0.0412
    launch.stop_reason, launch.returncode, launch.done_step = "sentinel", 0, 27
    launch.done_record = {"step": 27, "preempted": "sentinel"}
    launch.sentinel_consumed, launch.stop_verified = True, True
    for name, value in changes.items():
        setattr(launch, name, value)
    return launch


class TestPreemption:
    def test_the_sentinel_lands_in_the_first_half_of_what_is_left(self):
        """The preemption's step line lies after the resume point, in the first half of the
        remaining steps; with fewer than two steps left there is none."""
        rng = random.Random(3)
        for resumed in range(58):
            trigger, delay = choose_preempt(rng, resumed, 60)
            what, number = trigger.split()
            assert (what, delay) == ("step", 0.0)
            assert resumed < int(number) <= max(resumed + 1, resumed + (60 - resumed) // 2)
        assert choose_preempt(rng, 59, 60) is None

    def test_a_stopped_line_parses_with_a_reason_that_has_spaces(self):
        """The stopped progress line gives the step, kind, path, seconds and the reason."""
        line = "stopped 27 checkpoint checkpoints/iter_000000027 0.0412 signal SIGTERM"
        assert parse_progress(line) == (
            "stopped",
            27,
            "checkpoint checkpoints/iter_000000027 0.0412 signal SIGTERM",
        )
        assert parse_progress("stopped 27 checkpoint path not-a-number sentinel") is None

    def test_the_report_shows_the_sentinel_the_emergency_save_and_the_exit_code(self):
        """The text names the sentinel's trigger, the stop step and reason, the emergency save
        and its time, the exit code, DONE.json, and the relaunch resuming at that step."""
        relaunch = Launch(
            "killed", 4, [], resumed_step=27, resume_source="a/checkpoints/iter_000000027"
        )
        relaunch.done_step, relaunch.returncode = 60, 0
        report = DemoReport("out", 1, 60, 10, 0, 0, True, [27])
        report.launches = [_stopped_launch(), relaunch]
        report.reference_checkpoints = [10, 20, 30, 40, 50, 60]
        text = render(report)
        assert "0 SIGKILL(s), 1 preemption through the sentinel file" in text
        assert (
            "sentinel SIGUSR1_RECEIVED created on 'step 26' -> stopped at step 27: sentinel; "
            "emergency save checkpoint checkpoints/iter_000000027 durable in 41 ms (verifies)"
        ) in text
        assert (
            "exit code 0; DONE.json: step 27, preempted: sentinel; sentinel renamed "
            "SIGUSR1_RECEIVED.consumed"
        ) in text
        assert (
            "preemption: launch 3 stopped at step 27 (sentinel), exit code 0; launch 4 (the "
            "unchanged command) resumed at step 27"
        ) in text
        assert "(emergency checkpoint [27] off the cadence)" in text

    @pytest.mark.parametrize(
        ("changes", "expected"),
        [
            (
                {"stop_step": None, "last_line": "done 60"},
                "killed launch 3: the sentinel created on 'step 26' did not stop the run (it "
                "ended with 'done 60', status 0)",
            ),
            ({"returncode": 1}, "killed launch 3 stopped but exited with status 1, not 0"),
            (
                {"done_record": {"step": 20, "preempted": None}},
                "killed launch 3: DONE.json says step 20, preempted None; expected step 27, "
                "preempted 'sentinel'",
            ),
            (
                {"stop_verified": False},
                "killed launch 3: the emergency checkpoint checkpoints/iter_000000027 does not "
                "verify",
            ),
            (
                {"sentinel_consumed": False},
                "killed launch 3: the sentinel was not renamed SIGUSR1_RECEIVED.consumed after "
                "the stop",
            ),
        ],
        ids=["did-not-stop", "exit-status", "done-record", "not-verified", "not-consumed"],
    )
    def test_each_broken_promise_of_a_stop_is_named(self, changes, expected):
        """A stop that did not happen, a non-zero exit, a wrong DONE.json, an emergency
        checkpoint that does not verify, or an unconsumed sentinel is one named problem."""
        assert stop_problems(_stopped_launch()) == []
        assert stop_problems(_stopped_launch(**changes)) == [expected]

    def test_only_the_emergency_checkpoint_may_be_an_extra_iteration(self):
        """The killed run may hold its off-cadence emergency checkpoint beyond the reference's
        iterations, nothing else; a missing preemption is not bit-exact either."""
        report = DemoReport("out", 1, 60, 10, 0, 0, True, [27])
        report.launches = [_stopped_launch()]
        report.final_iteration = 60
        report.reference_checkpoints = [10, 20, 30, 40, 50, 60]
        report.killed_checkpoints = [10, 20, 27, 30, 40, 50, 60]
        assert report.extra_checkpoints == [27]
        assert report.bit_exact
        report.killed_checkpoints = [10, 20, 27, 30, 35, 40, 50, 60]
        assert not report.bit_exact
        report.killed_checkpoints = [10, 20, 27, 30, 40, 50, 60]
        report.launches = []
        assert not report.bit_exact


class TestShuffledBatches:
    def test_restored_cursor_continues_with_the_same_batches_across_epochs(self):
        """A source restored from state_dict() yields exactly the batches the original does."""
        source = ShuffledBatches(10, 3, seed=5)
        for _ in range(4):  # into the second epoch (3 batches per epoch)
            source.next_indices()
        state = source.state_dict()
        expected = [source.next_indices() for _ in range(5)]
        restored = ShuffledBatches(10, 3, seed=0)
        restored.load_state_dict(state)
        assert all(torch.equal(restored.next_indices(), e) for e in expected)
        assert state == {"epoch": 1, "position": 3, "seed": 5}

    def test_malformed_state_is_rejected_with_the_fix(self):
        """load_state_dict refuses a state that is not three non-negative ints."""
        with pytest.raises(ValueError, match="pass what state_dict"):
            ShuffledBatches(10, 3, seed=0).load_state_dict({"epoch": 1, "position": -3, "seed": 0})


class TestChooseTrigger:
    def test_triggers_fall_after_the_resume_point_and_before_the_end(self):
        """Kill points lie after the resumed step; the final save is aimed at only when alone."""
        rng = random.Random(0)
        for resumed in range(40):
            for kind in ("step", "save-begin"):
                trigger, delay = _choose_trigger(rng, kind, resumed, 40, 5)
                what, number = trigger.split()
                assert resumed < int(number) <= 40
                if what == "step":
                    assert int(number) < 40
                    assert delay == 0
                else:
                    assert kind == "save-begin" or resumed == 39
                    assert 0 <= delay <= SAVE_KILL_DELAY_S
                    assert int(number) < 40 or resumed >= 35
        assert _choose_trigger(rng, "step", 40, 40, 5) is None

    def test_a_validation_kill_lands_on_an_evaluation_before_the_last_step(self):
        """Kind 'evaluated' aims at the evaluation of a validation step after the resume point
        and before the last step; with none left it falls back to a step kill."""
        rng = random.Random(0)
        for resumed in range(0, 40, 3):
            trigger, delay = _choose_trigger(rng, "evaluated", resumed, 40, 5, validate_every=10)
            what, number = trigger.split()
            if resumed < 30:
                assert what == "evaluated"
                assert int(number) % 10 == 0
                assert resumed < int(number) < 40
                assert delay == 0
            else:  # no validation before the last step left: an ordinary kill point
                assert what in ("step", "save-begin")


class TestRunDemoArguments:
    @pytest.mark.parametrize(("field", "value"), [("steps", 0), ("save_every", 0), ("kills", -1)])
    def test_out_of_range_argument_exits_2_with_a_json_error(self, field, value, capsys):
        """A bad --steps / --save-every / --kills is refused before any process starts."""
        args = argparse.Namespace(out=None, steps=10, save_every=5, seed=1, kills=1, json=True)
        setattr(args, field, value)
        assert run_demo(args) == 2
        envelope = json.loads(capsys.readouterr().out)
        assert envelope["status"] == "error"
        assert envelope["errors"][0]["code"] == "invalid_argument"
        assert f"--{field.replace('_', '-')}" in envelope["errors"][0]["message"]

    def test_non_empty_out_is_refused_because_the_runs_would_only_resume(self, tmp_path, capsys):
        """An --out that already holds files is refused (exit 2); the library raises DemoError."""
        (tmp_path / "old-run").mkdir()
        args = argparse.Namespace(
            out=str(tmp_path), steps=10, save_every=5, seed=1, kills=1, json=True
        )
        assert run_demo(args) == 2
        error = json.loads(capsys.readouterr().out)["errors"][0]
        assert "not an empty directory" in error["message"]
        with pytest.raises(DemoError, match="not an empty directory"):
            run_kill_demo(tmp_path, steps=10, save_every=5, kills=1, seed=1)


# ------------------------------------------------------------------------- comparator
@pytest.fixture(scope="module")
def real_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real demo checkpoint (iteration 2), trained in this process (global state restored)."""
    root = tmp_path_factory.mktemp("demo-run")
    threads = torch.get_num_threads()
    saved = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        train(str(root), steps=2, save_every=2, stream=io.StringIO())
    finally:
        torch.set_num_threads(threads)
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        torch.set_rng_state(saved[2])
    return checkpoints_dir(root) / "iter_000000002"


@pytest.fixture
def checkpoint_pair(real_checkpoint: Path, tmp_path: Path) -> tuple[Path, Path]:
    """Two identical copies of the real checkpoint."""
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(real_checkpoint, a)
    shutil.copytree(real_checkpoint, b)
    return a, b


def _bump_bits(t: torch.Tensor) -> None:
    """Change one element of ``t`` by the smallest possible step (one ulp / one unit)."""
    flat = t.view(-1)
    if t.is_floating_point():
        flat[0] = torch.nextafter(flat[0], flat[0] + 1)
    else:
        flat[0] = flat[0] ^ 1


def _weight(p: dict) -> None:
    _bump_bits(p["0.weight"])


def _moment(p: dict) -> None:
    _bump_bits(p["state"][0]["exp_avg"])


def _rng(p: dict) -> None:
    _bump_bits(p["rng"]["ranks"][0]["torch"])


def _clock(p: dict) -> None:
    p["attempt_id"] += 1


def _cursor(p: dict) -> None:
    p["ranks"][0]["position"] += 64  # data.pt is per rank (statecraft.data-state.v2)


class TestCompareCheckpoints:
    def test_identical_copies_have_no_differences(self, checkpoint_pair):
        """Two copies of one checkpoint compare equal (the baseline the other cases break)."""
        assert compare_checkpoints(*checkpoint_pair) == []

    @pytest.mark.parametrize(
        ("file_name", "mutate", "expected"),
        [
            ("model.pt", _weight, "model.pt: 0.weight: 1 of"),
            ("optim.pt", _moment, "optim.pt: state.0.exp_avg: 1 of"),
            ("trainer.pt", _rng, "trainer.pt: rng.ranks[0].torch: 1 of"),
            ("trainer.pt", _clock, "trainer.pt: attempt_id: 2 != 3"),
            ("data.pt", _cursor, "data.pt: ranks[0].position:"),
        ],
        ids=["weight-element", "optimizer-moment", "rng-state", "clock", "data-cursor"],
    )
    def test_a_one_element_change_is_reported_by_name(
        self, checkpoint_pair, file_name: str, mutate: Callable[[Any], None], expected: str
    ):
        """Changing one weight / moment / RNG byte / clock / cursor yields one named difference."""
        a, b = checkpoint_pair
        payload = torch.load(b / file_name, weights_only=True)
        mutate(payload)
        torch.save(payload, b / file_name)
        differences = compare_checkpoints(a, b)
        assert len(differences) == 1, differences
        assert differences[0].startswith(expected), differences

    def test_sign_of_zero_and_dtype_are_differences(self, checkpoint_pair):
        """Bit-exact means -0.0 differs from 0.0 and float64 differs from float32."""
        a, b = checkpoint_pair
        payload = torch.load(b / "model.pt", weights_only=True)
        reference = torch.load(a / "model.pt", weights_only=True)
        payload["0.bias"] = reference["0.bias"].double()
        reference["6.bias"] = torch.zeros(1)
        payload["6.bias"] = -torch.zeros(1)
        torch.save(reference, a / "model.pt")
        torch.save(payload, b / "model.pt")
        differences = compare_checkpoints(a, b)
        assert any(d.startswith("model.pt: 0.bias: dtype") for d in differences), differences
        assert any(d.startswith("model.pt: 6.bias: 1 of 1") for d in differences), differences

    def test_missing_file_and_missing_directory_are_differences(self, checkpoint_pair, tmp_path):
        """A file present on one side only, or an absent directory, is reported, not raised."""
        a, b = checkpoint_pair
        (b / "data.pt").unlink()
        assert compare_checkpoints(a, b) == [f"data.pt: only in {a}"]
        missing = tmp_path / "nope"
        assert compare_checkpoints(a, missing) == [f"{missing}: not a directory"]


# --------------------------------------------------------------------- real processes
@pytest.mark.slow
class TestDemoCommand:
    def test_json_reports_bit_exact_kills_preemption_and_resume_sources(self, tmp_path):
        """`statecraft demo --json --kills 2` exits 0, bit-exact, with both kills, the
        preemption through the sentinel file (emergency save, exit 0, DONE.json, the sentinel
        consumed) and every relaunch resuming where the previous launch left."""
        proc = subprocess.run(
            [*_statecraft_command(), "demo", "--json", "--kills", "2", "--seed", "7"],
            capture_output=True,
            text=True,
            env=_env(tmp_path),
            timeout=240,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        envelope = json.loads(proc.stdout)
        data = envelope["data"]
        assert (envelope["command"], envelope["status"], envelope["errors"]) == ("demo", "ok", [])
        assert data["bit_exact"] is True
        assert data["kills_performed"] == 2
        assert data["preemptions_performed"] == 1
        assert Path(data["out"]).parent == tmp_path  # the default root honours TMPDIR
        killed = [x for x in data["launches"] if x["run"] == "killed"]
        assert [x["killed"] for x in killed] == [True, True, False, False]
        assert [x["action"] for x in killed] == ["SIGKILL", "SIGKILL", "sentinel", "SIGKILL"]
        assert all(x["trigger"] and x["returncode"] == -9 for x in killed[:2])
        stopped, final = killed[2], killed[3]
        step = stopped["stop_step"]
        assert stopped["sentinel_created"] is True
        assert stopped["trigger"].startswith("step ")
        assert int(stopped["trigger"].split()[1]) <= step < 60
        assert (stopped["returncode"], stopped["stop_reason"]) == (0, "sentinel")
        assert stopped["stop_kind"] in ("checkpoint", "evaluation_pending")
        assert stopped["stop_path"] == f"checkpoints/iter_{step:09d}"
        assert stopped["stop_seconds"] > 0
        assert stopped["stop_verified"] is True
        assert stopped["sentinel_consumed"] is True
        assert stopped["done_step"] == step  # finalize() after the stop, nothing more
        done = stopped["done_record"]
        assert (done["step"], done["preempted"], done["checkpoint"], done["saved"]) == (
            step,
            "sentinel",
            stopped["stop_path"],
            True,
        )
        assert final["resumed_step"] == step
        assert final["resume_source"].endswith(f"iter_{step:09d}")
        for launch in killed[1:]:  # each relaunch reports where it resumed from
            step, source = launch["resumed_step"], launch["resume_source"]
            assert (source is None and step == 0) or source.endswith(f"iter_{step:09d}")
        assert killed[-1]["done_step"] == 60
        assert data["reference_checkpoints"] == [10, 20, 30, 40, 50, 60]
        # validation every 20 steps, durable: 20, 40 and 60 end published in both runs, and
        # the first kill lands inside a validation, so its relaunch finishes it
        assert data["validate_every"] == 20
        assert data["reference_published"] == data["killed_published"] == [20, 40, 60]
        first, second = killed[0], killed[1]
        assert first["trigger"].startswith("evaluated ")
        iteration = int(first["trigger"].split()[1])
        assert first["killed_in_validation"] == iteration
        assert first["validation_state"] in (
            "evaluation_pending",
            "publication_pending",
            "published",
        )
        if first["validation_state"] != "published":
            assert second["resumed_step"] == iteration
            assert second["resumed_stage"] == first["validation_state"]
            assert iteration in second["published"]
            again = first["validation_state"] == "evaluation_pending"
            assert (iteration in second["evaluated"]) == again
        assert data["emergency_checkpoints"] == [step]
        assert data["killed_checkpoints"] == sorted({*data["reference_checkpoints"], step})
        assert data["compared"] == data["reference_checkpoints"]
        assert data["save_seconds"]["count"] >= 6


@pytest.mark.slow
class TestKillStress:
    def test_five_kills_end_bit_exact_and_latest_always_verifies(self, tmp_path, monkeypatch):
        """Five SIGKILLs (some aimed inside saves): after each one the latest pointer names a
        checkpoint that verifies, the relaunch adopts the newest committed one (never a partial
        one), and the final state is bit-identical to the uninterrupted run."""
        monkeypatch.setenv("TMPDIR", str(tmp_path))
        latest_after_kill: dict[int, int | None] = {}
        newest_committed: dict[int, int] = {}

        def check_disk(launch: Launch, directory: Path | None) -> None:
            committed = committed_iterations(directory)
            newest_committed[launch.index] = committed[-1] if committed else 0
            pointer = None if directory is None else directory / LATEST_POINTER
            if pointer is None or not pointer.exists():
                latest_after_kill[launch.index] = None  # killed before the first commit
                return
            iteration = parse_latest(pointer.read_bytes())
            verified = verify_checkpoint(LocalStore(str(directory)), iteration)  # raises if not
            latest_after_kill[launch.index] = verified.iteration

        report = run_kill_demo(
            tmp_path / "demo", steps=40, save_every=5, kills=5, seed=11, on_kill=check_disk
        )
        assert report.errors == []
        assert len(report.kills) == 5
        assert sorted(latest_after_kill) == [1, 2, 3, 4, 5, 6]  # five kills, one preemption
        assert len(report.preemptions) == 1
        assert report.preemptions[0].index == 6
        assert any(x.trigger.startswith("save-begin") for x in report.kills)
        relaunches = [x for x in report.launches if x.run == "killed"][1:]
        assert [x.resumed_step for x in relaunches] == [
            newest_committed[x.index - 1] for x in relaunches
        ]
        assert report.bit_exact, report.differences
        assert report.final_iteration == 40
        final = f"iter_{report.final_iteration:09d}"
        reference = checkpoints_dir(tmp_path / "demo" / "reference")
        relaunched = checkpoints_dir(tmp_path / "demo" / "killed")
        assert compare_checkpoints(reference / final, relaunched / final) == []


@pytest.mark.slow
class TestLaunchTimeout:
    def test_a_launch_past_its_timeout_is_killed_and_reported(self, tmp_path):
        """A process that outlives its timeout is SIGKILLed and reported; the demo never hangs."""
        report = run_kill_demo(
            tmp_path / "demo", steps=40, save_every=5, kills=1, seed=0, timeout_s=0.3
        )
        assert not report.bit_exact
        assert all(x.returncode == -9 for x in report.launches)
        assert any("did not finish within 0.3 s" in e for e in report.errors), report.errors
        assert report.wall_s < 20


@pytest.mark.slow
class TestExampleTrainLoop:
    def test_runs_then_resumes_and_continues(self, tmp_path):
        """examples/train_loop.py trains, and a second run resumes its final checkpoint."""
        script = REPO / "examples" / "train_loop.py"
        out = tmp_path / "runs"

        def run(steps: int) -> str:
            proc = subprocess.run(
                [
                    sys.executable,
                    str(script),
                    "--out",
                    str(out),
                    "--steps",
                    str(steps),
                    "--save-every",
                    "5",
                ],
                capture_output=True,
                text=True,
                env=_env(tmp_path),
                timeout=120,
                check=False,
            )
            assert proc.returncode == 0, proc.stdout + proc.stderr
            return proc.stdout

        first = run(12)
        assert "start at step 0" in first
        assert "saved step 12" in first
        assert "done at step 12" in first
        second = run(20)
        assert "start at step 12: resumed from" in second
        assert "saved step 15" in second
        assert "done at step 20" in second
