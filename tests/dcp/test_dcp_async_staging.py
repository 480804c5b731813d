"""The staging of an asynchronous DCP save (``statecraft.checkpoint.save.dcp_async.CpuStaging``)
on a real model and AdamW: the snapshot never changes with the live state, its buffers are
reused while the shapes hold and reallocated when they change, and a snapshot that would share
memory with the live state is refused."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from statecraft.checkpoint.kernel.loading import dcp_optimizer_payload
from statecraft.checkpoint.save import dcp_async
from statecraft.checkpoint.save.dcp_async import CpuStaging
from statecraft.checkpoint.state import dcp_state
from statecraft.errors import CheckpointError


def _objects() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    model(torch.randn(3, 4)).pow(2).sum().backward()
    optimizer.step()
    optimizer.zero_grad()


def _optim(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Any:
    return dcp_optimizer_payload(dcp_state.optimizer_state_for_save(model, optimizer))


def test_snapshot_is_isolated_and_buffers_are_reused() -> None:
    model, optimizer = _objects()
    _step(model, optimizer)
    staging = CpuStaging()
    first = staging.stage("optim", _optim(model, optimizer))
    kept = {k: v.clone() for k, v in first["state"]["0.weight"].items()}
    lr = first["param_groups"][0]["lr"]
    pointer = first["state"]["0.weight"]["exp_avg"].data_ptr()

    optimizer.param_groups[0]["lr"] = 5.0  # the live state moves on
    _step(model, optimizer)
    for key, value in kept.items():
        assert torch.equal(first["state"]["0.weight"][key], value), key
    assert first["param_groups"][0]["lr"] == lr

    second = staging.stage("optim", _optim(model, optimizer))
    assert second["state"]["0.weight"]["exp_avg"].data_ptr() == pointer  # reused
    assert second["param_groups"][0]["lr"] == 5.0
    live = optimizer.state_dict()["state"][0]["exp_avg"]
    assert torch.equal(second["state"]["0.weight"]["exp_avg"], live)


def test_a_changed_shape_reallocates() -> None:
    model, optimizer = _objects()
    staging = CpuStaging()
    pristine = staging.stage("optim", _optim(model, optimizer))  # no per-parameter state yet
    _step(model, optimizer)
    stepped = staging.stage("optim", _optim(model, optimizer))
    assert sorted(pristine) != sorted(stepped)  # another structure: new buffers
    live = optimizer.state_dict()["state"][1]["exp_avg_sq"]
    assert torch.equal(stepped["state"]["0.bias"]["exp_avg_sq"], live)


def test_a_snapshot_sharing_memory_with_the_live_state_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Broken variant: staging that hands back the live tensors is caught, naming the fix."""
    import torch.distributed._state_dict_utils as utils

    monkeypatch.setattr(utils, "_create_cpu_state_dict", lambda state: state)
    monkeypatch.setattr(utils, "_copy_state_dict", lambda state, buffers: buffers)
    model, _ = _objects()
    with pytest.raises(CheckpointError, match=r"shares memory with the live state.*save_async"):
        dcp_async.CpuStaging().stage("model", dcp_state.model_state_for_save(model))
