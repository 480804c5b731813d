"""``step_end()`` returns a ``StepEnd``; a run identity from one name; the facade's INFO lines."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import attrs
import pytest
import torch

import statecraft as sc
from statecraft.checkpoint.facade.step import StepEnd
from statecraft.errors import ConfigError

CONFIG = ["save_every=2", "save_async=false", "keep_optim_last=0"]


def _checkpointer(out: Path, run: object = "mlp") -> tuple[sc.Checkpointer, torch.nn.Module]:
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ckpt = sc.Checkpointer(sc.CheckpointConfig.load(None, CONFIG), run=run, output_root=out)  # type: ignore[arg-type]
    ckpt.track(model=model, optimizer=optimizer)
    return ckpt, model


def _step(ckpt: sc.Checkpointer, model: torch.nn.Module) -> StepEnd:
    model(torch.randn(2, 8)).sum().backward()
    ckpt.tracked.optimizer.step()
    ckpt.tracked.optimizer.zero_grad()
    ckpt.record(sc.Outcome.APPLIED)
    return ckpt.step_end()


class TestStepEnd:
    def test_reports_the_save_it_made(self, tmp_path: Path) -> None:
        """step_end returns StepEnd(saved=report) at a due save and saved=None otherwise."""
        ckpt, model = _checkpointer(tmp_path)
        ckpt.resume()
        first, second = _step(ckpt, model), _step(ckpt, model)
        assert first == StepEnd(saved=None, stop=False, reason=None)
        assert second.saved is not None
        assert second.saved is ckpt.saves[-1]
        assert second.saved.iteration == 2
        assert (second.stop, second.reason) == (False, None)

    def test_truth_value_is_stop(self) -> None:
        """bool(StepEnd) is its stop flag, so `if ckpt.step_end(): break` keeps working."""
        assert not StepEnd(saved=None, stop=False, reason=None)
        assert StepEnd(saved=None, stop=True, reason="termination requested")

    def test_is_frozen_and_exported(self) -> None:
        """StepEnd is an immutable value exported from the top-level package."""
        end = StepEnd()
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            end.stop = True  # type: ignore[misc]
        assert sc.StepEnd is StepEnd

    def test_finalize_returns_the_final_report(self, tmp_path: Path) -> None:
        """finalize returns the off-cadence final save's report, and None when none is due."""
        ckpt, model = _checkpointer(tmp_path)
        ckpt.resume()
        for _ in range(3):
            _step(ckpt, model)
        report = ckpt.finalize()
        assert report is not None
        assert report.iteration == 3
        assert ckpt.finalize() is None


class TestRunIdentityFromOneName:
    def test_named_defaults_project_and_group(self) -> None:
        """RunIdentity.named('mlp') is default/default/mlp; project and group can be given."""
        assert sc.RunIdentity.named("mlp") == sc.RunIdentity("default", "default", "mlp")
        assert sc.RunIdentity.named("mlp", project="p", group="g") == sc.RunIdentity(
            "p", "g", "mlp"
        )

    def test_checkpointer_accepts_a_plain_name(self, tmp_path: Path) -> None:
        """Checkpointer(run='mlp') writes under <root>/default/default/mlp."""
        ckpt, model = _checkpointer(tmp_path, run="mlp")
        ckpt.resume()
        _step(ckpt, model)
        _step(ckpt, model)
        assert ckpt.run == sc.RunIdentity.named("mlp")
        assert ckpt.attempt is not None
        assert ckpt.attempt.run_dir.parent == tmp_path / "default" / "default" / "mlp"
        assert (ckpt.attempt.checkpoints_dir / "iter_000000002").is_dir()

    @pytest.mark.parametrize("run", [None, 7, ("p", "g", "n"), Path("mlp")])
    def test_anything_else_is_a_config_error_naming_run(self, tmp_path: Path, run: object) -> None:
        """run= of another type is a ConfigError naming `run` and what it accepts; nothing is
        created under the output root."""
        with pytest.raises(ConfigError) as caught:
            _checkpointer(tmp_path, run=run)
        message = str(caught.value)
        assert message.startswith("Checkpointer(run=...): 1 invalid value(s)")
        assert f"run: got {run!r}; expected a RunIdentity(project, group, name) or one run " in (
            message
        )
        assert list(tmp_path.iterdir()) == []

    def test_a_bad_name_names_the_field(self, tmp_path: Path) -> None:
        """A name that is not a plain path segment is refused naming run.name."""
        with pytest.raises(ConfigError) as caught:
            _checkpointer(tmp_path, run="../escape")
        assert "run.name: got '../escape'" in str(caught.value)
        assert list(tmp_path.iterdir()) == []


class TestInfoLines:
    def test_fresh_start_save_and_resume_lines(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The statecraft logger says `fresh start: <why>`, `saved iter N: <MiB> MiB in <s> s
        -> <path>`, and on relaunch `resumed from <path> (iter N)`."""
        with caplog.at_level(logging.INFO, logger="statecraft"):
            ckpt, model = _checkpointer(tmp_path)
            ckpt.resume()
            _step(ckpt, model)
            _step(ckpt, model)
            ckpt.close()
            again, _ = _checkpointer(tmp_path)
            result = again.resume()
        lines = [r.getMessage() for r in caplog.records if r.name.startswith("statecraft")]
        assert "fresh start: resume=auto: new attempt, starting fresh" in lines
        location = ckpt.saves[0].location
        saved = [line for line in lines if line.startswith("saved iter 2: ")]
        assert len(saved) == 1
        assert re.fullmatch(
            rf"saved iter 2: 0\.\d\d\d MiB in \d+\.\d\d\d s -> {re.escape(location)}", saved[0]
        )
        assert result.source == f"local:{location}"
        assert f"resumed from {result.source} (iter 2)" in lines

    def test_each_save_is_logged_before_the_retention_that_follows_it(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Log lines come in the order things happened: `saved iter N` (said when iter_N is
        durable) before `retention after iter_N`, which prunes iter_2's optimizer state
        (keep_optim_last=1)."""
        with caplog.at_level(logging.INFO, logger="statecraft"):
            torch.manual_seed(0)
            model = torch.nn.Linear(8, 8)
            knobs = ["save_every=2", "save_async=false", "keep_optim_last=1"]
            config = sc.CheckpointConfig.load(None, knobs)
            ckpt = sc.Checkpointer(config, run="mlp", output_root=tmp_path)
            ckpt.track(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
            ckpt.resume()
            for _ in range(4):
                _step(ckpt, model)
            ckpt.close()
        lines = [r.getMessage() for r in caplog.records if r.name.startswith("statecraft")]
        saved = [i for i, line in enumerate(lines) if line.startswith("saved iter 4: ")]
        retained = [
            i for i, line in enumerate(lines) if line.startswith("retention after iter_000000004")
        ]
        assert len(saved) == 1, lines
        assert len(retained) == 1, lines
        assert saved[0] < retained[0], lines


class TestStepEndValidation:
    def test_new_fields_default_to_nothing_done(self) -> None:
        """A StepEnd of a boundary that did nothing has no artifact, no metrics, no validation."""
        end = StepEnd()
        assert (end.artifact, end.metrics, end.validated, end.validation) == (
            None,
            None,
            False,
            None,
        )

    def test_an_ephemeral_validation_reports_metrics_and_saves_nothing(
        self, tmp_path: Path
    ) -> None:
        """validation.every=3 (save_every=2): step 3 reports validated with the metrics and no
        save; step 4 saves without validating; the final step 5 is saved and validated."""
        torch.manual_seed(0)
        model = torch.nn.Linear(8, 8)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        config = sc.CheckpointConfig.load(None, [*CONFIG, "validation.every=3"])
        ckpt = sc.Checkpointer(config, run="mlp", output_root=tmp_path)
        ckpt.track(model=model, optimizer=optimizer)
        steps: list[int] = []

        def evaluate(step: int) -> dict[str, float]:
            steps.append(step)
            return {"score": float(step)}

        ckpt.validate_with(evaluate, source="steps")
        ckpt.resume()
        ends = [_step(ckpt, model) for _ in range(5)]
        assert [e.validated for e in ends] == [False, False, True, False, False]
        assert ends[2].metrics == {"score": 3.0}
        assert ends[2].saved is None
        assert ends[3].saved is not None
        assert ends[3].metrics is None
        final = ckpt.finalize()
        assert final is not None
        assert final.iteration == 5
        assert ckpt.final is not None
        assert ckpt.final.validated
        assert steps == [3, 5]

    def test_a_partial_run_plan_warns_at_construction_pointing_at_the_caller(
        self, tmp_path: Path
    ) -> None:
        """An active partial plan is a UserWarning issued at Checkpointer(...), attributed to
        the line that constructed it."""
        config = sc.CheckpointConfig.load(None, [*CONFIG, "checkpoint_components=[model]"])
        with pytest.warns(UserWarning, match="checkpoint_components") as caught:
            sc.Checkpointer(config, run="mlp", output_root=tmp_path)
        assert caught[0].filename == __file__
        assert list(tmp_path.iterdir()) == []


class TestBeforeTraining:
    def test_runs_once_on_a_fresh_start_and_never_saves(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """validation.before_training evaluates step 0 in resume() of a fresh run (its
        metrics in ResumeResult.metrics), writes no checkpoint, and is skipped on resume."""
        config = sc.CheckpointConfig.load(
            None, [*CONFIG, "validation.every=4", "validation.before_training=true"]
        )
        calls: list[int] = []

        def evaluate(step: int) -> dict[str, float]:
            calls.append(step)
            return {"loss": 1.0}

        def open_run() -> tuple[sc.Checkpointer, torch.nn.Module]:
            torch.manual_seed(0)
            model = torch.nn.Linear(8, 8)
            ckpt = sc.Checkpointer(config, run="mlp", output_root=tmp_path)
            ckpt.track(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
            ckpt.validate_with(evaluate, source="const")
            return ckpt, model

        ckpt, model = open_run()
        with caplog.at_level(logging.INFO, logger="statecraft"):
            start = ckpt.resume()
        assert calls == [0]
        assert start.metrics == {"loss": 1.0}
        assert "validated step 0 (ephemeral): loss=1" in caplog.text
        attempt = ckpt.attempt
        assert attempt is not None
        assert not list(attempt.checkpoints_dir.glob("iter_*"))
        _step(ckpt, model)
        _step(ckpt, model)  # a save at step 2
        ckpt.close()
        again, _ = open_run()
        assert again.resume().step == 2
        assert calls == [0]
