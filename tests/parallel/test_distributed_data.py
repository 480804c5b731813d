"""Per-rank data state under a real two-rank gloo process group on CPU: every rank's data
source state is saved in ``data.pt`` and each rank restores its own; a world-size change
follows ``data.cursor_resume`` for a DCP checkpoint; a consolidated one at another world size
is refused."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from data_sources import plain_cursor_source

import statecraft as sc
from statecraft.errors import ResumeError, UnsafeStateError, WorldSizeChangedError

pytestmark = pytest.mark.slow

CONFIG = ["save_every=2", "save_async=false", "keep_optim_last=0"]
DCP = ["checkpoint_format=dcp"]
RUN = sc.RunIdentity("p", "g", "dist-data")


class RankCursor:
    """A data source whose position differs per rank (each rank reads its own shard)."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.position = 0

    def state_dict(self) -> dict[str, int]:
        return {"rank": self.rank, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.rank = state["rank"]
        self.position = state["position"]


def _objects(rank: int) -> tuple[torch.nn.Module, torch.optim.Optimizer, RankCursor]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    return model, torch.optim.SGD(model.parameters(), lr=0.1), RankCursor(rank)


def _phase(
    rank: int, world_size: int, tmp: str, phase: str, steps: int, extra: tuple[str, ...] = ()
) -> None:
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp}/store-{phase}", rank=rank, world_size=world_size
    )
    try:
        model, optimizer, cursor = _objects(rank)
        ckpt = sc.Checkpointer(
            sc.CheckpointConfig.load(None, [*CONFIG, *extra]), run=RUN, output_root=f"{tmp}/out"
        )
        ckpt.track(model=model, optimizer=optimizer, data=cursor)
        start = ckpt.resume()
        resumed_at = dict(cursor.state_dict())
        for _ in range(start.step, steps):
            model(torch.randn(2, 4)).sum().backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            optimizer.step()
            optimizer.zero_grad()
            cursor.position += 10 * (rank + 1)  # rank 1 reads twice as fast as rank 0
            ckpt.record(sc.Outcome.APPLIED)
            ckpt.step_end()
        ckpt.finalize()
        torch.save(
            {"start": start.step, "data": start.data, "resumed_at": resumed_at},
            f"{tmp}/{phase}-rank{rank}.pt",
        )
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _first(rank: int, world_size: int, tmp: str) -> None:
    _phase(rank, world_size, tmp, "first", 4)


def _first_dcp(rank: int, world_size: int, tmp: str) -> None:
    _phase(rank, world_size, tmp, "first", 4, tuple(DCP))


def _resumed(rank: int, world_size: int, tmp: str) -> None:
    _phase(rank, world_size, tmp, "resumed", 6)


def _unsafe_on_rank_one(rank: int, world_size: int, tmp: str) -> None:
    """Rank 1's cursor position becomes a NumPy scalar before the save of step 2."""
    import numpy as np

    dist.init_process_group(
        "gloo", init_method=f"file://{tmp}/store-unsafe", rank=rank, world_size=world_size
    )
    try:
        model, optimizer, cursor = _objects(rank)
        ckpt = sc.Checkpointer(
            sc.CheckpointConfig.load(None, CONFIG), run=RUN, output_root=f"{tmp}/out"
        )
        ckpt.track(model=model, optimizer=optimizer, data=cursor)
        ckpt.resume()
        if rank == 1:
            cursor.position = np.int64(7)  # type: ignore[assignment]
        outcome = "saved"
        for _ in range(2):
            ckpt.record(sc.Outcome.APPLIED)
            try:
                ckpt.step_end()
            except UnsafeStateError as exc:
                outcome = str(exc)
        torch.save({"outcome": outcome}, f"{tmp}/unsafe-rank{rank}.pt")
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _checkpoints(tmp: Path) -> Path:
    [attempt] = [p for p in (tmp / "out" / "p" / "g" / "dist-data").iterdir() if p.is_dir()]
    return attempt / "checkpoints"


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes (the lease files aside)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".statecraft-writer" not in p.name
    }


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An output root whose attempt a two-rank job saved at iterations 2 and 4."""
    tmp = tmp_path_factory.mktemp("two-rank")
    torch.multiprocessing.spawn(_first, args=(2, str(tmp)), nprocs=2, join=True)
    return tmp


@pytest.fixture(scope="module")
def two_rank_dcp_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """As :func:`two_rank_run` with ``checkpoint_format=dcp`` (the format that reshards)."""
    tmp = tmp_path_factory.mktemp("two-rank-dcp")
    torch.multiprocessing.spawn(_first_dcp, args=(2, str(tmp)), nprocs=2, join=True)
    return tmp


class TestPerRankDataState:
    def test_data_pt_holds_every_ranks_state(self, two_rank_run: Path) -> None:
        """data.pt is the per-rank payload: schema, world size, one entry per rank in order."""
        payload = torch.load(
            _checkpoints(two_rank_run) / "iter_000000004" / "data.pt", weights_only=True
        )
        assert payload == {
            "schema": "statecraft.data-state.v2",
            "world_size": 2,
            "ranks": [{"rank": 0, "position": 40}, {"rank": 1, "position": 80}],
            "source": plain_cursor_source(2),  # rank 0's source identity, stored with the cursor
        }

    def test_each_rank_restores_its_own_cursor(self, two_rank_run: Path, tmp_path: Path) -> None:
        """A two-rank resume gives rank 1 its own cursor (not rank 0's) and says restored."""
        import shutil

        shutil.copytree(two_rank_run / "out", tmp_path / "out")
        torch.multiprocessing.spawn(_resumed, args=(2, str(tmp_path)), nprocs=2, join=True)
        for rank in (0, 1):
            got = torch.load(tmp_path / f"resumed-rank{rank}.pt", weights_only=True)
            assert got["start"] == 4
            assert got["data"] == "restored"
            assert got["resumed_at"] == {"rank": rank, "position": 40 * (rank + 1)}, rank


class TestWorldSizeChange:
    def _resume_alone(self, out: Path, *overrides: str) -> tuple[sc.Checkpointer, RankCursor]:
        model, optimizer, cursor = _objects(0)
        ckpt = sc.Checkpointer(
            sc.CheckpointConfig.load(None, [*CONFIG, *DCP, *overrides]), run=RUN, output_root=out
        )
        ckpt.track(model=model, optimizer=optimizer, data=cursor)
        return ckpt, cursor

    def test_auto_warns_and_the_data_source_keeps_its_fresh_state(
        self, two_rank_dcp_run: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """cursor_resume=auto at world size 1 resumes a DCP checkpoint's model but restarts the
        data source, with a warning naming both world sizes, and reports topology_changed."""
        import shutil

        shutil.copytree(two_rank_dcp_run / "out", tmp_path / "out")
        ckpt, cursor = self._resume_alone(tmp_path / "out")
        with caplog.at_level(logging.WARNING, logger="statecraft"):
            result = ckpt.resume()
        assert result.step == 4
        assert result.data == "topology_changed"
        assert cursor.state_dict() == {"rank": 0, "position": 0}
        assert any(
            "saved by 2 ranks" in r.getMessage() and "this job has 1" in r.getMessage()
            for r in caplog.records
        ), [r.getMessage() for r in caplog.records]
        ckpt.close()

    def test_strict_refuses_before_anything_loads(
        self, two_rank_dcp_run: Path, tmp_path: Path
    ) -> None:
        """cursor_resume=strict at another world size refuses a DCP checkpoint, naming both
        sizes and the fix; no tracked object changed and nothing committed changed."""
        import shutil

        shutil.copytree(two_rank_dcp_run / "out", tmp_path / "out")
        before = snapshot(tmp_path / "out")
        ckpt, cursor = self._resume_alone(tmp_path / "out", "data.cursor_resume=strict")
        weight = ckpt.tracked.model.weight.detach().clone()
        with pytest.raises(ResumeError) as info:
            ckpt.resume()
        message = str(info.value)
        assert "data.pt holds the data state of 2 ranks" in message
        assert "this job runs 1" in message
        assert "data.cursor_resume=auto" in message
        assert "same number of ranks" in message
        assert cursor.state_dict() == {"rank": 0, "position": 0}
        assert torch.equal(ckpt.tracked.model.weight, weight)
        ckpt.close()
        after = snapshot(tmp_path / "out")
        assert {k: v for k, v in after.items() if k in before} == before

    def test_consolidated_at_another_world_size_is_refused(
        self, two_rank_run: Path, tmp_path: Path
    ) -> None:
        """A consolidated checkpoint saved by 2 ranks resumed by 1: WorldSizeChangedError naming
        both sizes and checkpoint_format=dcp; no tracked object changed, nothing committed
        changed."""
        import shutil

        shutil.copytree(two_rank_run / "out", tmp_path / "out")
        before = snapshot(tmp_path / "out")
        model, optimizer, cursor = _objects(0)
        ckpt = sc.Checkpointer(
            sc.CheckpointConfig.load(None, CONFIG), run=RUN, output_root=tmp_path / "out"
        )
        ckpt.track(model=model, optimizer=optimizer, data=cursor)
        weight = model.weight.detach().clone()
        with pytest.raises(WorldSizeChangedError) as info:
            ckpt.resume()
        assert (
            "saved at world size 2, resuming at 1; consolidated checkpoints resume only at "
            "the same world size; use checkpoint_format=dcp to reshard" in str(info.value)
        )
        assert (info.value.saved_world_size, info.value.world_size) == (2, 1)
        assert torch.equal(model.weight, weight)
        assert cursor.state_dict() == {"rank": 0, "position": 0}
        ckpt.close()
        after = snapshot(tmp_path / "out")
        assert {k: v for k, v in after.items() if k in before} == before


class TestUnsafeStateOnOneRank:
    def test_every_rank_refuses_and_nothing_is_written(self, tmp_path: Path) -> None:
        """A NumPy scalar in rank 1's data state refuses the save on both ranks (no hang),
        naming rank 1's key path; no iteration is written."""
        torch.multiprocessing.spawn(_unsafe_on_rank_one, args=(2, str(tmp_path)), nprocs=2)
        for rank in (0, 1):
            outcome = torch.load(tmp_path / f"unsafe-rank{rank}.pt", weights_only=True)["outcome"]
            assert outcome.startswith("cannot save the checkpoint of step 2: 1 value(s)"), rank
            assert (
                'data[rank 1]["position"]: numpy.int64 -- convert with int(x) (or x.item())'
                in outcome
            ), rank
        assert sorted(p.name for p in _checkpoints(tmp_path).iterdir()) == []
