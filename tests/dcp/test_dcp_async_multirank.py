"""Asynchronous ``checkpoint_format=dcp`` saves (``save_async=true``) under a real 2-rank gloo
group on CPU (FSDP2 ``fully_shard``):

- an uninterrupted run commits iterations 2 and 4 asynchronously (every rank's save returns a
  ``PendingSave``; the reports say ``asynchronous``) and ends equal to the synchronous run;
- rank 1 is SIGKILLed inside its background shard write of iteration 4: ``latest`` still
  names iteration 2, iteration 4 has no manifest; the rerun resumes from 2 and ends bit-exact;
- rank 1's background shard write of iteration 4 fails (ENOSPC): ``finalize()`` raises on
  both ranks, ``latest`` names iteration 2.

The children report by files (a gloo process may abort at exit), judged here.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from dcp_ranks import assert_equal as _assert_equal
from dcp_ranks import break_shard_write, full_state
from dcp_ranks import checkpoints_dir as _checkpoints
from dcp_ranks import rank_report as _report

import statecraft as sc

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]

RUN = sc.RunIdentity("p", "g", "dcp-async")
STEPS = 4
BROKEN = "iter_000000004"
WORLD = 2


def _config(save_async: bool) -> list[str]:
    return [
        "save_every=2",
        f"save_async={'true' if save_async else 'false'}",
        f"save_async_dcp={'true' if save_async else 'false'}",
        "keep_optim_last=0",
        "checkpoint_format=dcp",
    ]


def _worker(rank: int, tmp: str, out: str, phase: str, broken: str, save_async: bool) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    os.environ["TMPDIR"] = tmp
    logging.basicConfig(filename=f"{tmp}/{phase}-rank{rank}.log", level=logging.INFO, force=True)
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp}/store-{phase}", rank=rank, world_size=WORLD
    )
    if rank == 1 and broken:
        break_shard_write(BROKEN, broken)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        fully_shard(model, mesh=init_device_mesh("cpu", (WORLD,)))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        config = sc.CheckpointConfig.load(None, _config(save_async))
        ckpt = sc.Checkpointer(config, run=RUN, output_root=out)
        ckpt.track(model=model, optimizer=optimizer)
        start = ckpt.resume()
        if start.step == 0:
            torch.manual_seed(1000 + rank)
        kinds = []
        for _ in range(start.step, STEPS):
            model(torch.randn(2, 8)).pow(2).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
            ckpt.record(sc.Outcome.APPLIED)
            end = ckpt.step_end()
            if end.saved is not None:
                kinds.append(type(end.saved).__name__)
        report: dict[str, Any] = {"start": start.step, "rng": start.rng, "kinds": kinds}
        report["next_draw"] = torch.rand(3)
        full = full_state(model, optimizer)
        try:
            ckpt.finalize()
        except Exception as exc:  # judged by the test
            report["error"] = f"{type(exc).__name__}: {exc}"
            ckpt.close()
        if rank == 0:
            report["full"] = full
            report["asynchronous"] = [s.asynchronous for s in ckpt.saves]
        torch.save(report, f"{tmp}/{phase}-rank{rank}.pt")
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _spawn(tmp: Path, out: Path, phase: str, broken: str = "", save_async: bool = True) -> None:
    torch.multiprocessing.spawn(
        _worker, args=(str(tmp), str(out), phase, broken, save_async), nprocs=WORLD, join=True
    )


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted asynchronous 2-rank run of STEPS steps."""
    tmp = tmp_path_factory.mktemp("straight")
    _spawn(tmp, tmp / "out", "straight")
    return tmp


def test_async_saves_commit_and_match_the_synchronous_run(straight: Path, tmp_path: Path) -> None:
    """Both saves went to the background on both ranks and committed; the final state equals
    a synchronous run's and its resume starts at STEPS."""
    for rank in range(WORLD):
        got = _report(straight, "straight", rank)
        assert got["kinds"] == ["PendingSave", "PendingSave"], rank
        assert "error" not in got, got.get("error")
    assert _report(straight, "straight", 0)["asynchronous"] == [True, True]
    checkpoints = _checkpoints(straight / "out")
    assert (checkpoints / "latest_checkpoint.txt").read_text().strip() == "iter_000000004"
    for name in ("iter_000000002", "iter_000000004"):
        assert (checkpoints / name / ".posttrain-manifest.json").is_file()
    _spawn(tmp_path, tmp_path / "out", "sync", save_async=False)
    _assert_equal(_report(tmp_path, "sync", 0)["full"], _report(straight, "straight", 0)["full"])


def test_sigkill_during_background_write_keeps_latest_then_resumes_bit_exact(
    straight: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    with pytest.raises(torch.multiprocessing.ProcessExitedException) as died:
        _spawn(tmp_path, out, "killed", broken="kill")
    assert died.value.error_index == 1
    assert died.value.signal_name == "SIGKILL"
    checkpoints = _checkpoints(out)
    assert (checkpoints / "latest_checkpoint.txt").read_text().strip() == "iter_000000002"
    assert (checkpoints / "iter_000000002" / ".posttrain-manifest.json").is_file()
    assert not (checkpoints / BROKEN / ".posttrain-manifest.json").exists()

    _spawn(tmp_path, out, "rerun")
    for rank in range(WORLD):
        got, want = _report(tmp_path, "rerun", rank), _report(straight, "straight", rank)
        assert got["start"] == 2, rank
        assert got["rng"] == "restored", rank
        assert torch.equal(got["next_draw"], want["next_draw"]), rank
    _assert_equal(_report(tmp_path, "rerun", 0)["full"], _report(straight, "straight", 0)["full"])
    assert (checkpoints / "latest_checkpoint.txt").read_text().strip() == BROKEN


def test_a_failed_background_write_on_one_rank_fails_finalize_on_every_rank(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    _spawn(tmp_path, out, "failed", broken="fail")
    for rank in range(WORLD):
        error = _report(tmp_path, "failed", rank).get("error", "")
        assert "No space left on device (injected)" in error, (rank, error)
    checkpoints = _checkpoints(out)
    assert (checkpoints / "latest_checkpoint.txt").read_text().strip() == "iter_000000002"
    assert not (checkpoints / BROKEN / ".posttrain-manifest.json").exists()
