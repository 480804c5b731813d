"""Checkpointing under a real two-rank gloo process group on CPU: rank 0 resolves the attempt
and writes, every rank contributes its RNG streams, every rank resumes its own exactly."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import statecraft as sc

pytestmark = pytest.mark.slow

CONFIG = ["save_every=2", "save_async=false", "keep_optim_last=0"]


def _phase(rank: int, world_size: int, tmp: str, phase: str) -> None:
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp}/store-{phase}", rank=rank, world_size=world_size
    )
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1)
        )
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        ckpt = sc.Checkpointer(
            sc.CheckpointConfig.load(None, CONFIG),
            run=sc.RunIdentity("p", "g", "dist"),
            output_root=f"{tmp}/out",
        )
        ckpt.track(model=model, optimizer=optimizer)
        start = ckpt.resume()
        if phase == "first":
            torch.manual_seed(1000 + rank)  # distinct streams per rank; a resume restores them
        for _ in range(start.step, 4):
            model(torch.randn(2, 4)).sum().backward()  # dropout draws this rank's stream
            for p in model.parameters():  # stand-in for DDP's gradient all-reduce
                dist.all_reduce(p.grad)
            optimizer.step()
            optimizer.zero_grad()
            ckpt.record(sc.Outcome.APPLIED)
            ckpt.step_end()
        ckpt.finalize()
        torch.save(
            {
                "run_dir": str(ckpt.attempt.run_dir),
                "start": start.step,
                "source": start.source,
                "passed_over": [[p.name, p.reason] for p in start.passed_over],
                "rng": start.rng,
                "next_draw": torch.rand(3),
                "weight": model[0].weight.detach().clone(),
            },
            f"{tmp}/{phase}-rank{rank}.pt",
        )
        dist.barrier()  # no rank tears the group down while another is still receiving
    finally:
        dist.destroy_process_group()


def _first_run(rank: int, world_size: int, tmp: str) -> None:
    _phase(rank, world_size, tmp, "first")


def _resumed_run(rank: int, world_size: int, tmp: str) -> None:
    _phase(rank, world_size, tmp, "resumed")


class TestTwoGlooRanks:
    def test_rank_zero_resolves_writes_and_every_rank_resumes_its_own_rng(
        self, tmp_path: Path
    ) -> None:
        """Both ranks agree on the attempt dir; one set of files is written; after a resume in
        a new process group that passes over a partial newest iteration on both ranks, each
        rank's RNG continues exactly its own saved stream."""
        torch.multiprocessing.spawn(_first_run, args=(2, str(tmp_path)), nprocs=2, join=True)
        first = [torch.load(tmp_path / f"first-rank{r}.pt", weights_only=True) for r in (0, 1)]
        assert first[0]["run_dir"] == first[1]["run_dir"]
        checkpoints = Path(first[0]["run_dir"]) / "checkpoints"
        assert sorted(p.name for p in checkpoints.iterdir()) == [
            "iter_000000002",
            "iter_000000004",
            "latest_checkpoint.txt",
        ]
        trainer = torch.load(checkpoints / "iter_000000004" / "trainer.pt", weights_only=True)
        assert trainer["rng"]["world_size"] == 2
        assert not torch.equal(
            trainer["rng"]["ranks"][0]["torch"], trainer["rng"]["ranks"][1]["torch"]
        )

        # Make the newest checkpoint partial (no manifest) so the resumed run passes over it
        # -- rank 0's verification error must reach rank 1 -- and replays steps 3-4 from iter 2.
        (checkpoints / "iter_000000004" / ".posttrain-manifest.json").unlink()
        (checkpoints / "latest_checkpoint.txt").write_text("iter_000000002\n")
        torch.multiprocessing.spawn(_resumed_run, args=(2, str(tmp_path)), nprocs=2, join=True)
        resumed = [torch.load(tmp_path / f"resumed-rank{r}.pt", weights_only=True) for r in (0, 1)]
        for rank in (0, 1):
            assert resumed[rank]["run_dir"] == first[rank]["run_dir"]
            assert resumed[rank]["start"] == 2
            [(name, reason)] = resumed[rank]["passed_over"]
            assert name == "iter_000000004"
            assert "has no manifest (an interrupted save)" in reason, (rank, reason)
            assert resumed[rank]["rng"] == "restored"
            assert torch.equal(resumed[rank]["next_draw"], first[rank]["next_draw"]), rank
            assert torch.equal(resumed[rank]["weight"], first[rank]["weight"]), rank
        assert not torch.equal(resumed[0]["next_draw"], resumed[1]["next_draw"])
