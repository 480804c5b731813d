"""Tests of statecraft.checkpoint.state: per-rank RNG capture, the inventory payload, exact restore.

Round trips go through ``torch.save`` and ``torch.load(weights_only=True)``, which proves the
payload holds nothing a weights-only load rejects.
"""

from __future__ import annotations

import copy
import io
import logging
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from statecraft.checkpoint.state import (
    RNG_SCHEMA,
    RngInventory,
    capture_rng_state,
    gather_rng_inventory,
    restore_rank_rng,
    restore_rng_state,
)
from statecraft.errors import TrainerStateError

LOG = logging.getLogger("test_rng")


def weights_only_roundtrip(obj: Any) -> Any:
    """``torch.save`` ``obj`` to memory and load it back with ``weights_only=True``."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def draw() -> tuple[list[float], list[float], torch.Tensor]:
    """Draw from every stream that a snapshot covers (including a pending numpy gaussian)."""
    return (
        [random.random(), random.gauss(0.0, 1.0)],
        [float(np.random.rand()), float(np.random.standard_normal())],
        torch.rand(5),
    )


def assert_same_draws(a: tuple, b: tuple) -> None:
    assert a[0] == b[0]
    assert a[1] == b[1]
    assert torch.equal(a[2], b[2])


def seeded_state(seed: int) -> dict[str, Any]:
    """A snapshot taken after seeding every stream with ``seed`` (the global streams move)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return capture_rng_state()


class TestCaptureRngState:
    def test_has_every_stream(self) -> None:
        """A snapshot names the python, numpy, torch and cuda streams."""
        state = capture_rng_state()
        assert set(state) == {"python", "numpy", "torch", "cuda"}
        assert set(state["numpy"]) == {"kind", "keys", "pos", "has_gauss", "cached_gaussian"}
        assert state["torch"].dtype == torch.uint8
        assert state["numpy"]["keys"].dtype == torch.int64

    def test_cuda_is_none_without_cuda(self) -> None:
        """Without CUDA the cuda entry is None rather than an empty or fake state."""
        if torch.cuda.is_available():
            pytest.skip("CUDA is available here")
        assert capture_rng_state()["cuda"] is None

    def test_weights_only_safe(self) -> None:
        """A snapshot survives torch.save and torch.load(weights_only=True) unchanged."""
        state = capture_rng_state()
        loaded = weights_only_roundtrip(state)
        assert loaded["python"] == state["python"]
        assert torch.equal(loaded["torch"], state["torch"])
        assert torch.equal(loaded["numpy"]["keys"], state["numpy"]["keys"])

    def test_snapshot_does_not_follow_later_draws(self) -> None:
        """Drawing after a capture leaves the captured snapshot unchanged."""
        state = capture_rng_state()
        before = copy.deepcopy(state)
        draw()
        assert state["python"] == before["python"]
        assert torch.equal(state["torch"], before["torch"])
        assert torch.equal(state["numpy"]["keys"], before["numpy"]["keys"])


class TestRestoreRngState:
    def test_restore_is_exact(self) -> None:
        """Capture, draw, restore and draw again yields identical values on every stream."""
        state = capture_rng_state()
        first = draw()
        restore_rng_state(state)
        assert_same_draws(first, draw())

    def test_restore_after_weights_only_roundtrip_is_exact(self) -> None:
        """A snapshot loaded with weights_only=True restores the streams exactly."""
        np.random.standard_normal()  # leave a cached gaussian in the numpy state
        state = weights_only_roundtrip(capture_rng_state())
        first = draw()
        restore_rng_state(state)
        assert_same_draws(first, draw())

    def test_malformed_state_changes_no_stream(self) -> None:
        """A snapshot with one bad stream is rejected before any stream is touched."""
        good = capture_rng_state()
        bad = copy.deepcopy(good)
        bad["torch"] = torch.zeros(3, dtype=torch.uint8)
        expected = draw()
        restore_rng_state(good)
        with pytest.raises(TrainerStateError, match=r"state\.torch: torch\.Generator\.set_state"):
            restore_rng_state(bad)
        assert_same_draws(expected, draw())

    def test_missing_key_is_named(self) -> None:
        """A snapshot without the numpy entry fails naming the missing key."""
        state = capture_rng_state()
        del state["numpy"]
        with pytest.raises(TrainerStateError, match="missing key 'numpy'"):
            restore_rng_state(state)

    def test_cuda_state_without_cuda_is_skipped_with_warning(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """CUDA state in a snapshot is skipped with a warning when CUDA is unavailable."""
        if torch.cuda.is_available():
            pytest.skip("CUDA is available here")
        state = capture_rng_state()
        state["cuda"] = [torch.get_rng_state()]
        first = draw()
        with caplog.at_level(logging.WARNING, logger="test_rng"):
            restore_rng_state(state, log=LOG)
        assert "CUDA is not available" in caplog.text
        assert_same_draws(first, draw())


class TestRngInventory:
    def test_payload_roundtrip(self) -> None:
        """An inventory survives to_payload, a weights_only round trip and from_payload."""
        inventory = RngInventory(2, (seeded_state(1), seeded_state(2)))
        payload = weights_only_roundtrip(inventory.to_payload())
        assert payload["schema"] == RNG_SCHEMA
        assert RngInventory.from_payload(payload, source="trainer.pt") == inventory

    def test_equality_compares_tensors(self) -> None:
        """Inventories of different streams compare unequal."""
        assert RngInventory(1, (seeded_state(1),)) != RngInventory(1, (seeded_state(2),))

    def test_ranks_list_becomes_tuple(self) -> None:
        """A list of rank states is stored as a tuple."""
        assert isinstance(RngInventory(1, [capture_rng_state()]).ranks, tuple)

    def test_constructor_rejects_length_mismatch(self) -> None:
        """Constructing with fewer states than world_size fails."""
        with pytest.raises(TrainerStateError, match=r"expected 2 per-rank states .*got 1"):
            RngInventory(2, (capture_rng_state(),))

    def test_rejects_non_dict(self) -> None:
        """A payload that is not a dict fails naming the source."""
        with pytest.raises(TrainerStateError, match=r"(?s)^ckpt/trainer\.pt: .*expected a dict"):
            RngInventory.from_payload([1, 2], source="ckpt/trainer.pt")

    def test_rejects_unknown_schema(self) -> None:
        """A payload of another schema fails with expected vs got."""
        payload = RngInventory(1, (capture_rng_state(),)).to_payload()
        payload["schema"] = "statecraft.rng.v9"
        with pytest.raises(TrainerStateError, match=r"schema: expected 'statecraft\.rng\.v1'"):
            RngInventory.from_payload(payload, source="t.pt")

    def test_rejects_ranks_length_mismatch(self) -> None:
        """A payload whose ranks do not number world_size fails with both counts."""
        payload = RngInventory(1, (capture_rng_state(),)).to_payload()
        payload["world_size"] = 3
        with pytest.raises(TrainerStateError, match=r"ranks: expected 3 per-rank states.*got 1"):
            RngInventory.from_payload(payload, source="t.pt")

    @pytest.mark.parametrize("world_size", [0, -1, True, 1.0, "1"])
    def test_rejects_bad_world_size(self, world_size: object) -> None:
        """A world_size that is not a positive int (bool included) fails."""
        payload = RngInventory(1, (capture_rng_state(),)).to_payload()
        payload["world_size"] = world_size
        with pytest.raises(TrainerStateError, match=r"world_size: expected an int >= 1"):
            RngInventory.from_payload(payload, source="t.pt")

    @pytest.mark.parametrize(
        ("mutate", "match"),
        [
            (lambda s: s.update(python=[3, [1, 2], None]), r"ranks\[0\]\.python: random\.setstate"),
            (lambda s: s.update(python="abc"), r"ranks\[0\]\.python: expected \(version"),
            (
                lambda s: s.update(python=(3.0, s["python"][1], None)),
                r"python\[0\]: expected an int",
            ),
            (lambda s: s.update(python=(3, s["python"][1], "x")), r"python\[2\]: expected a float"),
            (lambda s: s["numpy"].update(keys=[1, 2]), r"numpy\.keys: expected a 1-D int64"),
            (
                lambda s: s["numpy"].update(keys=s["numpy"]["keys"][:10]),
                r"numpy: numpy\.random\.set_state rejects",
            ),
            (
                lambda s: s["numpy"].update(keys=s["numpy"]["keys"] - (1 << 33)),
                r"numpy\.keys: expected values in \[0, 2\*\*32\)",
            ),
            (lambda s: s["numpy"].update(pos=True), r"numpy\.pos: expected an int; got True"),
            (lambda s: s["numpy"].pop("kind"), r"numpy: missing key 'kind'"),
            (lambda s: s.update(torch=s["torch"].float()), r"torch: expected a 1-D uint8 CPU"),
            (lambda s: s.update(cuda=[torch.zeros(2)]), r"cuda\[0\]: expected a 1-D uint8"),
            (lambda s: s.update(cuda="gpu"), r"cuda: expected None or a list"),
            (lambda s: s.update(xla=None), r"ranks\[0\]: unexpected key 'xla'"),
        ],
    )
    def test_rejects_malformed_rank_state(self, mutate: Any, match: str) -> None:
        """A malformed per-rank stream fails with its field path and expected vs got."""
        payload = RngInventory(1, (capture_rng_state(),)).to_payload()
        mutate(payload["ranks"][0])
        with pytest.raises(TrainerStateError, match=match) as info:
            RngInventory.from_payload(payload, source="iter_5/trainer.pt")
        assert str(info.value).startswith("iter_5/trainer.pt: ")
        assert info.value.problems  # type: ignore[attr-defined]

    def test_lists_every_problem(self) -> None:
        """Several defects are reported together in one error."""
        payload = RngInventory(2, (capture_rng_state(), capture_rng_state())).to_payload()
        payload["ranks"][0]["torch"] = "x"
        payload["ranks"][1]["numpy"] = None
        with pytest.raises(TrainerStateError) as info:
            RngInventory.from_payload(payload, source="t.pt")
        paths = [p.split(":")[0] for p in info.value.problems]  # type: ignore[attr-defined]
        assert paths == ["ranks[0].torch", "ranks[1].numpy"]


class TestRestoreRankRng:
    def test_same_world_restores(self, caplog: pytest.LogCaptureFixture) -> None:
        """At the saved world size, this rank's streams are restored exactly."""
        inventory = RngInventory(2, (seeded_state(10), seeded_state(11)))
        restore_rng_state(inventory.ranks[1])
        expected = draw()
        seeded_state(99)
        with caplog.at_level(logging.INFO, logger="test_rng"):
            assert restore_rank_rng(inventory, rank=1, world_size=2, log=LOG) == "restored"
        assert_same_draws(expected, draw())
        assert "restored" in caplog.text

    def test_missing_inventory(self, caplog: pytest.LogCaptureFixture) -> None:
        """A legacy checkpoint without an inventory is reported as missing, with a warning."""
        with caplog.at_level(logging.WARNING, logger="test_rng"):
            assert restore_rank_rng(None, rank=0, world_size=1, log=LOG) == "missing"
        assert "no RNG inventory" in caplog.text

    def test_topology_change_is_logged_and_skipped(self, caplog: pytest.LogCaptureFixture) -> None:
        """A different world size restores nothing and logs saved and current sizes."""
        inventory = RngInventory(2, (seeded_state(10), seeded_state(11)))
        seeded_state(7)
        expected = draw()
        seeded_state(7)
        with caplog.at_level(logging.WARNING, logger="test_rng"):
            result = restore_rank_rng(inventory, rank=0, world_size=4, log=LOG)
        assert result == "topology_changed"
        assert_same_draws(expected, draw())
        assert "topology changed" in caplog.text
        assert "world_size=2, now world_size=4" in caplog.text
        assert "not restored" in caplog.text

    @pytest.mark.parametrize(("rank", "world_size"), [(2, 2), (-1, 2), (0, 0), (True, 2)])
    def test_rejects_bad_rank(self, rank: object, world_size: object) -> None:
        """A rank outside [0, world_size) or a bad world size fails."""
        with pytest.raises(TrainerStateError, match="must be an int"):
            restore_rank_rng(None, rank=rank, world_size=world_size, log=LOG)  # type: ignore[arg-type]


class TestGatherRngInventory:
    def test_single_process(self) -> None:
        """One process without a collective yields an inventory of its own streams."""
        expected = capture_rng_state()
        inventory = gather_rng_inventory(rank=0, world_size=1)
        assert inventory.world_size == 1
        assert inventory == RngInventory(1, (expected,))

    def test_several_ranks_need_a_collective(self) -> None:
        """Several ranks without torch.distributed or an injected gather fail."""
        with pytest.raises(TrainerStateError, match="needs a collective"):
            gather_rng_inventory(rank=0, world_size=2)

    def test_injected_gather(self) -> None:
        """An injected all_gather_object places each rank's state at its index."""
        other = seeded_state(5)
        mine = seeded_state(6)

        def all_gather_object(out: list[Any], obj: Any) -> None:
            out[0], out[1] = other, obj

        inventory = gather_rng_inventory(rank=1, world_size=2, all_gather_object=all_gather_object)
        assert inventory == RngInventory(2, (other, mine))

    def test_injected_gather_malformed(self) -> None:
        """A gather that returns a malformed state fails instead of building an inventory."""

        def all_gather_object(out: list[Any], obj: Any) -> None:
            out[0], out[1] = obj, {"python": None}

        with pytest.raises(TrainerStateError, match=r"ranks\[1\]"):
            gather_rng_inventory(rank=0, world_size=2, all_gather_object=all_gather_object)

    @pytest.mark.slow
    def test_gloo_two_ranks(self, tmp_path: Path) -> None:
        """Two real gloo ranks gather distinct streams and each restores its own exactly."""
        torch.multiprocessing.spawn(_gloo_worker, args=(2, str(tmp_path)), nprocs=2, join=True)
        for rank in range(2):
            result = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)
            assert result["status"] == "restored"
            assert result["same_draws"]
            assert result["ranks_differ"]


def _gloo_worker(rank: int, world_size: int, tmp: str) -> None:
    """One rank of :meth:`TestGatherRngInventory.test_gloo_two_ranks` (module level: spawnable)."""
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{tmp}/store", rank=rank, world_size=world_size
    )
    try:
        seeded_state(100 + rank)
        inventory = gather_rng_inventory(rank=rank, world_size=world_size)
        inventory = RngInventory.from_payload(
            weights_only_roundtrip(inventory.to_payload()), source="gloo"
        )
        restore_rng_state(inventory.ranks[rank])
        expected = draw()
        seeded_state(0)
        status = restore_rank_rng(inventory, rank=rank, world_size=world_size, log=LOG)
        got = draw()
        same = expected[0] == got[0] and expected[1] == got[1] and torch.equal(expected[2], got[2])
        differ = inventory.ranks[0]["python"] != inventory.ranks[1]["python"]
        torch.save(
            {"status": status, "same_draws": same, "ranks_differ": differ},
            f"{tmp}/rank{rank}.pt",
        )
        torch.distributed.barrier()  # no rank tears the group down while another still receives
    finally:
        torch.distributed.destroy_process_group()
