"""``checkpoint_format=dcp`` through the Checkpointer at two gloo ranks (plain replicated
model): each rank's items land in its own shard file (no gather to rank 0), rank 0 writes the
control files and the commit, and a resume at two ranks continues bit-exact."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import statecraft as sc

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]

CONFIG = ["save_every=2", "save_async=false", "keep_optim_last=0", "checkpoint_format=dcp"]


def _phase(rank: int, world_size: int, tmp: str, phase: str, steps: int) -> None:
    os.environ["TMPDIR"] = tmp
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp}/store-{phase}", rank=rank, world_size=world_size
    )
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        ckpt = sc.Checkpointer(
            sc.CheckpointConfig.load(None, CONFIG),
            run=sc.RunIdentity("p", "g", f"dcp-{phase.split('-')[0]}"),
            output_root=f"{tmp}/out",
        )
        ckpt.track(model=model, optimizer=optimizer)
        start = ckpt.resume()
        torch.manual_seed(100 + start.step)  # the same data on both runs from here on
        for _ in range(start.step, steps):
            model(torch.randn(2, 4)).sum().backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            optimizer.step()
            optimizer.zero_grad()
            ckpt.record(sc.Outcome.APPLIED)
            ckpt.step_end()
            torch.manual_seed(100 + ckpt.step)
        ckpt.finalize()
        torch.save(
            {
                "run_dir": str(ckpt.attempt.run_dir),
                "start": start.step,
                "model": {k: v.detach().clone() for k, v in model.state_dict().items()},
                "exp_avg": [optimizer.state[p]["exp_avg"].clone() for p in model.parameters()],
            },
            f"{tmp}/{phase}-rank{rank}.pt",
        )
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _run(rank: int, world_size: int, tmp: str, phase: str, steps: int) -> None:
    _phase(rank, world_size, tmp, phase, steps)


def _spawn(tmp: Path, phase: str, steps: int) -> list[dict]:
    torch.multiprocessing.spawn(_run, args=(2, str(tmp), phase, steps), nprocs=2, join=True)
    return [torch.load(tmp / f"{phase}-rank{r}.pt", weights_only=True) for r in (0, 1)]


def test_two_ranks_save_their_shards_and_resume_exactly(tmp_path: Path) -> None:
    straight = _spawn(tmp_path, "straight", 6)
    first = _spawn(tmp_path, "split-first", 4)
    assert first[0]["run_dir"] == first[1]["run_dir"]
    it = Path(first[0]["run_dir"]) / "checkpoints" / "iter_000000004"
    manifest = json.loads((it / ".posttrain-manifest.json").read_text())
    shards = sorted(n for n in manifest["files"] if n.endswith(".distcp"))
    # DCP's planner spreads the replicated items over both ranks: each writes its own file
    assert shards == [
        "model/__0_0.distcp",
        "model/__1_0.distcp",
        "optim/__0_0.distcp",
        "optim/__1_0.distcp",
    ]
    for name, entry in manifest["files"].items():
        assert (it / name).stat().st_size == entry["size"], name
    resumed = _spawn(tmp_path, "split-resumed", 6)
    assert [r["start"] for r in resumed] == [4, 4]
    for rank in (0, 1):
        for key, value in straight[rank]["model"].items():
            assert torch.equal(value, resumed[rank]["model"][key]), (rank, key)
        for a, b in zip(straight[rank]["exp_avg"], resumed[rank]["exp_avg"], strict=True):
            assert torch.equal(a, b)
    # the two-rank checkpoint of step 6 resumes in one process (DCP reads both ranks' shards)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ckpt = sc.Checkpointer(
        sc.CheckpointConfig.load(None, CONFIG),
        run=sc.RunIdentity("p", "g", "dcp-split"),
        output_root=tmp_path / "out",
    )
    ckpt.track(model=model, optimizer=optimizer)
    start = ckpt.resume()
    assert start.step == 6
    assert start.rng == "topology_changed"
    for key, value in resumed[0]["model"].items():
        assert torch.equal(value, model.state_dict()[key]), key
    for a, p in zip(resumed[0]["exp_avg"], model.parameters(), strict=True):
        assert torch.equal(a, optimizer.state[p]["exp_avg"])
