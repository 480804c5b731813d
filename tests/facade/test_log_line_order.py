"""The lines a run prints come in the order things happened (issue 29, item 10): the run
attempt before the resume decision, each retention pass after the save it follows, a lease
taken over once, "1 rank" in the singular."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

import statecraft as sc
from statecraft.checkpoint.state.data_state import DataState


def _launch(out: Path, steps: int) -> None:
    config = sc.CheckpointConfig.load(
        None, ["save_every=2", "save_async=false", "keep_model_last=1", "keep_optim_last=1"]
    )
    ckpt = sc.Checkpointer(config, run=sc.RunIdentity("p", "g", "order"), output_root=out)
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ckpt.track(model=model, optimizer=optimizer)
    start = ckpt.resume()
    for _ in range(start.step, steps):
        model(torch.ones(1, 2)).sum().backward()
        optimizer.step()
        ckpt.record(sc.Outcome.APPLIED)
        ckpt.step_end()
    ckpt.finalize()
    ckpt.close()


def _first(lines: list[str], prefix: str) -> int:
    found = [i for i, line in enumerate(lines) if line.startswith(prefix)]
    assert found, f"no line starting {prefix!r} in {lines}"
    return found[0]


def test_attempt_then_resume_and_each_retention_after_its_save(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """First launch: saves 2, 4, 6, each retention pass right after the save it follows.
    Relaunch: "run attempt" comes before "resumed from", which comes before the next save."""
    with caplog.at_level(logging.INFO, logger="statecraft"):
        _launch(tmp_path, 6)
    first = [r.getMessage() for r in caplog.records]
    saves = [i for i, line in enumerate(first) if line.startswith("saved iter ")]
    passes = [i for i, line in enumerate(first) if line.startswith("retention after iter_")]
    assert len(saves) == 3
    assert len(passes) == 2  # after 4 and 6: at 2 nothing is beyond the limit
    for index in passes:
        previous_save = max(i for i in saves if i < index)  # the save this pass follows
        saved_iter = int(first[previous_save].split()[2].rstrip(":"))
        assert first[index].startswith(f"retention after iter_{saved_iter:09d} ")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="statecraft"):
        _launch(tmp_path, 8)
    second = [r.getMessage() for r in caplog.records]
    attempt = _first(second, "run attempt ")
    resumed = _first(second, "resumed from ")
    saved = _first(second, "saved iter 8")
    assert attempt < resumed < saved
    assert len([line for line in second if line.startswith("run attempt ")]) == 1


def test_one_rank_is_singular() -> None:
    """The saver of a one-rank data state is "1 rank", never "(1 ranks)"."""
    assert DataState(world_size=1, ranks=({},)).describe_saver() == "1 rank"
    assert DataState(world_size=2, ranks=({}, {})).describe_saver() == "2 ranks"
