"""The plan model (what a checkpoint holds), the Writer protocol (its call order, enforced),
and the save's stage step (every payload captured before any write)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from statecraft.checkpoint.kernel.machines import load_machine
from statecraft.checkpoint.kernel.plan import (
    CHECKPOINT_PLAN,
    FULL_COMPONENTS,
    CheckpointPlan,
    Phase,
    PlanEntry,
    full_save_plan,
)
from statecraft.checkpoint.save.bindings import SaveContext
from statecraft.engine.crash import IoGate
from statecraft.errors import CheckpointError
from statecraft.storage import SimWorld
from statecraft.storage.base import FileRecord, Store
from statecraft.writers import ConsolidatedWriter, Writer


class TestPlan:
    def test_entries_phases_and_loading(self) -> None:
        """Bulk entries come first; only the model and its moving copies are mapped; data.pt
        and the copies (old.pt, ref.pt) are optional."""
        assert CHECKPOINT_PLAN.names == (
            "model.pt",
            "optim.pt",
            "old.pt",
            "ref.pt",
            "trainer.pt",
            "data.pt",
        )
        assert [e.name for e in CHECKPOINT_PLAN.in_phase(Phase.BULK)] == [
            "model.pt",
            "optim.pt",
            "old.pt",
            "ref.pt",
        ]
        assert [e.name for e in CHECKPOINT_PLAN.in_phase(Phase.CONTROL)] == [
            "trainer.pt",
            "data.pt",
        ]
        assert [e.name for e in CHECKPOINT_PLAN if e.mmap] == ["model.pt", "old.pt", "ref.pt"]
        assert CHECKPOINT_PLAN.required_names == ("model.pt", "optim.pt", "trainer.pt")
        assert CHECKPOINT_PLAN.for_tracked("optimizer").name == "optim.pt"
        assert {e.component for e in CHECKPOINT_PLAN} == set(FULL_COMPONENTS)

    def test_save_plan(self) -> None:
        """The save plan lists data.pt only with a data source, files sorted."""
        plan = full_save_plan(7, with_data=True)
        assert (plan.iteration, plan.format, plan.components) == (
            7,
            "consolidated",
            FULL_COMPONENTS,
        )
        assert plan.files == ("data.pt", "model.pt", "optim.pt", "trainer.pt")
        assert full_save_plan(7, with_data=False).files == ("model.pt", "optim.pt", "trainer.pt")
        copies = CHECKPOINT_PLAN.save_plan(7, with_data=False, copies=("ref",))
        assert copies.files == ("model.pt", "optim.pt", "ref.pt", "trainer.pt")

    def test_payload_producers_come_from_the_tracked_objects(self) -> None:
        """Each entry's producer is its tracked object's state_dict (trainer.pt: the trainer
        state's to_payload); a missing optional object is left out."""

        class Tracked:
            model = torch.nn.Linear(1, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            data = None

        class Trainer:
            def to_payload(self) -> dict[str, int]:
                return {"optimizer_step": 3}

        producers = CHECKPOINT_PLAN.payloads(Tracked(), Trainer())
        assert sorted(producers) == ["model.pt", "optim.pt", "trainer.pt"]
        assert producers["trainer.pt"]() == {"optimizer_step": 3}
        assert set(producers["model.pt"]()) == {"weight", "bias"}

    def test_a_required_object_missing_is_named(self) -> None:
        """A plan entry whose required tracked object is absent names it and the fix."""

        class Tracked:
            model = None
            optimizer = None
            data = None

        with pytest.raises(CheckpointError, match=r"'model\.pt' needs tracked 'model'"):
            CHECKPOINT_PLAN.payloads(Tracked(), object())

    def test_a_malformed_plan_is_refused(self) -> None:
        """Duplicate entries and unknown components are refused in one message."""
        entry = PlanEntry("a.pt", "model", Phase.BULK, True, "model")
        with pytest.raises(CheckpointError) as info:
            CheckpointPlan((entry, entry, PlanEntry("b.pt", "weights", Phase.BULK, True, None)))
        assert "entry 'a.pt' appears twice" in str(info.value)
        assert "entry 'b.pt' names component 'weights'" in str(info.value)

    def test_unknown_entry_name(self) -> None:
        """Asking for an entry the plan lacks lists the entries."""
        with pytest.raises(CheckpointError, match=r"no entry 'extra\.pt'; entries:"):
            CHECKPOINT_PLAN.entry("extra.pt")


class _Recording(Writer):
    format_name = "consolidated"

    def __init__(self) -> None:
        self.inner = ConsolidatedWriter()
        self.calls: list[str] = []

    def __repr__(self) -> str:
        return "_Recording()"

    def prepare_plan(self, plan: Any, store: Store) -> None:
        self.calls.append("prepare")

    def write(self, store: Store, path: str, payload: Any) -> FileRecord:
        self.calls.append(f"write {path.split('/')[-1]}")
        return self.inner.write(store, path, payload)

    def writer_info(self) -> dict[str, str]:
        self.calls.append("finish")
        return {"recording": "1"}

    def read(self, store: Store, path: str, *, mmap: bool = True) -> Any:
        return self.inner.read(store, path, mmap=mmap)


def _ctx(world: SimWorld, **kwargs: Any) -> SaveContext:
    payloads = kwargs.pop("payloads", None) or {
        "model.pt": lambda: {"w": torch.zeros(2)},
        "optim.pt": lambda: {"state": {}, "param_groups": []},
        "trainer.pt": lambda: {"optimizer_step": 1},
    }
    return SaveContext(
        store=world.local_store("/ckpt"),
        plan=full_save_plan(1, with_data=False),
        payloads=payloads,
        **kwargs,
    )


class TestWriterProtocol:
    def test_an_incomplete_writer_cannot_be_built(self) -> None:
        """A Writer subclass missing write / read / writer_info is not instantiable."""

        class Half(Writer):
            format_name = "consolidated"

            def write(self, store: Store, path: str, payload: Any) -> FileRecord:
                raise NotImplementedError

        with pytest.raises(TypeError, match="abstract"):
            Half()  # type: ignore[abstract]

    def test_the_save_follows_the_call_order(self) -> None:
        """prepare, then each entry bulk first, then finish; finish's info is in the manifest."""
        world = SimWorld()
        writer = _Recording()
        ctx = _ctx(world, writer=writer)
        load_machine("save").recover(ctx).raise_for_failure()
        assert writer.calls == [
            "prepare",
            "write model.pt",
            "write optim.pt",
            "write trainer.pt",
            "finish",
        ]
        assert b'"recording": "1"' in world.local_store("/ckpt").read_bytes(
            "iter_000000001/.posttrain-manifest.json"
        )

    def test_write_before_prepare_is_refused(self) -> None:
        """begin_write before prepare names the order."""
        with pytest.raises(CheckpointError, match="order is prepare -> write"):
            ConsolidatedWriter().begin_write("model.pt")

    def test_a_writer_serves_one_save(self) -> None:
        """prepare twice, finish twice, or finish before prepare are refused."""
        writer = ConsolidatedWriter()
        plan = full_save_plan(1, with_data=False)
        store = SimWorld().local_store("/ckpt")
        with pytest.raises(CheckpointError, match="finish called while the writer is new"):
            writer.finish()
        writer.prepare(plan, store)
        with pytest.raises(CheckpointError, match="a writer serves one save"):
            writer.prepare(plan, store)
        assert set(writer.finish()) == {"torch"}
        with pytest.raises(CheckpointError, match="while the writer is finished"):
            writer.finish()

    def test_a_plan_in_another_format_is_refused(self) -> None:
        """The consolidated writer refuses to prepare a DCP plan, naming both formats."""
        plan = full_save_plan(1, with_data=False, format_name="dcp")
        with pytest.raises(CheckpointError, match="format is 'dcp' but this writer writes"):
            ConsolidatedWriter().prepare(plan, SimWorld().local_store("/ckpt"))

    def test_save_context_refuses_a_non_writer(self) -> None:
        """A writer that does not implement Writer is refused when the save is set up."""
        with pytest.raises(CheckpointError, match=r"must implement statecraft\.writers\.Writer"):
            _ctx(SimWorld(), writer=object())

    def test_save_context_refuses_an_entry_the_plan_model_lacks(self) -> None:
        """A save plan naming a file the checkpoint plan does not describe is refused."""
        from statecraft.checkpoint.kernel.manifest import SavePlan

        with pytest.raises(CheckpointError, match=r"names \['extra.pt'\].*plan.py"):
            SaveContext(
                store=SimWorld().local_store("/ckpt"),
                plan=SavePlan(1, "consolidated", FULL_COMPONENTS, ("extra.pt",)),
                payloads={"extra.pt": dict},
            )


class TestStage:
    def test_every_payload_is_captured_before_any_write(self) -> None:
        """All producers run in stage_payloads, before prepare_iteration's first store op."""
        world = SimWorld()
        events: list[str] = []

        def producer(name: str, value: Any):
            def produce() -> Any:
                events.append(f"capture {name} at io {world.gate.count}")
                return value

            return produce

        ctx = _ctx(
            world,
            payloads={
                "model.pt": producer("model", {"w": torch.ones(1)}),
                "optim.pt": producer("optim", {"state": {}, "param_groups": []}),
                "trainer.pt": producer("trainer", {"optimizer_step": 1}),
            },
        )
        before = world.gate.count
        result = load_machine("save").recover(ctx).raise_for_failure()
        assert result.trace[0].effect == "stage_payloads"
        assert result.trace[0].io_count == 0
        assert events == [f"capture {n} at io {before}" for n in ("model", "optim", "trainer")]

    def test_each_producer_runs_once_and_its_capture_is_written(self) -> None:
        """A producer that returns something new on every call runs once; the file holds
        that first capture."""
        world = SimWorld()
        calls = {"n": 0}

        def changing() -> Any:
            calls["n"] += 1
            return {"w": torch.full((1,), float(calls["n"]))}

        ctx = _ctx(
            world,
            payloads={
                "model.pt": changing,
                "optim.pt": lambda: {"state": {}, "param_groups": []},
                "trainer.pt": lambda: {"optimizer_step": 1},
            },
        )
        load_machine("save").recover(ctx).raise_for_failure()
        assert calls["n"] == 1
        loaded = ConsolidatedWriter().read(world.local_store("/ckpt"), "iter_000000001/model.pt")
        assert torch.equal(loaded["w"], torch.ones(1))

    def test_a_failing_producer_aborts_before_any_store_operation(self) -> None:
        """A state_dict() that raises ends the save in 'aborted' with storage untouched."""
        world = SimWorld()
        store = world.local_store("/ckpt")
        gate: IoGate = world.gate
        before = gate.count

        def broken() -> Any:
            raise RuntimeError("state_dict failed")

        ctx = _ctx(
            world,
            payloads={
                "model.pt": broken,
                "optim.pt": dict,
                "trainer.pt": dict,
            },
        )
        result = load_machine("save").recover(ctx)
        assert (result.final_state, result.failed) == ("aborted", True)
        assert [e.effect for e in result.trace] == ["stage_payloads"]
        assert gate.count == before
        assert store.list("") == []
        with pytest.raises(RuntimeError, match="state_dict failed"):
            result.raise_for_failure()

    def test_a_write_without_staging_is_refused(self) -> None:
        """Calling a write effect on an unstaged context names the missing stage step."""
        from statecraft.checkpoint.save.bindings import write_components

        with pytest.raises(CheckpointError, match="before stage_payloads captured"):
            write_components(_ctx(SimWorld()))
