"""Loop state and named stateful objects: ``Checkpointer.loop_state`` and
``track(stateful=...)`` are saved with every checkpoint and restored by ``resume()``, all or
nothing, bit for bit (a real ``torch.amp.GradScaler`` and a prefetched batch tensor)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import torch
from checkpoint_runs import Cursor

import statecraft as sc
from statecraft.errors import ResumeError, TrackingError

CONFIG = ["save_every=2", "save_async=false", "keep_optim_last=0"]
RUN = sc.RunIdentity("p", "g", "loop")
INF_ATTEMPTS = {2, 6}  # closed windows whose gradients overflow: the scaler skips them


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes (the writer lease aside)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".statecraft-writer" not in p.name
    }


class Objects:
    """One process's training objects: a model, AdamW, a CPU GradScaler, a data cursor."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Linear(4, 1)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=0.01)
        self.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=2)
        self.cursor = Cursor()

    def get_batch(self) -> torch.Tensor:
        """Random offsets drawn from the global torch stream, like the GPT trainers' get_batch."""
        self.cursor.position += 1
        return torch.randint(0, 100, (3, 4)).float() / 100


@attrs.frozen
class Outcome:
    weight: torch.Tensor
    optimizer: dict[str, Any]
    scaler: dict[str, Any]
    losses: list[float]
    best: float
    result: sc.ResumeResult | None


def _open(out: Path, objects: Objects, **track: Any) -> sc.Checkpointer:
    ckpt = sc.Checkpointer(sc.CheckpointConfig.load(None, CONFIG), run=RUN, output_root=out)
    ckpt.track(
        model=objects.model,
        optimizer=objects.optimizer,
        data=objects.cursor,
        stateful={"scaler": objects.scaler},
        **track,
    )
    return ckpt


def train(out: Path, total: int, *, stop_at: int | None = None, keep_batch: bool = True) -> Outcome:
    """Train to ``total`` optimizer steps (or abandon the process after the step ``stop_at``,
    as a kill would); the prefetched batch is loop state when ``keep_batch``."""
    objects = Objects()
    ckpt = _open(out, objects)
    result = ckpt.resume()
    state = ckpt.loop_state
    batch = state["batch"] if keep_batch and "batch" in state else objects.get_batch()
    losses: list[float] = state.setdefault("losses", [])
    while ckpt.step < total:
        x, batch = batch, objects.get_batch()  # prefetch the next batch before the boundary
        loss = objects.model(x).square().mean()
        if ckpt.clocks.attempt_id in INF_ATTEMPTS:
            loss = loss * float("inf")
        scale = objects.scaler.get_scale()
        objects.scaler.scale(loss).backward()
        objects.scaler.step(objects.optimizer)
        objects.scaler.update()
        objects.optimizer.zero_grad()
        skipped = objects.scaler.get_scale() < scale
        ckpt.record(sc.Outcome.SKIPPED if skipped else sc.Outcome.APPLIED)
        losses.append(float(loss.detach()))
        state["best_val_loss"] = min(state.get("best_val_loss", float("inf")), float(loss.detach()))
        if keep_batch:
            state["batch"] = batch
        ckpt.step_end()
        if stop_at is not None and ckpt.step >= stop_at:
            ckpt.close()
            return _outcome(objects, ckpt, result)
    ckpt.finalize()
    ckpt.close()
    return _outcome(objects, ckpt, result)


def _outcome(objects: Objects, ckpt: sc.Checkpointer, result: sc.ResumeResult) -> Outcome:
    return Outcome(
        objects.model.weight.detach().clone(),
        objects.optimizer.state_dict(),
        objects.scaler.state_dict(),
        list(ckpt.loop_state["losses"]),
        ckpt.loop_state["best_val_loss"],
        result,
    )


def _same_optimizer(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a["param_groups"] == b["param_groups"] and all(
        torch.equal(a["state"][k][n], b["state"][k][n]) for k in a["state"] for n in a["state"][k]
    )


def _checkpoints(out: Path) -> Path:
    [attempt] = [p for p in (out / "p" / "g" / "loop").iterdir() if p.is_dir()]
    return attempt / "checkpoints"


class TestExactResumeWithLoopState:
    def test_grad_scaler_and_prefetched_batch_resume_bit_exact(self, tmp_path: Path) -> None:
        """A run abandoned after step 5 and resumed from iteration 4 ends bit-identical to an
        uninterrupted one: weights, optimizer, GradScaler (it skipped and grew), loss curve,
        best_val_loss."""
        whole = train(tmp_path / "whole", 8)
        train(tmp_path / "cut", 8, stop_at=5)
        resumed = train(tmp_path / "cut", 8)
        assert resumed.result is not None
        assert resumed.result.step == 4
        assert torch.equal(resumed.weight, whole.weight)
        assert _same_optimizer(resumed.optimizer, whole.optimizer)
        assert resumed.scaler == whole.scaler
        assert whole.scaler["scale"] != 1024.0  # the scale really moved (skips and growth)
        assert resumed.losses == whole.losses
        assert resumed.best == whole.best
        assert len(whole.losses) == 8 + len(INF_ATTEMPTS)

    def test_drawing_the_prefetched_batch_again_is_not_exact(self, tmp_path: Path) -> None:
        """Without the prefetched batch in the loop state, the resumed run draws the next
        batch instead of the one the killed run had prefetched: the weights differ."""
        whole = train(tmp_path / "whole", 8, keep_batch=False)
        train(tmp_path / "cut", 8, stop_at=5, keep_batch=False)
        resumed = train(tmp_path / "cut", 8, keep_batch=False)
        assert not torch.equal(resumed.weight, whole.weight)

    def test_resume_fills_loop_state_in_place_and_returns_a_copy(self, tmp_path: Path) -> None:
        """resume() replaces the contents of the same loop_state dict; ResumeResult.loop_state
        is an independent copy; trainer.pt records the loop state and the optimizer class."""
        train(tmp_path, 4)
        objects = Objects()
        ckpt = _open(tmp_path, objects)
        held = ckpt.loop_state
        held["stale"] = True
        result = ckpt.resume()
        assert held is ckpt.loop_state
        assert "stale" not in held
        assert sorted(held) == ["batch", "best_val_loss", "losses"]
        assert torch.equal(result.loop_state["batch"], held["batch"])
        result.loop_state["losses"].append(99.0)
        assert 99.0 not in held["losses"]
        payload = torch.load(
            _checkpoints(tmp_path) / "iter_000000004" / "trainer.pt", weights_only=True
        )
        assert payload["schema"] == "statecraft.trainer-state.v3"
        assert payload["optimizer_class"] == "torch.optim.adamw.AdamW"
        assert sorted(payload["stateful"]) == ["scaler"]
        assert payload["stateful"]["scaler"] == objects.scaler.state_dict()
        ckpt.close()

    def test_the_saved_loop_state_is_a_copy_taken_at_the_save(self, tmp_path: Path) -> None:
        """Mutating the loop state after a save does not change what the save wrote."""
        objects = Objects()
        ckpt = _open(tmp_path, objects)
        ckpt.resume()
        ckpt.loop_state["config"] = {"lr": 0.01, "layers": [2, 2]}
        objects.model(torch.ones(1, 4)).sum().backward()
        objects.optimizer.step()
        ckpt.record(sc.Outcome.APPLIED)
        report = ckpt.save()
        assert report is not None
        ckpt.loop_state["config"]["layers"].append(3)
        payload = torch.load(Path(report.location) / "trainer.pt", weights_only=True)
        assert payload["extra"] == {"config": {"lr": 0.01, "layers": [2, 2]}}
        ckpt.close()

    def test_a_fresh_start_keeps_the_loops_values(self, tmp_path: Path) -> None:
        """With nothing to resume, loop_state keeps what the loop put there and the result's
        loop_state is empty."""
        objects = Objects()
        ckpt = _open(tmp_path, objects)
        ckpt.loop_state["model_args"] = {"n_layer": 2}
        result = ckpt.resume()
        assert not result.resumed
        assert result.loop_state == {}
        assert ckpt.loop_state == {"model_args": {"n_layer": 2}}
        ckpt.close()


class TestStatefulNamesMustMatch:
    def _refused(self, out: Path, **track: Any) -> tuple[str, Objects, dict[str, bytes]]:
        """Resume ``out`` with ``track`` instead of the saving run's stateful objects; the
        message, the live objects and the committed bytes before."""
        before = snapshot(out)
        objects = Objects()
        ckpt = sc.Checkpointer(sc.CheckpointConfig.load(None, CONFIG), run=RUN, output_root=out)
        ckpt.track(model=objects.model, optimizer=objects.optimizer, data=objects.cursor, **track)
        weight = objects.model.weight.detach().clone()
        with pytest.raises(ResumeError) as info:
            ckpt.resume()
        assert torch.equal(objects.model.weight, weight)
        assert objects.optimizer.state_dict()["state"] == {}
        assert objects.cursor.position == 0
        assert ckpt.loop_state == {}
        ckpt.close()
        after = snapshot(out)
        assert {k: v for k, v in after.items() if k in before} == before
        return str(info.value), objects, before

    def test_a_saved_object_the_process_does_not_track_is_refused(self, tmp_path: Path) -> None:
        """The checkpoint saved 'scaler'; a process that does not track it is refused before
        anything loads, with the object's name and the fix."""
        train(tmp_path, 4)
        message, _, _ = self._refused(tmp_path)
        assert "iter_000000004: the named stateful objects do not match the checkpoint" in message
        assert (
            "the checkpoint saved the stateful object 'scaler' but this process does not "
            "track it; pass track(stateful={'scaler': ...})"
        ) in message
        assert "nothing was loaded: every tracked object is unchanged" in message

    def test_a_tracked_object_the_checkpoint_lacks_is_refused(self, tmp_path: Path) -> None:
        """A process tracking 'ema' besides 'scaler' is refused: the checkpoint has no state
        for it."""
        train(tmp_path, 4)
        message, _, _ = self._refused(
            tmp_path, stateful={"scaler": torch.amp.GradScaler("cpu"), "ema": Cursor()}
        )
        assert (
            "the stateful object 'ema' is tracked but the checkpoint saved no state for it "
            "(it saved ['scaler'])"
        ) in message
        assert "resume=off" in message

    def test_a_failing_stateful_load_rolls_everything_back(self, tmp_path: Path) -> None:
        """A stateful object whose load_state_dict raises: the data source already loaded is
        restored, nothing else changes, and the error names the object."""
        train(tmp_path, 4)

        class Broken(Cursor):
            def load_state_dict(self, state: dict[str, int]) -> None:
                raise ValueError("cannot take this state")

        objects = Objects()
        ckpt = sc.Checkpointer(
            sc.CheckpointConfig.load(None, CONFIG), run=RUN, output_root=tmp_path
        )
        broken = Broken()
        ckpt.track(
            model=objects.model,
            optimizer=objects.optimizer,
            data=objects.cursor,
            stateful={"scaler": broken},
        )
        before = snapshot(tmp_path)
        weight = objects.model.weight.detach().clone()
        with pytest.raises(ResumeError) as info:
            ckpt.resume()
        assert (
            "loading the stateful object 'scaler' failed (ValueError: cannot take this state)"
            in str(info.value)
        )
        assert objects.cursor.position == 0
        assert torch.equal(objects.model.weight, weight)
        assert objects.optimizer.state_dict()["state"] == {}
        ckpt.close()
        after = snapshot(tmp_path)
        assert {k: v for k, v in after.items() if k in before} == before


class TestTrackValidation:
    def _track(self, **stateful: Any) -> None:
        objects = Objects()
        ckpt = sc.Checkpointer(
            sc.CheckpointConfig.load(None, CONFIG), run=RUN, output_root="/nonexistent-unused"
        )
        ckpt.track(model=objects.model, optimizer=objects.optimizer, stateful=stateful)

    def test_a_name_must_be_an_identifier(self) -> None:
        """A stateful name with a space is refused with the naming rule."""
        with pytest.raises(TrackingError, match=r"the name 'my scaler' is not a plain identifier"):
            self._track(**{"my scaler": Cursor()})

    def test_a_name_must_not_clash_with_a_built_in_part(self) -> None:
        """'model' as a stateful name clashes with the model's own keyword."""
        with pytest.raises(TrackingError, match=r"the name 'model' clashes with a built-in part"):
            self._track(model=Cursor())

    def test_an_object_needs_state_dict_and_load_state_dict(self) -> None:
        """An object without load_state_dict is refused, naming it."""

        class HalfStateful:
            def state_dict(self) -> dict[str, int]:
                return {}

        with pytest.raises(TrackingError, match=r"track\(stateful\['ema'\]=\.\.\.\): HalfStateful"):
            self._track(ema=HalfStateful())

    def test_loop_state_must_stay_a_dict(self) -> None:
        """Assigning something other than a dict to loop_state is refused."""
        objects = Objects()
        ckpt = sc.Checkpointer(
            sc.CheckpointConfig.load(None, CONFIG), run=RUN, output_root="/nonexistent-unused"
        )
        ckpt.track(model=objects.model, optimizer=objects.optimizer)
        ckpt.loop_state = {"a": 1}
        assert ckpt.loop_state == {"a": 1}
        with pytest.raises(TrackingError, match="loop_state must be a dict; got list"):
            ckpt.loop_state = [1]  # type: ignore[assignment]
