"""The staging layout kept between async saves: buffers and staged tensors are reused from the
second save on, and rebuilt when the live tensors are replaced, resized or re-typed; the
bytes staged (and written) are always the live tensors' of that save. ``stage_async`` refuses
to touch the buffers while the role's previous write is not joined.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from checkpoint_runs import RUN

import statecraft as sc
from statecraft.checkpoint.async_writes.staging import StagingBuffers, isolation_problem
from statecraft.checkpoint.async_writes.write_slot import PendingSave, WriteSlot
from statecraft.checkpoint.save.async_saving import stage_async
from statecraft.errors import CheckpointError


def _model() -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(6, 5)


def _staged(staging: StagingBuffers, model: torch.nn.Module) -> dict[str, Any]:
    snap = staging.snapshot({"model.pt": model.state_dict()})
    assert isolation_problem(snap, {"model": model}) is None
    payload: dict[str, Any] = snap.payloads["model.pt"]
    return payload


class TestReuse:
    def test_second_snapshot_reuses_buffers_and_views_and_holds_the_new_values(self) -> None:
        model, staging = _model(), StagingBuffers()
        first = _staged(staging, model)
        first_weight = first["weight"]
        with torch.no_grad():
            model.weight.add_(7.0)
        second = staging.snapshot({"model.pt": model.state_dict()})
        assert second.allocated_bytes == 0
        assert staging.views_reused == 2
        assert second.payloads["model.pt"]["weight"] is first_weight
        assert torch.equal(second.payloads["model.pt"]["weight"], model.weight)
        assert torch.equal(second.payloads["model.pt"]["bias"], model.bias)

    def test_staged_tensors_carry_no_autograd_history(self) -> None:
        model, staging = _model(), StagingBuffers()
        for _ in range(2):
            staged = _staged(staging, model)
            for key, value in staged.items():
                assert value.grad_fn is None, key
                assert value.is_leaf, key
                assert value.requires_grad == model.state_dict()[key].requires_grad, key

    def test_a_replaced_parameter_object_is_staged_with_its_bytes(self) -> None:
        model, staging = _model(), StagingBuffers()
        _staged(staging, model)
        new = torch.full((5, 6), 3.25)
        model.weight = torch.nn.Parameter(new.clone())
        staged = _staged(staging, model)
        assert torch.equal(staged["weight"], new)
        assert staged["weight"].untyped_storage().data_ptr() != new.untyped_storage().data_ptr()

    def test_param_data_assignment_of_the_same_shape_is_staged_with_its_bytes(self) -> None:
        model, staging = _model(), StagingBuffers()
        _staged(staging, model)
        new = torch.full((5,), -1.5)
        model.bias.data = new
        assert _staged(staging, model)["bias"].tolist() == [-1.5] * 5

    def test_a_changed_shape_reallocates_and_stages_the_new_tensor(self) -> None:
        model, staging = _model(), StagingBuffers()
        _staged(staging, model)
        new = torch.arange(24, dtype=torch.float32).reshape(4, 6)
        model.weight.data = new.clone()
        snap = staging.snapshot({"model.pt": model.state_dict()})
        assert snap.allocated_bytes == new.nbytes
        assert snap.payloads["model.pt"]["weight"].shape == (4, 6)
        assert torch.equal(snap.payloads["model.pt"]["weight"], new)

    def test_same_bytes_new_shape_dtype_or_requires_grad_rebuilds_the_view(self) -> None:
        staging = StagingBuffers()
        staging.snapshot({"m.pt": {"t": torch.ones(2, 6)}})
        reshaped = staging.snapshot({"m.pt": {"t": torch.arange(12.0).reshape(3, 4)}})
        assert reshaped.allocated_bytes == 0  # same storage size: the buffer is kept
        assert torch.equal(reshaped.payloads["m.pt"]["t"], torch.arange(12.0).reshape(3, 4))
        ints = torch.arange(12, dtype=torch.int32).reshape(3, 4)
        retyped = staging.snapshot({"m.pt": {"t": ints}})
        assert retyped.payloads["m.pt"]["t"].dtype == torch.int32
        assert torch.equal(retyped.payloads["m.pt"]["t"], ints)
        grads = staging.snapshot({"m.pt": {"t": torch.ones(3, 4, requires_grad=True)}})
        assert grads.payloads["m.pt"]["t"].requires_grad

    def test_views_and_tied_storages_follow_the_live_layout(self) -> None:
        staging = StagingBuffers()
        base = torch.arange(20.0)
        tied = {"a": base, "b": base[5:15].view(2, 5), "c": base[::4]}
        for _ in range(2):
            staged = staging.snapshot({"m.pt": dict(tied)}).payloads["m.pt"]
            for key, value in tied.items():
                assert torch.equal(staged[key], value), key
            ptrs = {staged[k].untyped_storage().data_ptr() for k in tied}
            assert len(ptrs) == 1  # still one shared storage in the copy
            base.add_(100.0)
        untied = {"a": base, "b": base[5:15].clone().view(2, 5), "c": base[::4]}
        staged = staging.snapshot({"m.pt": untied}).payloads["m.pt"]
        for key, value in untied.items():
            assert torch.equal(staged[key], value), key
        assert staged["a"].untyped_storage().data_ptr() != staged["b"].untyped_storage().data_ptr()

    def test_a_view_over_a_larger_storage_is_copied_whole(self) -> None:
        staging = StagingBuffers()
        base = torch.arange(10.0)
        for shift in (0.0, 50.0):
            base.add_(shift)
            staged = staging.snapshot({"m.pt": {"v": base[2:6]}}).payloads["m.pt"]["v"]
            assert torch.equal(staged, base[2:6])
            assert staged.storage_offset() == 2


def _open(out: Path) -> tuple[sc.Checkpointer, torch.nn.Linear]:
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    config = sc.CheckpointConfig.load(None, ["save_every=0", "save_async=true"])
    ckpt = sc.Checkpointer(config, run=RUN, output_root=out)
    ckpt.track(model=model, optimizer=optimizer)
    ckpt.resume()
    return ckpt, model


def _save(ckpt: sc.Checkpointer) -> dict[str, torch.Tensor]:
    ckpt.record(sc.Outcome.APPLIED)
    pending = ckpt.save()
    assert isinstance(pending, sc.PendingSave)
    report = pending.wait()
    saved: dict[str, torch.Tensor] = torch.load(
        Path(report.location) / "model.pt", weights_only=True
    )
    return saved


class TestThroughCheckpointer:
    @pytest.mark.parametrize("how", ["new parameter", "param.data", "new shape"])
    def test_replacing_a_parameter_between_async_saves_writes_the_new_bytes(
        self, tmp_path: Path, how: str
    ) -> None:
        ckpt, model = _open(tmp_path)
        first = _save(ckpt)
        assert torch.equal(first["weight"], model.weight)
        shape = (3, 6) if how == "new shape" else (5, 6)
        new = torch.full(shape, 42.0)
        if how == "new parameter":
            model.weight = torch.nn.Parameter(new.clone())
        else:
            model.weight.data = new.clone()
        second = _save(ckpt)
        assert torch.equal(second["weight"], new)
        assert torch.equal(second["bias"], model.bias)
        with torch.no_grad():
            model.weight.mul_(0.5)  # once more, same layout: the kept view is reused
        third = _save(ckpt)
        assert torch.equal(third["weight"], torch.full(shape, 21.0))
        ckpt.close()


class TestRefusesWhileAWriteHoldsTheBuffers:
    def test_stage_async_refuses_before_producing_or_copying(self) -> None:
        slot, staging, release = WriteSlot(), StagingBuffers(), threading.Event()
        held = PendingSave(iteration=1, location="/ckpt/iter_1", role="trainer")
        slot.submit(held, release.wait)
        produced: list[str] = []

        def produce() -> dict[str, torch.Tensor]:
            produced.append("model.pt")
            return {"w": torch.ones(2)}

        try:
            with pytest.raises(CheckpointError, match="join the slot first"):
                stage_async(
                    {"model.pt": produce},
                    tracked=None,
                    step=2,
                    location="/ckpt/iter_2",
                    staging=staging,
                    slot=slot,
                    job=lambda payloads, pending: None,
                    started=0.0,
                )
            assert produced == []
            assert staging.allocated_bytes == 0
        finally:
            release.set()
            slot.join()
            slot.close()
