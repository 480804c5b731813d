"""Tests of statecraft.checkpoint.async_writes.staging: the reused staging buffers of an async save
and the
proof that a snapshot shares no storage with the live training state."""

from __future__ import annotations

import dataclasses
import io
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import attrs
import pytest
import torch

from statecraft.checkpoint.async_writes.staging import (
    Snapshot,
    SnapshotUnsupported,
    StagingBuffers,
    isolation_problem,
)


class Objects:
    """A small model with a BatchNorm (module versions in ``_metadata``) and a stepped AdamW."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.BatchNorm1d(16))
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=0.01)
        self.step()

    def step(self) -> None:
        self.model(torch.randn(4, 16)).sum().backward()
        self.optimizer.step()
        self.optimizer.zero_grad()

    def payloads(self) -> dict[str, Any]:
        return {
            "model.pt": self.model.state_dict(),
            "optim.pt": self.optimizer.state_dict(),
            "trainer.pt": {"step": 3, "rng": [torch.get_rng_state()], "name": ("a", 1)},
        }

    def live(self) -> dict[str, Any]:
        return {"model": self.model, "optimizer": self.optimizer}


def tensors(obj: Any, path: str = "") -> dict[str, torch.Tensor]:
    """Every tensor under ``obj`` by a flat key path."""
    if isinstance(obj, torch.Tensor):
        return {path: obj}
    out: dict[str, torch.Tensor] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(tensors(v, f"{path}/{k}"))
    elif isinstance(obj, list | tuple):
        for i, v in enumerate(obj):
            out.update(tensors(v, f"{path}/{i}"))
    return out


def saved_bytes(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def loaded(obj: Any) -> Any:
    return torch.load(io.BytesIO(saved_bytes(obj)), weights_only=True)


def assert_same_values(a: Any, b: Any) -> None:
    ta, tb = tensors(a), tensors(b)
    assert ta.keys() == tb.keys()
    for key in ta:
        assert ta[key].dtype == tb[key].dtype, key
        assert ta[key].shape == tb[key].shape, key
        assert torch.equal(ta[key], tb[key]), key


class TestSnapshot:
    def test_values_and_structure_equal(self) -> None:
        """The snapshot holds equal tensors (dtype, shape, strides) in rebuilt containers of the
        same types, including the state dict's OrderedDict and its _metadata."""
        objects = Objects()
        payloads = objects.payloads()
        snap = StagingBuffers().snapshot(payloads)
        assert isinstance(snap, Snapshot)
        assert_same_values(snap.payloads, payloads)
        model = snap.payloads["model.pt"]
        assert type(model) is OrderedDict
        assert model._metadata == payloads["model.pt"]._metadata
        assert model is not payloads["model.pt"]
        assert snap.payloads["trainer.pt"]["name"] == ("a", 1)
        for key, t in tensors(snap.payloads).items():
            assert t.device.type == "cpu", key
            assert t.stride() == tensors(payloads)[key].stride(), key
        assert snap.tensor_bytes == sum(t.nbytes for t in tensors(payloads).values())
        assert snap.allocated_bytes == snap.tensor_bytes
        assert snap.seconds > 0

    def test_loads_back_like_the_live_payload(self) -> None:
        """torch.save of the snapshot loads back to the same values as torch.save of the live
        payloads, and a model loads its state from it."""
        objects = Objects()
        snap = StagingBuffers().snapshot(objects.payloads())
        assert_same_values(loaded(snap.payloads), loaded(objects.payloads()))
        fresh = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.BatchNorm1d(16))
        fresh.load_state_dict(loaded(snap.payloads)["model.pt"])
        assert_same_values(fresh.state_dict(), objects.model.state_dict())

    def test_buffers_reused_from_second_snapshot(self) -> None:
        """The second snapshot of the same shapes copies into the same buffers (same data_ptr),
        allocates nothing, and counts every buffer as reused."""
        objects = Objects()
        staging = StagingBuffers()
        first = staging.snapshot(objects.payloads())
        held = staging.allocated_bytes
        pointers = {k: t.data_ptr() for k, t in tensors(first.payloads).items()}
        objects.step()
        second = staging.snapshot(objects.payloads())
        assert {k: t.data_ptr() for k, t in tensors(second.payloads).items()} == pointers
        assert second.allocated_bytes == 0
        assert staging.allocated_bytes == held
        assert staging.reused == len(tensors(first.payloads))
        assert_same_values(second.payloads, objects.payloads())

    def test_reallocated_when_shape_changes(self) -> None:
        """A tensor whose shape changes gets a new buffer; the others are reused; a buffer no
        longer reached is released."""
        staging = StagingBuffers()
        staging.snapshot({"x.pt": {"a": torch.ones(4), "b": torch.ones(2), "c": torch.ones(3)}})
        second = staging.snapshot({"x.pt": {"a": torch.ones(8), "b": torch.zeros(2)}})
        assert second.allocated_bytes == 8 * 4
        assert staging.reused == 1
        assert staging.allocated_bytes == 8 * 4 + 2 * 4
        assert torch.equal(second.payloads["x.pt"]["a"], torch.ones(8))
        third = staging.snapshot({"x.pt": {"a": torch.ones(8, dtype=torch.float64)}})
        assert third.allocated_bytes == 8 * 8
        assert third.payloads["x.pt"]["a"].dtype == torch.float64

    def test_mutating_live_state_leaves_snapshot_unchanged(self) -> None:
        """An optimizer step and in-place edits of the live tensors after the snapshot leave the
        snapshot's values as they were."""
        objects = Objects()
        snap = StagingBuffers().snapshot(objects.payloads())
        expected = loaded(objects.payloads())
        objects.step()
        with torch.no_grad():
            for p in objects.model.parameters():
                p.add_(1.0)
        objects.payloads()["trainer.pt"]["rng"][0].zero_()
        assert_same_values(loaded(snap.payloads), expected)
        assert isolation_problem(snap, objects.live()) is None

    def test_shared_storage_kept_shared(self) -> None:
        """Tied weights (two keys on one storage) stay one storage in the snapshot, so
        torch.save writes one record for both, as for the live state dict."""
        base = torch.arange(12.0)
        payload = {"model.pt": {"a": base, "b": base, "view": base[2:6].view(2, 2)}}
        snap = StagingBuffers().snapshot(payload)
        a, b, view = (snap.payloads["model.pt"][k] for k in ("a", "b", "view"))
        assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
        assert view.untyped_storage().data_ptr() == a.untyped_storage().data_ptr()
        assert view.storage_offset() == 2
        assert torch.equal(view, base[2:6].view(2, 2))
        assert snap.tensor_bytes == 12 * 4
        assert len(saved_bytes(snap.payloads)) == len(saved_bytes(payload))

    def test_parameter_and_requires_grad_kept(self) -> None:
        """An nn.Parameter stays a Parameter (with its requires_grad) in its own buffer."""
        param = torch.nn.Parameter(torch.ones(3))
        snap = StagingBuffers().snapshot({"m.pt": {"p": param}})
        copied = snap.payloads["m.pt"]["p"]
        assert type(copied) is torch.nn.Parameter
        assert copied.requires_grad
        assert copied.data_ptr() != param.data_ptr()
        assert isolation_problem(snap, {"model": {"p": param}}) is None

    @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
    def test_gpu_tensors_staged_to_pinned_cpu(self) -> None:
        """GPU tensors are copied into pinned CPU buffers, reused on the next snapshot."""
        model = torch.nn.Linear(32, 32).cuda()
        staging = StagingBuffers()
        first = staging.snapshot({"model.pt": model.state_dict()})
        weight = first.payloads["model.pt"]["weight"]
        assert weight.device.type == "cpu"
        assert weight.is_pinned()
        assert torch.equal(weight, model.weight.detach().cpu())
        second = staging.snapshot({"model.pt": model.state_dict()})
        assert second.payloads["model.pt"]["weight"].data_ptr() == weight.data_ptr()
        assert isolation_problem(second, {"model": model}) is None


class Tagged(torch.Tensor):
    """A tensor subclass (refused: its own serialization may differ)."""


def quantized() -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # quantized creation is deprecated
        return torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.quint8)


class TestRefusals:
    @pytest.mark.parametrize(
        ("make", "reason"),
        [
            (
                lambda: torch.zeros(3).to_sparse(),
                'x.pt["a"][1] is a sparse tensor (layout torch.sparse_coo)',
            ),
            (quantized, 'x.pt["a"][1] is a quantized tensor'),
            (
                lambda: torch.ones(2).as_subclass(Tagged),
                'x.pt["a"][1] is a tensor subclass (Tagged)',
            ),
            (
                lambda: torch.empty(2, device="meta"),
                'x.pt["a"][1] is a meta tensor (it holds no data)',
            ),
            (
                threading.Lock,
                'x.pt["a"][1] (lock) cannot be deep-copied: TypeError: cannot pickle '
                "'_thread.lock' object",
            ),
        ],
        ids=["sparse", "quantized", "subclass", "meta", "undeepcopyable"],
    )
    def test_refusal_names_key_path(self, make: Callable[[], Any], reason: str) -> None:
        """What cannot be staged raises SnapshotUnsupported whose reason names the key path and
        why; the live payload is left as it was."""
        live = torch.arange(4.0)
        payload = {"x.pt": {"a": [live, make()]}}
        with pytest.raises(SnapshotUnsupported) as info:
            StagingBuffers().snapshot(payload)
        assert info.value.reason == reason
        assert str(info.value) == reason
        assert payload["x.pt"]["a"][0] is live
        assert torch.equal(live, torch.arange(4.0))


@attrs.frozen
class AttrsState:
    counter: torch.Tensor


@dataclasses.dataclass
class DataclassState:
    inner: dict[str, Any]


class PlainState:
    def __init__(self, table: torch.Tensor) -> None:
        self.table = table


class TestIsolation:
    def test_snapshot_is_isolated(self) -> None:
        """A snapshot from StagingBuffers shares nothing with the live model and optimizer."""
        objects = Objects()
        snap = StagingBuffers().snapshot(objects.payloads())
        assert isolation_problem(snap, objects.live()) is None

    def test_live_state_dict_refused(self) -> None:
        """The live state dict itself (what a synchronous save writes) is refused, naming the
        first key that shares storage and the live key it shares with."""
        objects = Objects()
        raw = Snapshot(payloads=objects.payloads(), tensor_bytes=0, allocated_bytes=0, seconds=0)
        assert (
            isolation_problem(raw, objects.live())
            == 'model.pt["0.weight"] shares storage with live model["0.weight"]'
        )

    def test_view_sharing_storage_refused(self) -> None:
        """A view into a live parameter (not its whole storage) is refused."""
        objects = Objects()
        snap = StagingBuffers().snapshot(objects.payloads())
        tampered = dict(snap.payloads)
        tampered["model.pt"] = OrderedDict(snap.payloads["model.pt"])
        tampered["model.pt"]["0.bias"] = objects.model[0].weight.detach()[3, 2:5]
        problem = isolation_problem(attrs.evolve(snap, payloads=tampered), objects.live())
        assert problem == 'model.pt["0.bias"] shares storage with live model["0.weight"]'

    def test_optimizer_state_refused(self) -> None:
        """A snapshot holding the live optimizer's moment is refused, named by the optimizer's
        state dict path."""
        objects = Objects()
        snap = StagingBuffers().snapshot(objects.payloads())
        live_moment = objects.optimizer.state[objects.model[0].weight]["exp_avg"]
        tampered = {**snap.payloads, "optim.pt": {"m": live_moment}}
        problem = isolation_problem(attrs.evolve(snap, payloads=tampered), objects.live())
        assert problem == 'optim.pt["m"] shares storage with live optimizer["state"][0]["exp_avg"]'

    @pytest.mark.parametrize(
        ("live", "culprit"),
        [
            (AttrsState(torch.zeros(4)), "trainer.counter"),
            (DataclassState({"k": [torch.zeros(4)]}), 'trainer.inner["k"][0]'),
            (PlainState(torch.zeros(4)), "trainer.table"),
        ],
        ids=["attrs", "dataclass", "object"],
    )
    def test_live_walk_reaches_fields(self, live: Any, culprit: str) -> None:
        """Tensors inside attrs, dataclass and plain-object fields of the live state count."""
        reached = tensors(attrs.asdict(live) if attrs.has(type(live)) else vars(live))
        (tensor,) = reached.values()
        snap = Snapshot({"trainer.pt": {"t": tensor}}, tensor_bytes=0, allocated_bytes=0, seconds=0)
        assert (
            isolation_problem(snap, {"trainer": live})
            == f'trainer.pt["t"] shares storage with live {culprit}'
        )

    def test_live_container_refused(self) -> None:
        """A snapshot that holds a live mutable container (not a copy) is refused."""
        loop_state = {"epoch": 1, "seen": [1, 2]}
        snap = Snapshot({"trainer.pt": {"extra": loop_state["seen"]}}, 0, 0, 0.0)
        assert (
            isolation_problem(snap, {"loop": loop_state})
            == 'trainer.pt["extra"] is the live object loop["seen"] itself'
        )

    def test_non_cpu_refused(self) -> None:
        """A tensor not on the CPU is refused."""
        snap = Snapshot({"model.pt": {"w": torch.empty(2, device="meta")}}, 0, 0, 0.0)
        assert isolation_problem(snap, {}) == 'model.pt["w"] is on meta, not the CPU'

    def test_sparse_refused(self) -> None:
        """A sparse tensor is refused as not dense."""
        snap = Snapshot({"model.pt": {"w": torch.zeros(2).to_sparse()}}, 0, 0, 0.0)
        assert (
            isolation_problem(snap, {}) == 'model.pt["w"] is not a dense tensor (torch.sparse_coo)'
        )
