"""``step_end(iteration=..., loop_state=...)`` of a multi-role loop: the termination watch
(here the sentinel file and a real SIGUSR1) stops it at a quiescent boundary; the emergency
save is the full boundary of that iteration (every role and ``_SUCCESS``), ``DONE.json``
records the stop, later ``save()`` / ``step_end()`` are refused, and the requeued run resumes
from the emergency boundary. Real torch objects, the real disk."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch
from role_runs import SYNC, open_roles, roles_dir, run_loop

import statecraft as sc
from statecraft.checkpoint.stop.records import EmergencyKind
from statecraft.errors import RunStoppedError, TrackingError

SENTINEL = "SIGUSR1_RECEIVED"
STATE = {"critic_warmup_iterations": 2}


def done(out: Path) -> dict:
    (found,) = out.glob("proj/group/ppo/*/DONE.json")
    return json.loads(found.read_text())


def stopping(out: Path, sentinels: Path, *overrides: str):
    sentinels.mkdir(exist_ok=True)
    return open_roles(out, *SYNC, f"termination.sentinel_dir={sentinels}", *overrides)


def train(pair, policy, critic, it: int) -> None:
    pair.train(actor=it >= 2)
    critic.record(sc.Outcome.APPLIED)
    if it >= 2:
        policy.record(sc.Outcome.APPLIED)


class TestStop:
    def test_sentinel_stop_writes_the_full_boundary_and_requeue_resumes(
        self, tmp_path: Path
    ) -> None:
        """Boundaries at 1 and 2 only; the sentinel at iteration 3: the emergency save writes
        iter 3 (both roles, _SUCCESS with their counters), DONE.json names it, the requeue
        adopts it with every role's state."""
        out, sentinels = tmp_path / "out", tmp_path / "sentinels"
        ckpt, pair, policy, critic = stopping(out, sentinels)
        ckpt.resume()
        run_loop(ckpt, pair, policy, critic, 0, 2)
        assert not ckpt.step_end(iteration=2, loop_state=STATE)
        train(pair, policy, critic, 2)
        (sentinels / SENTINEL).write_text("")
        end = ckpt.step_end(iteration=3, loop_state=STATE)
        assert end
        assert end.reason == "sentinel"
        assert end.emergency is not None
        assert end.emergency.kind is EmergencyKind.CHECKPOINT
        assert end.emergency.path == "role_checkpoints/iter_000000003"
        marker = json.loads((roles_dir(out) / "iter_000000003" / "_SUCCESS").read_text())
        assert marker["counters"] == {"policy": 1, "critic": 3}
        assert marker["loop_state"] == STATE
        record = done(out)
        assert (record["step"], record["preempted"]) == (3, "sentinel")
        assert record["checkpoint"] == "role_checkpoints/iter_000000003"
        assert record["saved"]
        assert not (sentinels / SENTINEL).exists()  # consumed
        with pytest.raises(RunStoppedError, match="stopped at step 3"):
            ckpt.save(iteration=4)
        with pytest.raises(RunStoppedError):
            ckpt.step_end(iteration=4)
        ckpt.finalize()
        ckpt.close()
        assert done(out)["preempted"] == "sentinel"  # finalize after a stop only joins
        expected = {k: v.clone() for k, v in pair.critic.state_dict().items()}

        again, pair2, _, _ = stopping(out, sentinels)
        start = again.resume()
        assert (start.step, start.roles) == (3, {"policy": 1, "critic": 3})
        for key, value in pair2.critic.state_dict().items():
            assert torch.equal(value, expected[key])
        assert pair2.cursor.position == pair.cursor.position
        again.close()

    def test_a_boundary_already_saved_is_covered(self, tmp_path: Path) -> None:
        """save(iteration=3), then a SIGUSR1 at step_end(iteration=3): nothing is written
        again (COVERED), DONE.json names the boundary with saved=false."""
        out, sentinels = tmp_path / "out", tmp_path / "sentinels"
        ckpt, pair, policy, critic = stopping(out, sentinels)
        ckpt.resume()
        run_loop(ckpt, pair, policy, critic, 0, 3)
        before = (roles_dir(out) / "iter_000000003" / "_SUCCESS").read_bytes()
        os.kill(os.getpid(), signal.SIGUSR1)
        end = ckpt.step_end(iteration=3, loop_state=STATE)
        assert end
        assert end.reason == "signal SIGUSR1"
        assert end.emergency is not None
        assert end.emergency.kind is EmergencyKind.COVERED
        assert (roles_dir(out) / "iter_000000003" / "_SUCCESS").read_bytes() == before
        record = done(out)
        assert (record["checkpoint"], record["saved"]) == ("role_checkpoints/iter_000000003", False)
        ckpt.finalize()
        ckpt.close()

    def test_no_stop_and_bad_input(self, tmp_path: Path) -> None:
        """Without a stop step_end is false and writes nothing; a bad iteration, step_end
        before resume(), and an open accumulation window (not polled) behave as stated."""
        out, sentinels = tmp_path / "out", tmp_path / "sentinels"
        ckpt, pair, policy, critic = stopping(out, sentinels)
        with pytest.raises(TrackingError, match="resume"):
            ckpt.step_end(iteration=1)
        ckpt.resume()
        for bad in (None, -1, "3", 2.0):
            with pytest.raises(TrackingError, match="int >= 0"):
                ckpt.step_end(iteration=bad)  # type: ignore[arg-type]
        with pytest.raises(TrackingError, match="loop_state"):
            ckpt.step_end(iteration=1, loop_state={"x": [1]})
        train(pair, policy, critic, 0)
        critic.record(sc.Outcome.ACCUMULATING)  # the critic's window is open
        (sentinels / SENTINEL).write_text("")
        assert not ckpt.step_end(iteration=1)  # not quiescent: asked at the next boundary
        assert not roles_dir(out).joinpath("iter_000000001").exists()
        ckpt.close()

    def test_normal_finalize_writes_done(self, tmp_path: Path) -> None:
        """A loop that ends normally: DONE.json records its last boundary, preempted null."""
        ckpt, pair, policy, critic = open_roles(tmp_path, *SYNC)
        ckpt.resume()
        run_loop(ckpt, pair, policy, critic, 0, 2)
        assert ckpt.finalize() is None
        ckpt.close()
        record = done(tmp_path)
        assert (record["step"], record["preempted"]) == (2, None)
        assert record["checkpoint"] == "role_checkpoints/iter_000000002"
