"""Save triggers beyond ``save_every``: a wall-clock interval, a per-epoch trigger and a
``should_save(step)`` hook, each validated when built, each composing with ``save_every`` and
with the emergency path, and decided once, on rank 0, for a real two-rank gloo group."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import statecraft as sc
from statecraft.errors import ConfigError, TrackingError

RUN = sc.RunIdentity("proj", "group", "triggers")


class Loop:
    """A real model and optimizer under a synchronous ``Checkpointer``."""

    def __init__(self, out: Path, *knobs: str, **kwargs: Any) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Linear(4, 3)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        config = sc.CheckpointConfig.load(None, ["save_async=false", "keep_optim_last=0", *knobs])
        self.ckpt = sc.Checkpointer(config, run=RUN, output_root=out, **kwargs)
        self.ckpt.track(model=self.model, optimizer=self.optimizer)
        self.ckpt.resume()
        self.out = out

    def step(self, **step_end: Any) -> sc.StepEnd:
        self.model(torch.randn(2, 4)).sum().backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        self.ckpt.record(sc.Outcome.APPLIED)
        return self.ckpt.step_end(**step_end)

    def saved(self) -> list[int]:
        return sorted(sc.checkpoints(self.out).steps)


class TestValidatedWhenBuilt:
    @pytest.mark.parametrize("seconds", [0, -5, math.nan, math.inf, "60", True, None])
    def test_a_bad_interval(self, seconds: Any) -> None:
        with pytest.raises(ConfigError, match=r"(?s)EveryNSeconds.*seconds"):
            sc.EveryNSeconds(seconds)

    @pytest.mark.parametrize("n", [0, -1, 1.5, "2", True])
    def test_a_bad_epoch_count(self, n: Any) -> None:
        with pytest.raises(ConfigError, match=r"(?s)EveryNEpochs.* n:"):
            sc.EveryNEpochs(n)

    def test_a_hook_that_is_not_callable(self) -> None:
        with pytest.raises(ConfigError, match=r"(?s)SaveFn.*should_save"):
            sc.SaveFn(3)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="clock"):
            sc.EveryNSeconds(5, clock=1.0)  # type: ignore[arg-type]

    @pytest.mark.parametrize("given", [object(), [sc.EveryNSeconds(5), "every epoch"], "x", 5])
    def test_save_triggers_holding_something_else(self, tmp_path: Path, given: Any) -> None:
        with pytest.raises(ConfigError, match="save_triggers"):
            sc.Checkpointer(
                sc.CheckpointConfig(), run="r", output_root=tmp_path, save_triggers=given
            )

    def test_describe(self) -> None:
        assert sc.EveryNSeconds(1800).describe() == "every 1800 s"
        assert sc.EveryNEpochs().describe() == "every epoch"
        assert sc.EveryNEpochs(3).describe() == "every 3 epochs"


class TestShouldSave:
    def test_the_hook_saves_where_it_says_and_is_asked_where_a_save_could_happen(
        self, tmp_path: Path
    ) -> None:
        """save_every=4 and should_save(step) true at 3: saves at 3, 4 and 8; the hook is not
        asked at the steps the cadence already saves."""
        asked: list[int] = []

        def should_save(step: int) -> bool:
            asked.append(step)
            return step == 3

        loop = Loop(tmp_path, "save_every=4", save_triggers=sc.SaveFn(should_save))
        for _ in range(8):
            loop.step()
        loop.ckpt.finalize()
        loop.ckpt.close()
        assert loop.saved() == [3, 4, 8]
        assert asked == [1, 2, 3, 5, 6, 7]

    def test_the_hook_alone_with_save_every_0(self, tmp_path: Path) -> None:
        loop = Loop(tmp_path, save_triggers=[sc.SaveFn(lambda step: step % 3 == 0)])
        ends = [loop.step() for _ in range(7)]
        loop.ckpt.close()
        assert loop.saved() == [3, 6]
        assert [i + 1 for i, e in enumerate(ends) if e.saved is not None] == [3, 6]

    def test_a_hook_returning_no_bool_is_refused_at_that_step(self, tmp_path: Path) -> None:
        loop = Loop(tmp_path, save_triggers=sc.SaveFn(lambda step: 1 if step == 2 else False))
        loop.step()
        with pytest.raises(ConfigError, match=r"(?s)should_save.*step 2"):
            loop.step()
        loop.ckpt.close()
        assert loop.saved() == []


class TestEpochs:
    def test_every_second_epoch(self, tmp_path: Path) -> None:
        """Four epochs of three steps, step_end(epoch=k) at each epoch's last step: saves at
        the end of epochs 2 and 4 (steps 6 and 12)."""
        loop = Loop(tmp_path, save_triggers=sc.EveryNEpochs(2))
        for epoch in range(4):
            for i in range(3):
                loop.step(epoch=epoch + 1) if i == 2 else loop.step()
        loop.ckpt.close()
        assert loop.saved() == [6, 12]

    @pytest.mark.parametrize("epoch", [0, -1, 1.0, True, "1"])
    def test_a_bad_epoch_is_refused(self, tmp_path: Path, epoch: Any) -> None:
        loop = Loop(tmp_path, save_triggers=sc.EveryNEpochs())
        with pytest.raises(TrackingError, match="epoch"):
            loop.step(epoch=epoch)
        loop.ckpt.close()


class TestWallClock:
    def test_due_once_the_interval_passed_since_the_last_save(self, tmp_path: Path) -> None:
        """A fake clock an hour ahead at step 3 only: one save there; the interval restarts
        at that save, so step 4 (the clock back) is not due."""
        ahead = [0.0]
        trigger = sc.EveryNSeconds(1800, clock=lambda: time.monotonic() + ahead[0])
        loop = Loop(tmp_path, save_triggers=trigger)
        for step in range(1, 6):
            ahead[0] = 3600.0 if step == 3 else 0.0
            loop.step()
        loop.ckpt.close()
        assert loop.saved() == [3]

    def test_the_interval_counts_from_any_save(self, tmp_path: Path) -> None:
        """A save_every save restarts the interval: a clock 1000 s ahead (of an 1800 s
        interval) at every step after the cadence save at 2 is never due again."""
        ahead = [0.0]
        trigger = sc.EveryNSeconds(1800, clock=lambda: time.monotonic() + ahead[0])
        loop = Loop(tmp_path, "save_every=2", save_triggers=trigger)
        loop.step()
        ahead[0] = 2000.0
        loop.step()  # the cadence saves step 2
        ahead[0] = 1000.0
        loop.step()
        loop.ckpt.close()
        assert loop.saved() == [2]


class TestEmergency:
    def test_a_stop_replaces_a_due_trigger_with_one_emergency_save(self, tmp_path: Path) -> None:
        sentinel = tmp_path / "logs"
        sentinel.mkdir()
        asked: list[int] = []

        def should_save(step: int) -> bool:
            asked.append(step)
            return True

        loop = Loop(
            tmp_path / "out",
            f"termination.sentinel_dir={sentinel}",
            save_triggers=sc.SaveFn(should_save),
        )
        loop.step()
        (sentinel / "SIGUSR1_RECEIVED").write_text("")
        end = loop.step()
        loop.ckpt.finalize()
        loop.ckpt.close()
        assert end
        assert end.emergency is not None
        assert asked == [1]  # the stop was decided first: the hook was not asked at 2
        assert loop.saved() == [1, 2]


# -- a real two-rank gloo group ----------------------------------------------------------------

STEPS = 5


def _rank(rank: int, world_size: int, tmp: str) -> None:
    import datetime

    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"file://{tmp}/store",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=60),
    )
    try:
        # Each rank's triggers answer differently: rank 1's clock is always an hour ahead
        # and its hook never says yes; rank 0's clock is never ahead and its hook says yes at
        # 2 and 4. Only rank 0's answers may count, on both ranks.
        ahead = 0.0 if rank == 0 else 7200.0
        triggers = [
            sc.EveryNSeconds(3600, clock=lambda: time.monotonic() + ahead),
            sc.SaveFn(lambda step: rank == 0 and step in (2, 4)),
        ]
        loop = Loop(Path(tmp) / "out", save_triggers=triggers)
        saved_at: list[int | None] = []
        for _ in range(STEPS):
            loop.step()
            saved_at.append(loop.ckpt.run_state.last_saved_step)
        dist.barrier()
        loop.ckpt.close()
        (Path(tmp) / f"rank{rank}.json").write_text(json.dumps(saved_at))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_gloo_ranks_save_at_the_steps_rank_zero_decided(tmp_path: Path) -> None:
    torch.multiprocessing.spawn(_rank, args=(2, str(tmp_path)), nprocs=2, join=True)
    zero, one = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert zero == one == [None, 2, 2, 4, 4]
    assert sorted(sc.checkpoints(tmp_path / "out").steps) == [2, 4]
