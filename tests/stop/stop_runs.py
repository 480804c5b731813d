"""Helpers shared by the stop tests that train through the facade in this process
(``test_emergency_facade.py``, ``test_stop_moments.py``): the attempt's files, one training
step, a run to a step or a stop, and a bit-exact comparison of two runs' states."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from checkpoint_runs import RUN

import statecraft as sc
from statecraft.checkpoint.stop.records import DONE_FILE, DONE_SCHEMA


def attempt_dir(out: Path) -> Path:
    return next(p for p in RUN.job_dir(out).iterdir() if p.is_dir())


def done(out: Path) -> dict[str, Any]:
    """The attempt's DONE.json, parsed (a half-written one fails here)."""
    record: dict[str, Any] = json.loads((attempt_dir(out) / DONE_FILE).read_text())
    assert record["schema"] == DONE_SCHEMA
    return record


def latest(out: Path) -> str:
    return (attempt_dir(out) / "checkpoints" / "latest_checkpoint.txt").read_text().strip()


def step(ckpt: sc.Checkpointer, objects: Any) -> Any:
    objects.step()
    ckpt.record(sc.Outcome.APPLIED)
    return ckpt.step_end()


def run_to(ckpt: sc.Checkpointer, objects: Any, last: int) -> Any:
    """Train until step ``last`` or a stop; the last ``StepEnd``."""
    end = None
    while ckpt.step < last:
        end = step(ckpt, objects)
        if end:
            break
    return end


def state_of(objects: Any) -> dict[str, Any]:
    return {
        "model": {k: v.clone() for k, v in objects.model.state_dict().items()},
        "optim": objects.optimizer.state_dict(),
        "cursor": objects.cursor.position,
    }


def assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    """The two states are bit-identical: data cursor, every weight, every optimizer slot."""
    assert a["cursor"] == b["cursor"]
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key
    assert a["optim"]["state"].keys() == b["optim"]["state"].keys()
    for index, entry in a["optim"]["state"].items():
        for key, value in entry.items():
            got = b["optim"]["state"][index][key]
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(got)), (index, key)
