"""A ``torchdata`` ``StatefulDataLoader`` per rank under a real two-rank gloo group on CPU
(``DistributedSampler`` shards, shuffled, two workers each): every rank resumes at its own
exact next batch under ``data.cursor_resume=strict``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

import statecraft as sc

pytest.importorskip("torchdata.stateful_dataloader")

pytestmark = pytest.mark.slow

CONFIG = ["save_every=1", "save_async=false", "data.cursor_resume=strict"]
STEPS = 3  # of 8 batches an epoch per rank


def _loader(rank: int) -> Any:
    from torchdata.stateful_dataloader import StatefulDataLoader

    items = list(range(64))
    sampler = torch.utils.data.DistributedSampler(items, num_replicas=2, rank=rank, seed=5)
    return StatefulDataLoader(items, batch_size=4, sampler=sampler, num_workers=2)


def _phase(rank: int, world_size: int, tmp: str, phase: str) -> None:
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp}/store-{phase}", rank=rank, world_size=world_size
    )
    try:
        torch.manual_seed(0)
        model = torch.nn.Linear(1, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        loader = _loader(rank)
        ckpt = sc.Checkpointer(
            sc.CheckpointConfig.load(None, CONFIG),
            run=sc.RunIdentity("p", "g", "ranks"),
            output_root=f"{tmp}/out",
        )
        ckpt.track(model=model, optimizer=optimizer, data=loader)
        start = ckpt.resume()
        batches = iter(loader)
        for _ in range(start.step, STEPS):
            next(batches)
            ckpt.record(sc.Outcome.APPLIED)
            ckpt.step_end()
        rest = [b.tolist() for b in batches]  # the rest of this rank's epoch
        ckpt.close()
        torch.save(
            {"start": start.step, "data": start.data, "rest": rest}, f"{tmp}/{phase}-{rank}.pt"
        )
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _first(rank: int, world_size: int, tmp: str) -> None:
    _phase(rank, world_size, tmp, "first")


def _resumed(rank: int, world_size: int, tmp: str) -> None:
    _phase(rank, world_size, tmp, "resumed")


def test_each_rank_resumes_at_its_own_next_batch(tmp_path: Path) -> None:
    torch.multiprocessing.spawn(_first, args=(2, str(tmp_path)), nprocs=2, join=True)
    torch.multiprocessing.spawn(_resumed, args=(2, str(tmp_path)), nprocs=2, join=True)
    rests = []
    for rank in range(2):
        first = torch.load(tmp_path / f"first-{rank}.pt", weights_only=True)
        resumed = torch.load(tmp_path / f"resumed-{rank}.pt", weights_only=True)
        assert (first["start"], first["data"]) == (0, "fresh")
        assert (resumed["start"], resumed["data"]) == (STEPS, "restored")
        assert len(first["rest"]) == 8 - STEPS
        assert resumed["rest"] == first["rest"], rank
        rests.append({i for batch in first["rest"] for i in batch})
    assert not rests[0] & rests[1]  # two shards: the ranks really read different batches
