"""``checkpoint_format=dcp`` under real gloo process groups on CPU (FSDP2 ``fully_shard``):

- 4 ranks train through the Checkpointer; rank 2 is SIGKILLed in the middle of its shard
  write of iteration 4: the job dies, ``latest`` still names iteration 2 and iteration 4 is
  never adopted; a rerun at 4 ranks resumes from 2 and ends bit-exact against an
  uninterrupted 4-rank run (same world size: RNG streams restored);
- the checkpoint saved at 4 ranks resumes at 2 and at 1: the gathered full model and
  optimizer state dicts equal the saving run's exactly; the RNG restore is skipped with an
  INFO line naming both world sizes.

The children report by files (a gloo process may abort at exit), judged here.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from dcp_ranks import assert_equal as _assert_equal
from dcp_ranks import break_shard_write, full_state
from dcp_ranks import checkpoints_dir as _checkpoints
from dcp_ranks import rank_report as _report

import statecraft as sc

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]

CONFIG = [
    "save_every=2",
    "save_async=false",
    "keep_optim_last=0",
    "checkpoint_format=dcp",
]
RUN = sc.RunIdentity("p", "g", "dcp-multirank")
STEPS = 4
KILLED = "iter_000000004"


def _worker(rank: int, world_size: int, tmp: str, out: str, phase: str, kill_rank: int) -> None:
    """One rank: build the FSDP2 model, resume, train to STEPS (or not, for a reshard
    phase), write what it saw to ``<tmp>/<phase>-rank<rank>.pt``."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    os.environ["TMPDIR"] = tmp
    logging.basicConfig(filename=f"{tmp}/{phase}-rank{rank}.log", level=logging.INFO, force=True)
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp}/store-{phase}", rank=rank, world_size=world_size
    )
    if rank == kill_rank:
        break_shard_write(KILLED)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        fully_shard(model, mesh=init_device_mesh("cpu", (world_size,)))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        ckpt = sc.Checkpointer(sc.CheckpointConfig.load(None, CONFIG), run=RUN, output_root=out)
        ckpt.track(model=model, optimizer=optimizer)
        start = ckpt.resume()
        if start.step == 0:
            torch.manual_seed(1000 + rank)  # distinct per-rank streams; a resume restores them
        train = not phase.startswith("reshard")
        for _ in range(start.step, STEPS if train else start.step):
            model(torch.randn(2, 8)).pow(2).sum().backward()  # FSDP2 reduce-scatters grads
            optimizer.step()
            optimizer.zero_grad()
            ckpt.record(sc.Outcome.APPLIED)
            ckpt.step_end()
        full = full_state(model, optimizer)
        report = {
            "start": start.step,
            "rng": start.rng,
            "passed_over": [p.name for p in start.passed_over],
            "next_draw": torch.rand(3),
        }
        if rank == 0:
            report["full"] = full
        ckpt.finalize() if train else ckpt.close()
        torch.save(report, f"{tmp}/{phase}-rank{rank}.pt")
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _spawn(tmp: Path, out: Path, phase: str, world_size: int, kill_rank: int = -1) -> None:
    torch.multiprocessing.spawn(
        _worker,
        args=(world_size, str(tmp), str(out), phase, kill_rank),
        nprocs=world_size,
        join=True,
    )


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted 4-rank run of STEPS steps (iterations 2 and 4 committed)."""
    tmp = tmp_path_factory.mktemp("straight")
    _spawn(tmp, tmp / "out", "straight", 4)
    return tmp


class TestSigkillMidShardWrite:
    def test_latest_unchanged_then_resume_is_bit_exact(
        self, straight: Path, tmp_path: Path
    ) -> None:
        """Rank 2 dies inside its iteration-4 shard write: the job fails, latest names
        iteration 2, iteration 4 has no manifest; the rerun passes over it, resumes from 2
        with every rank's RNG restored and ends equal to the uninterrupted run."""
        out = tmp_path / "out"
        with pytest.raises(torch.multiprocessing.ProcessExitedException) as died:
            _spawn(tmp_path, out, "killed", 4, kill_rank=2)
        assert died.value.error_index == 2
        assert died.value.signal_name == "SIGKILL"
        checkpoints = _checkpoints(out)
        assert (checkpoints / "latest_checkpoint.txt").read_text().strip() == "iter_000000002"
        assert (checkpoints / "iter_000000002" / ".posttrain-manifest.json").is_file()
        assert not (checkpoints / KILLED / ".posttrain-manifest.json").exists()

        _spawn(tmp_path, out, "rerun", 4)
        for rank in range(4):
            got, want = _report(tmp_path, "rerun", rank), _report(straight, "straight", rank)
            assert got["start"] == 2, rank
            assert got["rng"] == "restored", rank
            assert torch.equal(got["next_draw"], want["next_draw"]), rank
        _assert_equal(
            _report(tmp_path, "rerun", 0)["full"], _report(straight, "straight", 0)["full"]
        )
        assert (checkpoints / "latest_checkpoint.txt").read_text().strip() == KILLED
        assert (checkpoints / KILLED / ".posttrain-manifest.json").is_file()


class TestReshard:
    @pytest.mark.parametrize("world_size", [2, 1])
    def test_saved_at_4_resumes_with_equal_full_state(
        self, straight: Path, tmp_path: Path, world_size: int
    ) -> None:
        """Iteration 4 saved by 4 FSDP2 ranks resumed at ``world_size``: the gathered full model
        and optimizer state dicts equal the saving run's exactly; each rank skipped its RNG
        restore with an INFO line naming both world sizes."""
        out = tmp_path / "out"
        shutil.copytree(straight / "out", out)
        phase = f"reshard{world_size}"
        _spawn(tmp_path, out, phase, world_size)
        got = _report(tmp_path, phase, 0)
        assert got["start"] == STEPS
        assert got["rng"] == "topology_changed"
        _assert_equal(got["full"], _report(straight, "straight", 0)["full"])
        for rank in range(world_size):
            lines = (tmp_path / f"{phase}-rank{rank}.log").read_text().splitlines()
            assert any(
                line.startswith("INFO:statecraft.")
                and "saved with world_size=4" in line
                and f"now world_size={world_size}" in line
                for line in lines
            ), lines
