"""``statecraft.integrations.hf`` in process: seal and verify, damage passed over with its
reason, ``save_total_limit`` taken over (the Trainer's rotation never deletes), stale
trajectories refused, leftovers removed. Real ``Trainer`` runs of a tiny GPT-2 on CPU."""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

import hf_runs

from statecraft.checkpoint.units import UNIT_MANIFEST_NAME, verify_unit
from statecraft.errors import (
    UnitDamagedError,
    UnitError,
    UnitNotCommittedError,
)
from statecraft.storage.local import LocalStore

HF_LOGGER = "statecraft.hf"


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Tiny models train faster on one torch thread (no oversubscription on a busy CI box)."""
    with hf_runs.one_thread():
        yield


def _train(out: Path, *, max_steps: int, save_steps: int = 2, resume: Any = None, **kw: Any) -> Any:
    trainer = hf_runs.make_trainer(str(out), max_steps=max_steps, save_steps=save_steps, **kw)
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def _folders(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.name.startswith("checkpoint-"))


def _committed(out: Path, name: str) -> bool:
    return verify_unit(LocalStore(str(out)), name).committed


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 4-step run with the callback, saving every 2 steps: checkpoint-2 and checkpoint-4."""
    out = tmp_path_factory.mktemp("hf-pristine") / "out"
    with hf_runs.one_thread():
        _train(out, max_steps=4)
    return out


@pytest.fixture
def run_dir(pristine: Path, tmp_path: Path) -> Path:
    """A private copy of ``pristine``, free to damage."""
    copy = tmp_path / "out"
    shutil.copytree(pristine, copy)
    return copy


class TestPublicApi:
    def test_all_is_sorted_and_explicit(self) -> None:
        """The module's ``__all__`` is sorted and names what the docs tell users to import."""
        from statecraft.integrations import hf

        assert list(hf.__all__) == sorted(hf.__all__)
        assert {"StatecraftCallback", "last_committed_checkpoint", "verified_checkpoint"} <= set(
            hf.__all__
        )


class TestSeal:
    def test_every_save_is_a_committed_unit(self, pristine: Path) -> None:
        """Each ``checkpoint-N`` holds a commit manifest naming every file the Trainer wrote,
        with framework ``hf-trainer`` and step N, and verifies deeply."""
        assert _folders(pristine) == ["checkpoint-2", "checkpoint-4"]
        for step in (2, 4):
            name = f"checkpoint-{step}"
            verdict = verify_unit(LocalStore(str(pristine)), name, deep=True)
            assert verdict.committed, verdict.reason
            assert verdict.manifest is not None
            assert verdict.manifest.framework == "hf-trainer"
            assert verdict.manifest.step == step
            on_disk = {
                p.relative_to(pristine / name).as_posix()
                for p in (pristine / name).rglob("*")
                if p.is_file() and p.name != UNIT_MANIFEST_NAME
            }
            assert set(verdict.manifest.files) == on_disk
            assert {"model.safetensors", "optimizer.pt", "trainer_state.json"} <= on_disk

    def test_last_committed_is_the_newest(self, pristine: Path) -> None:
        """With nothing damaged the newest folder is the one to resume."""
        from statecraft.integrations.hf import last_committed_checkpoint, verified_checkpoint

        newest = str(pristine / "checkpoint-4")
        assert last_committed_checkpoint(pristine) == newest
        assert verified_checkpoint(newest) == newest

    def test_no_checkpoint_is_a_fresh_start(self, tmp_path: Path) -> None:
        """An absent or empty output_dir resolves to ``None`` (train from scratch) and is not
        created."""
        from statecraft.integrations.hf import last_committed_checkpoint

        assert last_committed_checkpoint(tmp_path / "absent") is None
        assert not (tmp_path / "absent").exists()
        assert last_committed_checkpoint(tmp_path) is None


class TestResolution:
    def test_damaged_file_is_passed_over_with_the_reason(
        self, run_dir: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A byte flipped in checkpoint-4's optimizer (same size) makes resolution fall back to
        checkpoint-2, logging the damaged file; the explicit check raises."""
        from statecraft.integrations.hf import last_committed_checkpoint, verified_checkpoint

        target = run_dir / "checkpoint-4" / "optimizer.pt"
        data = bytearray(target.read_bytes())
        data[len(data) // 2] ^= 0xFF
        target.write_bytes(bytes(data))

        caplog.set_level(logging.WARNING, logger=HF_LOGGER)
        assert last_committed_checkpoint(run_dir) == str(run_dir / "checkpoint-2")
        passed = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("checkpoint-4" in m and "optimizer.pt" in m for m in passed), passed
        with pytest.raises(UnitDamagedError, match="checkpoint-4"):
            verified_checkpoint(run_dir / "checkpoint-4")

    def test_partial_folder_is_refused_explicitly(self, run_dir: Path) -> None:
        """A folder without its manifest (a killed save) is not committed: the explicit check
        raises :class:`UnitNotCommittedError` naming it and the fix."""
        from statecraft.integrations.hf import verified_checkpoint

        (run_dir / "checkpoint-4" / UNIT_MANIFEST_NAME).unlink()
        with pytest.raises(UnitNotCommittedError, match="last_committed_checkpoint"):
            verified_checkpoint(run_dir / "checkpoint-4")
        with pytest.raises(UnitNotCommittedError):
            verified_checkpoint(run_dir / "checkpoint-99")

    def test_train_resume_true_warns_of_the_trap_and_nothing_else_does(
        self, run_dir: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """``resume_from_checkpoint=True`` resolves the newest folder unchecked before any
        callback runs; the callback says so when ``train`` is called that way over a killed
        save's folder, and stays quiet when the Trainer is built over it and resumed from
        ``last_committed_checkpoint`` (the call it recommends) or over committed folders."""
        from statecraft.integrations.hf import last_committed_checkpoint

        def warnings() -> list[logging.LogRecord]:
            return [r for r in caplog.records if "resume_from_checkpoint=True" in r.getMessage()]

        caplog.set_level(logging.WARNING, logger=HF_LOGGER)
        hf_runs.make_trainer(str(run_dir), max_steps=6, save_steps=2)
        assert not warnings()
        (run_dir / "checkpoint-4" / UNIT_MANIFEST_NAME).unlink()
        trainer = hf_runs.make_trainer(str(run_dir), max_steps=4, save_steps=2)
        assert not warnings()  # built over it: the script may resume correctly
        resume = last_committed_checkpoint(run_dir)
        assert resume == str(run_dir / "checkpoint-2")
        trainer.train(resume_from_checkpoint=resume)
        assert not warnings()
        (run_dir / "checkpoint-4" / UNIT_MANIFEST_NAME).unlink(missing_ok=True)
        (run_dir / "checkpoint-6").mkdir()  # a killed save's leftover, newest again
        trainer = hf_runs.make_trainer(str(run_dir), max_steps=8, save_steps=2)
        with pytest.raises(Exception):  # noqa: B017 - the Trainer's own failure
            trainer.train(resume_from_checkpoint=True)
        (warning,) = warnings()
        assert "checkpoint-6 is uncommitted" in warning.getMessage()
        assert "last_committed_checkpoint(output_dir)" in warning.getMessage()

    def test_resuming_an_uncommitted_folder_stops_before_any_step(self, run_dir: Path) -> None:
        """The Trainer loads ``resume_from_checkpoint`` before ``on_train_begin``; the callback
        then refuses to train from an uncommitted ``checkpoint-<global_step>``: no step runs,
        nothing is saved."""
        (run_dir / "checkpoint-4" / UNIT_MANIFEST_NAME).unlink()
        trainer = hf_runs.make_trainer(str(run_dir), max_steps=6, save_steps=2)
        with pytest.raises(UnitNotCommittedError, match="checkpoint-4"):
            trainer.train(resume_from_checkpoint=str(run_dir / "checkpoint-4"))
        assert trainer.state.global_step == 4  # loaded, never stepped
        assert _folders(run_dir) == ["checkpoint-2", "checkpoint-4"]


class TestTrajectory:
    def test_fresh_run_into_a_used_directory_is_refused(self, run_dir: Path) -> None:
        """Training from scratch where committed checkpoints exist would mix two trajectories:
        refused before the first step, with the fix in the message."""
        trainer = hf_runs.make_trainer(str(run_dir), max_steps=4, save_steps=2)
        with pytest.raises(UnitError, match="fresh output_dir") as info:
            trainer.train()
        assert "checkpoint-2" in str(info.value)
        assert "checkpoint-4" in str(info.value)
        assert trainer.state.global_step == 0
        assert all(_committed(run_dir, n) for n in _folders(run_dir))

    def test_resuming_an_older_checkpoint_is_refused(self, run_dir: Path) -> None:
        """Resuming checkpoint-2 while checkpoint-4 is committed is refused the same way."""
        trainer = hf_runs.make_trainer(str(run_dir), max_steps=6, save_steps=2)
        with pytest.raises(UnitError, match="checkpoint-4"):
            trainer.train(resume_from_checkpoint=str(run_dir / "checkpoint-2"))
        assert _folders(run_dir) == ["checkpoint-2", "checkpoint-4"]

    def test_damaged_folder_newer_than_the_resume_point_is_refused_not_deleted(
        self, run_dir: Path
    ) -> None:
        """A damaged checkpoint-4 once held a commit: resuming checkpoint-2 is refused (a
        trajectory exists beyond it) and checkpoint-4 is left as it is."""
        (run_dir / "checkpoint-4" / "notes.txt").write_text("added after the commit")
        trainer = hf_runs.make_trainer(str(run_dir), max_steps=6, save_steps=2)
        with pytest.raises(UnitError, match=r"checkpoint-4 \(damaged"):
            trainer.train(resume_from_checkpoint=str(run_dir / "checkpoint-2"))
        assert (run_dir / "checkpoint-4" / "notes.txt").is_file()
        assert (run_dir / "checkpoint-4" / UNIT_MANIFEST_NAME).is_file()

    def test_damaged_resumed_folder_stops_before_any_step(self, run_dir: Path) -> None:
        """Bytes changed in the resumed folder (same sizes: the Trainer loads it without
        noticing) are found by the deep check at ``on_train_begin``: no step runs."""
        target = run_dir / "checkpoint-4" / "scheduler.pt"
        data = bytearray(target.read_bytes())
        data[-3] ^= 0x01
        target.write_bytes(bytes(data))
        trainer = hf_runs.make_trainer(str(run_dir), max_steps=6, save_steps=2)
        with pytest.raises(UnitDamagedError, match=r"scheduler\.pt"):
            trainer.train(resume_from_checkpoint=str(run_dir / "checkpoint-4"))
        assert _folders(run_dir) == ["checkpoint-2", "checkpoint-4"]

    def test_uncommitted_leftovers_newer_than_the_resume_point_are_removed(
        self, run_dir: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A half-written checkpoint-6 from a killed run is removed at ``on_train_begin``
        (logged), then written again and committed by the resumed run."""
        from statecraft.integrations.hf import last_committed_checkpoint

        leftover = run_dir / "checkpoint-6"
        leftover.mkdir()
        (leftover / "optimizer.pt").write_bytes(b"half")
        caplog.set_level(logging.INFO, logger=HF_LOGGER)
        resume = last_committed_checkpoint(run_dir)
        assert resume == str(run_dir / "checkpoint-4")
        _train(run_dir, max_steps=6, resume=resume)
        assert any(
            r.levelno == logging.WARNING and f"removing {leftover}" in r.getMessage()
            for r in caplog.records
        )
        assert _folders(run_dir) == ["checkpoint-2", "checkpoint-4", "checkpoint-6"]
        assert _committed(run_dir, "checkpoint-6")
        assert (leftover / "optimizer.pt").read_bytes() != b"half"


class _PlantGarbage:
    """A test callback: at step 3 plants an uncommitted ``checkpoint-1`` (garbage older than
    the next commit)."""

    def __init__(self, out: Path) -> None:
        self.out = out

    def __getattr__(self, name: str) -> Any:
        if name.startswith("on_"):
            return lambda *a, **k: None
        raise AttributeError(name)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == 3:
            (self.out / "checkpoint-1").mkdir()
            (self.out / "checkpoint-1" / "model.safetensors").write_bytes(b"x")


class TestRetention:
    def test_save_total_limit_is_taken_over(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        """With ``save_total_limit=2`` the Trainer's rotation is called with ``None`` (never
        deletes); statecraft prunes the oldest committed folders after each commit through
        ``prune_unit``, and the uncommitted garbage too."""
        import transformers.trainer as hf_trainer

        rotations: list[Any] = []
        real_rotate = hf_trainer.rotate_checkpoints

        def spy_rotate(*args: Any, **kwargs: Any) -> None:
            rotations.append(kwargs.get("save_total_limit"))
            real_rotate(*args, **kwargs)

        monkeypatch.setattr(hf_trainer, "rotate_checkpoints", spy_rotate)
        caplog.set_level(logging.INFO, logger=HF_LOGGER)

        out = tmp_path / "out"
        trainer = hf_runs.make_trainer(str(out), max_steps=8, save_steps=2, save_total_limit=2)
        trainer.add_callback(_PlantGarbage(out))
        callback = next(
            cb
            for cb in trainer.callback_handler.callbacks
            if type(cb).__name__ == "StatecraftCallback"
        )
        assert trainer.args.save_total_limit is None
        assert callback.save_total_limit == 2
        trainer.train()

        assert rotations == [None, None, None, None]
        # each retired only after the next commit, by the seal itself (prune_unit: invalidate,
        # then delete)
        assert [r.manifest.step for r in callback.reports] == [2, 4, 6, 8]
        assert [r.retired for r in callback.reports] == [
            (),
            ("checkpoint-1",),
            ("checkpoint-2",),
            ("checkpoint-4",),
        ]
        assert _folders(out) == ["checkpoint-6", "checkpoint-8"]
        assert all(_committed(out, n) for n in _folders(out))
        assert any("takes over save_total_limit=2" in r.getMessage() for r in caplog.records)

    def test_limit_taken_over_when_added_after_init(self, tmp_path: Path) -> None:
        """A callback added with ``trainer.add_callback`` (no ``on_init_end``) takes the limit
        over at ``on_train_begin``."""
        from statecraft.integrations.hf import StatecraftCallback

        out = tmp_path / "out"
        trainer = hf_runs.make_trainer(
            str(out), max_steps=6, save_steps=2, save_total_limit=1, callback=False
        )
        trainer.add_callback(StatecraftCallback())
        trainer.train()
        assert trainer.args.save_total_limit is None
        assert _folders(out) == ["checkpoint-6"]

    def test_best_model_checkpoint_is_never_pruned(self, tmp_path: Path) -> None:
        """With ``load_best_model_at_end`` and a limit of 1 the best folder survives beside the
        newest; both stay committed (the Trainer's end-of-training deletion for limit 1 does
        not run either: the limit it sees is ``None``)."""
        out = tmp_path / "out"
        trainer = hf_runs.make_trainer(
            str(out),
            max_steps=8,
            save_steps=2,
            save_total_limit=1,
            eval_strategy="steps",
            eval_steps=2,
            load_best_model_at_end=True,
            metric_for_best_model="loss",
            greater_is_better=True,  # the worst loss is "best": an early folder, kept
            eval_examples=4,
        )
        trainer.train()
        best = trainer.state.best_model_checkpoint
        assert best is not None
        assert Path(best).name != "checkpoint-8"
        assert _folders(out) == sorted([Path(best).name, "checkpoint-8"])
        assert all(_committed(out, n) for n in _folders(out))

    def test_manifest_records_the_output_dir(self, pristine: Path) -> None:
        """The manifest's meta names the output_dir the unit was sealed in."""
        raw = json.loads((pristine / "checkpoint-2" / UNIT_MANIFEST_NAME).read_text())
        assert raw["meta"]["output_dir"] == str(pristine)


class _FakeDist:
    """``torch.distributed`` as ``_collective`` uses it, for a world of two where the other
    rank reports ``other``."""

    def __init__(self, other: str | None) -> None:
        self.other = other
        self.barriers = 0

    def barrier(self) -> None:
        self.barriers += 1

    def get_world_size(self) -> int:
        return 2

    def all_gather_object(self, out: list[Any], mine: Any) -> None:
        out[0], out[1] = mine, self.other


class TestCollective:
    """The barrier / act / agree / barrier step every rank runs in ``on_save`` and
    ``on_train_begin`` (``torch.distributed`` replaced by a fake world of two)."""

    def test_acting_rank_runs_between_two_barriers(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The seal runs after the barrier; the outcome is gathered after it."""
        from statecraft.integrations import hf

        fake = _FakeDist(None)
        monkeypatch.setattr(hf, "_distributed", lambda: fake)
        seen: list[int] = []
        hf._collective(True, lambda: seen.append(fake.barriers))
        assert seen == [1]
        assert fake.barriers == 1

    def test_a_failure_on_the_saving_rank_reaches_every_rank(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The saving rank raises its own error after the all-gather; a rank that did
        nothing raises a UnitError carrying the message at the same point (no rank waits at a
        barrier the others never reach)."""
        from statecraft.integrations import hf

        fake = _FakeDist(None)
        monkeypatch.setattr(hf, "_distributed", lambda: fake)

        def boom() -> None:
            raise UnitNotCommittedError("checkpoint-4: not committed")

        with pytest.raises(UnitNotCommittedError):
            hf._collective(True, boom)
        assert fake.barriers == 1

        other = _FakeDist("checkpoint-4: not committed")
        monkeypatch.setattr(hf, "_distributed", lambda: other)
        with pytest.raises(UnitError, match="another rank: checkpoint-4"):
            hf._collective(False, lambda: None)
        assert other.barriers == 1
