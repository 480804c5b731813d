"""The default ``keep_optim_last=null`` (-> 1) removes the optimizer state of every checkpoint
but the newest: the first retention pass of a run says so, once, with the knob to change it;
a run that set the knob (or a plan) hears nothing."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

import statecraft as sc
from statecraft.checkpoint.retention.rules import DEFAULT_OPTIMIZER_NOTICE


def _run(out: Path, *knobs: str, steps: int = 4, **kwargs: object) -> list[Path]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    config = sc.CheckpointConfig.load(None, ["save_every=1", *knobs])
    ckpt = sc.Checkpointer(config, run="notice", output_root=out, **kwargs)  # type: ignore[arg-type]
    ckpt.track(model=model, optimizer=optimizer)
    ckpt.resume()
    for _ in range(steps):
        model(torch.randn(2, 4)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        ckpt.record(sc.Outcome.APPLIED)
        ckpt.step_end()
    ckpt.finalize()
    ckpt.close()
    return sorted(out.rglob("iter_*/optim.pt"))


def _notices(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "keep_optim_last" in r.getMessage()]


@pytest.mark.parametrize("save_async", ["true", "false"])
def test_the_default_is_said_once_with_the_knob(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, save_async: str
) -> None:
    caplog.set_level(logging.INFO, logger="statecraft")
    kept = _run(tmp_path, f"save_async={save_async}")
    assert [p.parent.name for p in kept] == ["iter_000000004"]  # the default, unchanged
    assert _notices(caplog) == [DEFAULT_OPTIMIZER_NOTICE]
    assert "keep_optim_last=0" in DEFAULT_OPTIMIZER_NOTICE
    assert "keep_optim_last=null" in DEFAULT_OPTIMIZER_NOTICE


def test_a_set_knob_or_a_plan_is_not_announced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="statecraft")
    assert len(_run(tmp_path / "knob", "keep_optim_last=1")) == 1
    assert len(_run(tmp_path / "plan", retention=sc.RetentionPlan(optimizer=sc.LatestN(2)))) == 2
    assert _notices(caplog) == []


def test_the_plan_of_the_default_knobs_carries_the_notice() -> None:
    assert sc.RetentionPlan.from_config(sc.CheckpointConfig()).notice == DEFAULT_OPTIMIZER_NOTICE
    chosen = sc.CheckpointConfig.load(None, ["keep_optim_last=3"])
    assert sc.RetentionPlan.from_config(chosen).notice == ""
