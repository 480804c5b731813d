"""End to end through ``Checkpointer`` with the defaults of this release: asynchronous saves
(``save_async=true``) and retention (``keep_optim_last=null`` -> 1).

The checkpoint holds the state of the moment ``save()`` returned, whatever the loop does
next; a background write that fails is raised at the next join with the previous checkpoint
and ``latest`` untouched; retention keeps the newest and leaves weights-only iterations that
``inspect`` lists; bad retention values are refused when built.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from checkpoint_runs import RUN, Objects
from test_disk_full import fill, snapshot

import statecraft as sc
from statecraft.checkpoint.kernel.layout import LATEST_POINTER, MANIFEST_NAME, parse_latest
from statecraft.checkpoint.kernel.retention_records import WEIGHTS_ONLY_MARKER
from statecraft.cli import main as cli_main
from statecraft.errors import ConfigError, DiskFullError, WeightsOnlyResumeError

ASYNC = ["save_async=true"]


def open_run(out: Path, *knobs: str, **kwargs: Any) -> tuple[sc.Checkpointer, Objects]:
    """A checkpointer over ``out`` with the defaults plus ``knobs``, resumed."""
    objects = Objects()
    ckpt = sc.Checkpointer(
        sc.CheckpointConfig.load(None, list(knobs)), run=RUN, output_root=out, **kwargs
    )
    ckpt.track(
        model=objects.model,
        optimizer=objects.optimizer,
        scheduler=objects.scheduler,
        data=objects.cursor,
    )
    ckpt.resume()
    return ckpt, objects


def train(ckpt: sc.Checkpointer, objects: Any, steps: int) -> list[Any]:
    saved = []
    for _ in range(steps):
        objects.step()
        ckpt.record(sc.Outcome.APPLIED)
        end = ckpt.step_end()
        if end.saved is not None:
            saved.append(end.saved)
    return saved


def checkpoints(out: Path) -> Path:
    (attempt,) = (p for p in (out / "proj" / "group" / "name").iterdir() if p.is_dir())
    return attempt / "checkpoints"


def committed(ckpts: Path) -> list[int]:
    return sorted(
        int(p.name.split("_")[1])
        for p in ckpts.glob("iter_*")
        if (p / MANIFEST_NAME).is_file() and not (p / ".retention-invalidated.json").exists()
    )


def latest(ckpts: Path) -> int:
    return parse_latest((ckpts / LATEST_POINTER).read_bytes())


class TestStagedState:
    def test_the_checkpoint_holds_the_values_of_the_moment_save_returned(
        self, tmp_path: Path
    ) -> None:
        """Mutating the model and the optimizer state right after save() returns leaves the
        checkpoint with the pre-mutation values: the write reads the staged copy."""
        ckpt, objects = open_run(tmp_path, "save_every=0", "keep_optim_last=0")
        train(ckpt, objects, 3)
        model_before = {k: v.clone() for k, v in objects.model.state_dict().items()}
        optim_before = {
            k: v.clone()
            for k, v in objects.optimizer.state_dict()["state"][0].items()
            if isinstance(v, torch.Tensor)
        }
        pending = ckpt.save()
        assert isinstance(pending, sc.PendingSave)
        assert pending.staged.is_set()
        with torch.no_grad():
            for p in objects.model.parameters():
                p.add_(1000.0)
            for value in objects.optimizer.state[objects.model.weight].values():
                if isinstance(value, torch.Tensor):
                    value.mul_(-3.0)
        report = pending.wait()
        assert pending.durable.is_set()
        assert isinstance(report, sc.SaveReport)
        assert report.asynchronous
        assert report.blocking_seconds > 0
        where = Path(report.location)
        saved_model = torch.load(where / "model.pt", weights_only=True)
        assert saved_model.keys() == model_before.keys()
        for key, value in model_before.items():
            assert torch.equal(saved_model[key], value), key
        saved_optim = torch.load(where / "optim.pt", weights_only=True)["state"][0]
        for key, value in optim_before.items():
            assert torch.equal(saved_optim[key], value), key
        assert not torch.equal(objects.model.weight, model_before["weight"])
        assert ckpt.wait() == [report]
        assert ckpt.saves == [report]
        ckpt.close()

    def test_resume_after_async_saves_is_exact(self, tmp_path: Path) -> None:
        """A run saved asynchronously every step resumes exactly where finalize() left it."""
        ckpt, objects = open_run(tmp_path, "save_every=1")
        saved = train(ckpt, objects, 4)
        assert all(isinstance(s, sc.PendingSave) for s in saved)
        ckpt.finalize()
        assert [s.iteration for s in ckpt.saves] == [1, 2, 3, 4]
        ckpt.close()
        again, fresh = open_run(tmp_path, "save_every=1")
        assert again.step == 4
        assert torch.equal(fresh.model.weight, objects.model.weight)
        assert fresh.cursor.position == objects.cursor.position
        again.close()


class TestBackgroundFailure:
    def _failing_write(self, tmpfs: Path) -> tuple[sc.Checkpointer, Any, Path, dict[str, bytes]]:
        from test_disk_full import Objects as Bigger

        out = tmpfs / "out"
        objects = Bigger()
        ckpt = sc.Checkpointer(
            sc.CheckpointConfig.load(None, ["save_every=2", "keep_optim_last=0"]),
            run=RUN,
            output_root=out,
        )
        ckpt.track(model=objects.model, optimizer=objects.optimizer, data=objects.cursor)
        ckpt.resume()
        train(ckpt, objects, 2)
        ckpt.wait()  # iter 2 is durable
        filler = fill(tmpfs, 0)
        before = snapshot(out)
        (pending,) = train(ckpt, objects, 2)  # iter 4: staged, its write fails on the slot
        assert isinstance(pending, sc.PendingSave)
        return ckpt, objects, filler, before

    def test_disk_full_is_raised_at_the_next_save(self, tmpfs: Path) -> None:
        """A background write that meets a full (real tmpfs) disk raises DiskFullError at the
        next save's join, once; iter 2 and latest are byte-identical; after freeing space
        the run saves again and resumes from the new checkpoint."""
        ckpt, objects, filler, before = self._failing_write(tmpfs)
        out = tmpfs / "out"
        with pytest.raises(DiskFullError) as info:
            train(ckpt, objects, 2)  # the save of iter 6 joins iter 4 first
        assert "/iter_000000004/" in info.value.path
        assert "raised by the background write of iter_000000004 (role trainer)" in (
            info.value.__notes__
        )
        assert "older checkpoints are intact" in str(info.value)
        assert snapshot(out) == before
        assert latest(checkpoints(out)) == 2
        assert ckpt.wait() == []  # raised exactly once
        filler.unlink()
        train(ckpt, objects, 2)
        ckpt.finalize()
        assert latest(checkpoints(out)) == 8
        ckpt.close()

    def test_disk_full_is_raised_by_finalize(self, tmpfs: Path) -> None:
        """The last background write's error is raised by finalize() at the latest; the
        previous checkpoint and latest are unchanged."""
        ckpt, _, filler, before = self._failing_write(tmpfs)
        with pytest.raises(DiskFullError):
            ckpt.finalize()
        assert snapshot(tmpfs / "out") == before
        filler.unlink()
        ckpt.close()


class TestRetention:
    def test_keep_model_last_1_with_async_saves(self, tmp_path: Path) -> None:
        """keep_model_last=1 with async saves is allowed: after every join exactly the newest
        committed checkpoint is left (the previous one deleted only once the new one was
        durable), latest names it, and resume adopts it."""
        ckpt, objects = open_run(tmp_path, "save_every=1", "keep_model_last=1")
        ckpts = None
        for step in range(1, 5):
            train(ckpt, objects, 1)
            ckpts = ckpts or checkpoints(tmp_path)
            if step > 1:  # never zero committed checkpoints once one existed
                assert committed(ckpts), step
            ckpt.wait()
            assert committed(ckpts) == [step]
            assert latest(ckpts) == step
        ckpt.close()
        assert ckpts is not None
        assert sorted(p.name for p in ckpts.glob("iter_*")) == ["iter_000000004"]
        again, _ = open_run(tmp_path, "save_every=1", "keep_model_last=1")
        assert again.step == 4
        again.close()

    def test_the_default_keeps_optimizer_state_of_the_newest_only(self, tmp_path: Path) -> None:
        """keep_optim_last=null: the newest checkpoint keeps optim.pt, the older ones are
        weights-only (marker, no optim.pt), loadable by load_weights and refused by an
        explicit resume naming the newest resumable one."""
        ckpt, objects = open_run(tmp_path, "save_every=2")
        train(ckpt, objects, 6)
        ckpt.finalize()
        ckpt.close()
        ckpts = checkpoints(tmp_path)
        assert (ckpts / "iter_000000006" / "optim.pt").is_file()
        for it in (2, 4):
            where = ckpts / f"iter_{it:09d}"
            assert not (where / "optim.pt").exists()
            assert (where / WEIGHTS_ONLY_MARKER).is_file()
            assert (where / "model.pt").is_file()
        assert ckpt.saves[-1].retention is not None
        assert ckpt.saves[-1].retention.weights_only == (4,)
        loaded = sc.load_weights(objects.model, str(ckpts / "iter_000000004"))
        assert loaded.iteration == 4
        with pytest.raises(WeightsOnlyResumeError) as info:
            open_run(tmp_path, f"resume={ckpts / 'iter_000000002'}")
        assert "iter_000000006" in str(info.value)

    def test_a_programmatic_plan_replaces_the_knobs(self, tmp_path: Path) -> None:
        """Checkpointer(retention=RetentionPlan(model=EveryNSteps(4))) keeps every 4th
        iteration and the newest whole, deletes the rest."""
        plan = sc.RetentionPlan(model=sc.EveryNSteps(4))
        ckpt, objects = open_run(tmp_path, "save_every=1", retention=plan)
        assert ckpt.retention is plan
        train(ckpt, objects, 6)
        ckpt.finalize()
        ckpt.close()
        assert committed(checkpoints(tmp_path)) == [4, 6]

    def test_inspect_lists_weights_only_iterations(self, tmp_path: Path, capsys) -> None:
        """After a run with the default retention, inspect --json reports the older
        iterations as weights-only and the newest as committed."""
        ckpt, objects = open_run(tmp_path, "save_every=2")
        train(ckpt, objects, 4)
        ckpt.finalize()
        ckpt.close()
        capsys.readouterr()
        code = cli_main(["inspect", str(tmp_path / "proj" / "group" / "name"), "--json"])
        text = capsys.readouterr().out
        assert code == 0, text
        states = _states(json.loads(text))
        assert states["iter_000000002"] == "weights_only"
        assert states["iter_000000004"] in ("committed", "published")


def _states(envelope: dict[str, Any]) -> dict[str, str]:
    """iter name -> state, from an inspect --json envelope (any nesting)."""
    found: dict[str, str] = {}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            name = node.get("name") or node.get("iteration_dir")
            state = node.get("state")
            if isinstance(name, str) and name.startswith("iter_") and isinstance(state, str):
                found.setdefault(name, state)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(envelope)
    return found


class TestBadRetentionInput:
    @pytest.mark.parametrize(
        ("knob", "expected"),
        [
            ("keep_optim_last=-1", "keep_optim_last: got -1; expected null or a non-negative"),
            ("keep_model_last=-2", "keep_model_last: got -2; expected a non-negative integer"),
        ],
    )
    def test_negative_knobs_are_refused(self, knob: str, expected: str) -> None:
        """A negative retention count is a ConfigError naming the knob when loaded."""
        with pytest.raises(ConfigError) as info:
            sc.CheckpointConfig.load(None, [knob])
        assert expected in str(info.value)

    @pytest.mark.parametrize(
        ("build", "expected"),
        [
            (lambda: sc.LatestN(0), "n: got 0; expected an int >= 1"),
            (lambda: sc.EveryNSteps(0), "interval: got 0; expected an int >= 1"),
            (lambda: sc.BestN(1, "val_loss", mode="median"), "mode: got 'median'; expected"),
        ],
    )
    def test_bad_policies_are_refused_when_built(self, build: Any, expected: str) -> None:
        """LatestN(0), a zero interval and an unknown BestN mode raise ConfigError at once."""
        with pytest.raises(ConfigError) as info:
            build()
        assert expected in str(info.value)

    def test_a_plan_that_is_not_a_retention_plan_is_refused(self, tmp_path: Path) -> None:
        """Checkpointer(retention=...) takes a RetentionPlan; anything else is a ConfigError
        naming the argument, and nothing is written."""
        with pytest.raises(ConfigError) as info:
            sc.Checkpointer(
                sc.CheckpointConfig(),
                run=RUN,
                output_root=tmp_path,
                retention=sc.LatestN(2),  # type: ignore[arg-type]
            )
        assert "retention: got 'LatestN'; expected a RetentionPlan or None" in str(info.value)
        assert list(tmp_path.iterdir()) == []


class TestRetentionAfterValidation:
    def test_published_validations_are_retained_after_publication(self, tmp_path: Path) -> None:
        """Durable validations (synchronous saves) run retention once published: the older
        published checkpoints become weights-only, the newest keeps its optimizer state."""
        ckpt = sc.Checkpointer(
            sc.CheckpointConfig.load(
                None, ["validation.every=2", "validation.save_checkpoint=true", "save_every=0"]
            ),
            run=RUN,
            output_root=tmp_path,
        )
        objects = Objects()
        ckpt.track(model=objects.model, optimizer=objects.optimizer, data=objects.cursor)
        ckpt.validate_with(lambda step: {"val_loss": 1.0 / step}, source="held-out")
        ckpt.resume()
        saved = train(ckpt, objects, 6)
        ckpt.finalize()
        ckpt.close()
        assert all(isinstance(s, sc.SaveReport) for s in saved)  # validation saves are sync
        ckpts = checkpoints(tmp_path)
        assert (ckpts / "iter_000000006" / "optim.pt").is_file()
        for it in (2, 4):
            assert (ckpts / f"iter_{it:09d}" / WEIGHTS_ONLY_MARKER).is_file(), it
            assert not (ckpts / f"iter_{it:09d}" / "optim.pt").exists(), it
