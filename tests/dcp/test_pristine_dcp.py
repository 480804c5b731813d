"""The pristine (never-stepped) optimizer under ``checkpoint_format=dcp``: the save rolls the
extraction's probe back and writes an empty optimizer state with ``optimizer_pristine``; the
restore resets to never-stepped and applies the saved group options; the reference's case (a
checkpoint before the first step, resumed, then trained) is bit-exact against an
uninterrupted run, and a save that keeps the probe is caught."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

from statecraft.checkpoint.state import dcp_state, optimizer_is_pristine
from statecraft.checkpoint.state.dcp_state import OptimizerSave
from statecraft.errors import ResumeError
from tests.checkpoint_runs import Objects, open_checkpointer, train

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

DCP = ("checkpoint_format=dcp",)


class GroupCounterAdam(torch.optim.Optimizer):
    """A fused-Adam-like optimizer: one shared step counter on each param group, fp32 master
    weights built lazily in ``step()``, per-parameter state only for parameters with grads."""

    def __init__(self, params: Any, lr: float = 0.1) -> None:
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:
        if not hasattr(self, "param_groups_master"):
            self.param_groups_master = [
                [p.detach().clone() for p in g["params"]] for g in self.param_groups
            ]
        for group in self.param_groups:
            group["step"] = group.get("step", 0) + 1
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                state.setdefault("exp_avg", torch.zeros_like(p)).mul_(0.9).add_(p.grad)
                p.add_(state["exp_avg"], alpha=-group["lr"] / (1 - 0.9 ** group["step"]))


def _adamw() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    return model, torch.optim.AdamW(model.parameters(), lr=0.01)


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


class TestOptimizerStateForSave:
    def test_pristine_adamw_saves_empty_state_and_leaves_no_trace(self) -> None:
        """A never-stepped AdamW saves an empty state marked pristine with its group options;
        afterwards it still holds no state and the same group keys."""
        model, optimizer = _adamw()
        keys = set(optimizer.param_groups[0])
        save = dcp_state.optimizer_state_for_save(model, optimizer)
        assert save == OptimizerSave({}, True, save.groups)
        assert save.groups[0]["lr"] == 0.01
        assert "params" not in save.groups[0]
        assert not optimizer.state
        assert set(optimizer.param_groups[0]) == keys
        assert all(p.grad is None for p in model.parameters())

    def test_stepped_adamw_saves_its_state(self) -> None:
        """After one step the save is not pristine and holds exp_avg for every parameter."""
        model, optimizer = _adamw()
        _step(model, optimizer)
        save = dcp_state.optimizer_state_for_save(model, optimizer)
        assert not save.pristine
        assert sorted(save.state["state"]) == ["bias", "weight"]
        assert float(save.state["state"]["weight"]["step"]) == 1.0

    def test_group_counter_trace_counts_as_stepped(self) -> None:
        """A group-counter optimizer whose only parameters are frozen stepped with an empty
        per-parameter state: it is not pristine (the group counter is a trace)."""
        model = torch.nn.Linear(2, 2).requires_grad_(False)
        optimizer = GroupCounterAdam(model.parameters())
        optimizer.step()
        assert not optimizer.state
        assert not dcp_state.optimizer_never_stepped(optimizer)
        assert not optimizer_is_pristine(optimizer)  # trainer.pt's marker: the same rule

    def test_group_counter_probe_is_rolled_back_and_never_accumulates(self) -> None:
        """Saving a never-stepped group-counter optimizer three times: each save is pristine
        and afterwards no group 'step' key and no master weights exist (the probe created
        both)."""
        model = torch.nn.Linear(2, 2)
        optimizer = GroupCounterAdam(model.parameters())
        for _ in range(3):
            save = dcp_state.optimizer_state_for_save(model, optimizer)
            assert save.pristine
            assert save.state == {}
            assert "step" not in optimizer.param_groups[0]
            assert not hasattr(optimizer, "param_groups_master")
            assert not optimizer.state

    def test_the_probe_does_run(self) -> None:
        """The plain extraction does leave the traces the rollback removes (the test above can
        fail)."""
        model = torch.nn.Linear(2, 2)
        optimizer = GroupCounterAdam(model.parameters())
        get_optimizer_state_dict(model, optimizer)
        assert optimizer.param_groups[0]["step"] == 1
        assert hasattr(optimizer, "param_groups_master")


class TestOptimizerLoadTarget:
    def test_pristine_restore_resets_and_applies_saved_group_options(self) -> None:
        """A stepped live optimizer with another lr restores a pristine checkpoint: no state,
        the saved lr, and nothing to load (None)."""
        model, optimizer = _adamw()
        groups = dcp_state.optimizer_state_for_save(model, optimizer).groups
        _step(model, optimizer)
        optimizer.param_groups[0]["lr"] = 0.5
        target = dcp_state.optimizer_load_target(model, optimizer, pristine=True, groups=groups)
        assert target is None
        assert not optimizer.state
        assert optimizer.param_groups[0]["lr"] == 0.01

    def test_pristine_restore_with_other_group_count_is_refused_unchanged(self) -> None:
        """Saved options for two groups against a one-group optimizer: ResumeError naming both
        counts; the live optimizer keeps its state."""
        model, optimizer = _adamw()
        _step(model, optimizer)
        with pytest.raises(ResumeError, match="2 param group"):
            dcp_state.optimizer_load_target(
                model, optimizer, pristine=True, groups=({"lr": 1.0}, {"lr": 2.0})
            )
        assert optimizer.state

    def test_stepped_target_leaves_a_fresh_optimizer_uninitialized(self) -> None:
        """Shaping the target for a stepped checkpoint probes the fresh live optimizer; the
        probe is rolled back, so a load that is then rejected leaves it never-stepped."""
        model, optimizer = _adamw()
        target = dcp_state.optimizer_load_target(model, optimizer, pristine=False, groups=())
        assert target is not None
        assert sorted(target["state"]) == ["bias", "weight"]
        assert dcp_state.optimizer_never_stepped(optimizer)

    def test_stepped_target_round_trip(self) -> None:
        """A stepped optimizer's saved state applied to a fresh one through a target equals it."""
        model, optimizer = _adamw()
        _step(model, optimizer)
        saved = dcp_state.optimizer_state_for_save(model, optimizer).state
        fresh = torch.optim.AdamW(model.parameters(), lr=0.01)
        target = dcp_state.optimizer_load_target(model, fresh, pristine=False, groups=())
        assert target is not None
        for fqn, entry in saved["state"].items():
            for key, value in entry.items():
                target["state"][fqn][key].copy_(value)
        dcp_state.apply_optimizer_state(model, fresh, target)
        a, b = optimizer.state_dict(), fresh.state_dict()
        for pid, entry in a["state"].items():
            for key, value in entry.items():
                assert torch.equal(value, b["state"][pid][key]), (pid, key)


def _first_then(out: Path, steps: int) -> Objects:
    """Resume (fresh), save before the first step, stop; then a new process resumes it (with
    another live lr, which the saved group options must override) and trains ``steps``."""
    ckpt, _ = open_checkpointer(out, *DCP)
    ckpt.resume()
    ckpt.save()
    ckpt.close()
    ckpt, objects = open_checkpointer(out, *DCP)
    objects.optimizer.param_groups[0]["lr"] = 0.7
    start = ckpt.resume()
    assert start.step == 0
    assert start.source is not None
    train(ckpt, objects, steps)
    ckpt.close()
    return objects


def _straight(out: Path, steps: int) -> Objects:
    ckpt, objects = open_checkpointer(out, *DCP)
    ckpt.resume()
    train(ckpt, objects, steps)
    ckpt.close()
    return objects


def _equal(a: Objects, b: Objects) -> bool:
    same = all(torch.equal(v, b.model.state_dict()[k]) for k, v in a.model.state_dict().items())
    sa, sb = a.optimizer.state_dict(), b.optimizer.state_dict()
    same = same and sa["param_groups"] == sb["param_groups"]
    for pid, entry in sa["state"].items():
        for key, value in entry.items():
            same = same and torch.equal(
                torch.as_tensor(value), torch.as_tensor(sb["state"][pid][key])
            )
    return same


class TestCheckpointBeforeTheFirstStep:
    def test_resumed_then_trained_is_bit_exact(self, tmp_path: Path) -> None:
        """The reference's case: checkpoint at step 0, resume, train 3 steps == 3 steps straight;
        trainer.pt records optimizer_pristine and optim/ holds no moments."""
        resumed = _first_then(tmp_path / "a", 3)
        straight = _straight(tmp_path / "b", 3)
        assert _equal(resumed, straight)
        [trainer] = (tmp_path / "a").glob("**/checkpoints/iter_000000000/trainer.pt")
        assert torch.load(trainer, weights_only=True)["optimizer_pristine"] is True

    def test_a_save_that_keeps_the_probe_is_caught(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Broken variant: the save extracts with the plain API (no rollback, no pristine
        marker): AdamW's step counter is 1 before the first update and the run diverges."""

        def naive(model: Any, optimizer: Any) -> OptimizerSave:
            return OptimizerSave(get_optimizer_state_dict(model, optimizer), False, ())

        monkeypatch.setattr(dcp_state, "optimizer_state_for_save", naive)
        resumed = _first_then(tmp_path / "a", 3)
        monkeypatch.undo()
        straight = _straight(tmp_path / "b", 3)
        assert not _equal(resumed, straight)
