"""Canonical payloads (statecraft.checkpoint.state.canonical): the bytes torch.save writes for
trainer.pt and data.pt are a function of the state's content, not of dict insertion order,
object sharing or tensor storage."""

from __future__ import annotations

import io
from collections import OrderedDict
from typing import Any

import torch

from statecraft.checkpoint.state import DataState, TrainerState
from statecraft.checkpoint.state.canonical import canonical


def saved(payload: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    return buffer.getvalue()


def scheduler_state(*, reordered: bool, shared: bool) -> dict[str, Any]:
    """An equal scheduler state built in another insertion order and with or without shared
    strings, lists and tensor storage (as a resumed scheduler may hold it)."""
    name = "".join(["warm", "up"])  # a distinct str object of the same value
    lrs = [0.1, 0.2]
    base = torch.arange(6.0)
    items = [
        ("phase", "warmup" if shared else name),
        ("label", "warmup"),
        ("base_lrs", lrs),
        ("_last_lr", lrs if shared else list(lrs)),
        ("window", base[2:4] if shared else torch.tensor([2.0, 3.0])),
        ("last_epoch", 3),
    ]
    return dict(reversed(items) if reordered else items)


class TestCanonical:
    def test_equal_copy(self) -> None:
        """The copy equals the input (tensors by value) and shares no container with it."""
        state = scheduler_state(reordered=False, shared=True)
        copy = canonical(state)
        assert copy.keys() == state.keys()
        assert copy["base_lrs"] == state["base_lrs"]
        assert copy["base_lrs"] is not state["base_lrs"]
        assert torch.equal(copy["window"], state["window"])
        assert copy["window"].untyped_storage().nbytes() == 2 * 4

    def test_same_content_same_bytes(self) -> None:
        """Equal states pickle differently as they are, identically once canonical."""
        a = scheduler_state(reordered=False, shared=True)
        b = scheduler_state(reordered=True, shared=False)
        assert saved(a) != saved(b)
        assert saved(canonical(a)) == saved(canonical(b))

    def test_plain_dict_keys_are_sorted_ordered_dict_keeps_its_order(self) -> None:
        """A plain dict's keys come out sorted; an OrderedDict's order is content and stays."""
        assert list(canonical({"b": 1, "a": 2, "c": {2: "x", 1: "y"}})) == ["a", "b", "c"]
        assert list(canonical({"c": {2: "x", 1: "y"}})["c"]) == [1, 2]
        ordered = OrderedDict([("b", 1), ("a", 2)])
        assert list(canonical(ordered)) == ["b", "a"]
        assert list(canonical({1: "int", "a": "str"})) == [1, "a"]  # no order to impose


class TestPayloadsAreCanonical:
    def test_trainer_payload_bytes_depend_only_on_content(self) -> None:
        """Two equal trainer states (scheduler state reordered, shared, viewing a storage)
        write byte-identical trainer.pt payloads."""
        states = [
            TrainerState(
                optimizer_step=4,
                attempt_id=4,
                rng=None,
                scheduler_state=scheduler_state(reordered=reordered, shared=shared),
                extra={"z": 1, "a": [1, 2]} if reordered else {"a": [1, 2], "z": 1},
            )
            for reordered, shared in ((False, True), (True, False))
        ]
        assert states[0] == states[1]
        assert saved(states[0].to_payload()) == saved(states[1].to_payload())

    def test_data_payload_bytes_depend_only_on_content(self) -> None:
        """Two equal data states (cursor dicts in another order) write the same data.pt."""
        a = DataState(world_size=1, ranks=({"position": 4, "epoch": 1},))
        b = DataState(world_size=1, ranks=({"epoch": 1, "position": 4},))
        assert saved(a.to_payload()) == saved(b.to_payload())
