"""``Checkpointer(retention=plan)`` replaces the ``keep_*_last`` knobs: given together, the
conflict is refused naming both, never a silent override."""

from __future__ import annotations

from pathlib import Path

import pytest

import statecraft as sc
from statecraft.errors import ConfigError

PLAN = sc.RetentionPlan(model=sc.LatestN(3))


@pytest.mark.parametrize(
    ("knobs", "named"),
    [
        (["keep_model_last=2"], ["keep_model_last"]),
        (["keep_optim_last=0"], ["keep_optim_last"]),
        (["keep_optim_last=1"], ["keep_optim_last"]),
        (["keep_optim_last=2", "keep_model_last=5"], ["keep_optim_last", "keep_model_last"]),
    ],
)
def test_a_knob_beside_a_plan_is_refused_naming_both(
    tmp_path: Path, knobs: list[str], named: list[str]
) -> None:
    config = sc.CheckpointConfig.load(None, knobs)
    with pytest.raises(ConfigError) as info:
        sc.Checkpointer(config, run="r", output_root=tmp_path, retention=PLAN)
    message = str(info.value)
    assert "retention=" in message
    assert "model: latest 3" in message  # the plan, described
    assert [issue.path for issue in info.value.issues] == named
    assert not any(tmp_path.iterdir())  # refused before anything was written


def test_a_plan_alone_or_the_knobs_alone_are_accepted(tmp_path: Path) -> None:
    alone = sc.Checkpointer(sc.CheckpointConfig(), run="r", output_root=tmp_path, retention=PLAN)
    assert alone.retention is PLAN
    knobs = sc.CheckpointConfig.load(None, ["keep_model_last=2"])
    assert sc.Checkpointer(knobs, run="r", output_root=tmp_path).retention.model == sc.LatestN(2)
