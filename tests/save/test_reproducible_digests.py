"""Reproducible bytes: a checkpoint is comparable by digest. An interrupted run (stopped after
step 5, restarted in a "new process" whose ambient RNG streams differ) and an uninterrupted run
commit iterations 6 and 8 with the same digest for every component (model.pt, optim.pt,
trainer.pt, data.pt)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy
from checkpoint_runs import RUN, open_checkpointer, train

from statecraft.checkpoint.kernel.layout import MANIFEST_NAME, iter_dirname


def run(out: Path, segments: list[tuple[int, int]]) -> Path:
    """Train to each ``(end step, ambient seed)`` in turn, one Checkpointer per segment (a
    process restart between segments): the Python and NumPy streams start from ``seed``, as
    a fresh process's would from its own entropy; resume restores the saved ones."""
    for end, seed in segments:
        random.seed(seed)
        numpy.random.seed(seed)
        ckpt, objects = open_checkpointer(out)
        result = ckpt.resume()
        train(ckpt, objects, end - (result.step if result.resumed else 0))
        ckpt.close()
    (attempt,) = [p for p in RUN.job_dir(out).iterdir() if p.is_dir()]
    return attempt / "checkpoints"


def recorded(checkpoints: Path, iteration: int) -> dict[str, object]:
    """The manifest's file records (size and digest) of ``iteration``."""
    manifest = json.loads((checkpoints / iter_dirname(iteration) / MANIFEST_NAME).read_bytes())
    return manifest["files"]


def test_interrupted_and_uninterrupted_runs_commit_the_same_digests(tmp_path: Path) -> None:
    """Every component of iterations 6 and 8 has the same digest (and bytes) in both runs."""
    whole = run(tmp_path / "whole", [(8, 1)])
    interrupted = run(tmp_path / "interrupted", [(5, 1), (8, 2)])
    for iteration in (6, 8):
        files = recorded(whole, iteration)
        assert sorted(files) == ["data.pt", "model.pt", "optim.pt", "trainer.pt"]
        assert recorded(interrupted, iteration) == files, iteration
        for name in files:
            a = (whole / iter_dirname(iteration) / name).read_bytes()
            b = (interrupted / iter_dirname(iteration) / name).read_bytes()
            assert a == b, (iteration, name)
