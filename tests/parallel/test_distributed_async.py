"""Asynchronous saves and retention under a real two-rank gloo process group on CPU: rank 0
decides async vs sync and writes in the background, every rank returns the same kind of
result, the joins are collective, and retention runs on rank 0 after each save is durable."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import statecraft as sc

pytestmark = pytest.mark.slow


def _run(rank: int, world_size: int, tmp: str) -> None:
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp}/store", rank=rank, world_size=world_size
    )
    try:
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        ckpt = sc.Checkpointer(
            sc.CheckpointConfig.load(None, ["save_every=1", "keep_model_last=2"]),
            run=sc.RunIdentity("p", "g", "dist"),
            output_root=f"{tmp}/out",
        )
        ckpt.track(model=model, optimizer=optimizer)
        ckpt.resume()
        kinds = []
        for _ in range(4):
            model(torch.randn(2, 4)).sum().backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            optimizer.step()
            optimizer.zero_grad()
            ckpt.record(sc.Outcome.APPLIED)
            end = ckpt.step_end()
            kinds.append(type(end.saved).__name__)
        last = end.saved
        ckpt.finalize()
        torch.save(
            {
                "run_dir": str(ckpt.attempt.run_dir),
                "kinds": kinds,
                "last_done": bool(last.done and last.durable.is_set()),
                "saves": [s.iteration for s in ckpt.saves],
            },
            f"{tmp}/rank{rank}.pt",
        )
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_two_ranks_save_asynchronously_with_retention(tmp_path: Path) -> None:
    """Both ranks get a PendingSave from every save, done and durable after finalize();
    rank 0 holds the reports; on disk keep_model_last=2 left the newest two iterations, the
    older of them weights-only (keep_optim_last=null -> 1)."""
    torch.multiprocessing.spawn(_run, args=(2, str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    assert ranks[0]["run_dir"] == ranks[1]["run_dir"]
    for rank in ranks:
        assert rank["kinds"] == ["PendingSave"] * 4
        assert rank["last_done"]
    assert ranks[0]["saves"] == [1, 2, 3, 4]
    assert ranks[1]["saves"] == []
    checkpoints = Path(ranks[0]["run_dir"]) / "checkpoints"
    assert sorted(p.name for p in checkpoints.glob("iter_*")) == [
        "iter_000000003",
        "iter_000000004",
    ]
    assert (checkpoints / "iter_000000004" / "optim.pt").is_file()
    assert not (checkpoints / "iter_000000003" / "optim.pt").exists()
