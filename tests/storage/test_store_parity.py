"""The production Checkpointer runs the same machine bindings over the real filesystem and over
the simulated one the crash harness uses, and both leave byte-identical trees."""

from __future__ import annotations

import os
from pathlib import Path

import torch

import statecraft as sc
from statecraft.storage import OsFilesystem, SimFilesystem

RUN_TS = "20260102030405"


def _train_and_save(out: Path, filesystem) -> sc.Checkpointer:
    torch.manual_seed(7)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3)
    config = sc.CheckpointConfig.load(
        None, ["save_every=2", "save_async=false", "keep_optim_last=0", f"run_ts={RUN_TS}"]
    )
    ckpt = sc.Checkpointer(
        config, run=sc.RunIdentity("p", "g", "n"), output_root=out, filesystem=filesystem
    )
    ckpt.track(model=model, optimizer=optimizer, scheduler=scheduler)
    start = ckpt.resume()
    for _ in range(start.step, 5):
        model(torch.randn(4, 8)).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
        ckpt.record(sc.Outcome.APPLIED)
        ckpt.step_end()
    ckpt.finalize()
    return ckpt


def _real_tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


class TestStoreParity:
    def test_os_and_simulated_filesystems_write_identical_trees(self, tmp_path: Path) -> None:
        """Saving the same training run through OsFilesystem and SimFilesystem produces the
        same files with the same bytes, so the harness crashes the code production runs."""
        real = _train_and_save(tmp_path / "real", OsFilesystem())
        sim_fs = SimFilesystem()
        sim = _train_and_save(tmp_path / "sim", sim_fs)
        real_root = Path(real.store.root)
        sim_root = sim.store.root
        real_tree = _real_tree(real_root)
        sim_tree = sim_fs.tree(sim_root)
        assert sorted(real_tree) == sorted(sim_tree)
        assert sorted(real_tree) == sorted(
            [
                f"iter_00000000{i}/{f}"
                for i in (2, 4, 5)
                for f in (".posttrain-manifest.json", "model.pt", "optim.pt", "trainer.pt")
            ]
            + ["latest_checkpoint.txt"]
        )
        for name in real_tree:
            assert real_tree[name] == sim_tree[name], name
        assert [r.iteration for r in real.saves] == [r.iteration for r in sim.saves] == [2, 4, 5]
        assert not any(".tmp-" in n for n in os.listdir(real_root))
