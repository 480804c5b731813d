"""A real training process with asynchronous saves at every step (and the default retention),
SIGKILLed at random moments -- between steps, while a background write or its retention pass
is in flight -- and relaunched with the unchanged command until it completes: every relaunch
resumes from a complete checkpoint, and the final state is bit-identical to an uninterrupted
run's."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from statecraft.checkpoint.kernel.layout import LATEST_POINTER, parse_latest
from statecraft.checkpoint.kernel.verify import verify_checkpoint
from statecraft.cli.demo.compare import compare_checkpoints
from statecraft.storage.local import LocalStore

pytestmark = pytest.mark.slow

STEPS = 12
KILLS = 3
CHILD = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, os.environ["TESTS_DIR"])
    import torch
    import statecraft as sc
    from checkpoint_runs import Objects

    out, steps, result = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    import random, numpy
    random.seed(0)
    numpy.random.seed(0)  # every stream the checkpoint records starts alike in both runs
    objects = Objects()
    ckpt = sc.Checkpointer(
        sc.CheckpointConfig.load(None, ["save_every=1", "quiet=true"]),
        run=sc.RunIdentity("proj", "group", "name"),
        output_root=out,
    )
    ckpt.track(model=objects.model, optimizer=objects.optimizer,
               scheduler=objects.scheduler, data=objects.cursor)
    start = ckpt.resume()
    print("resumed", start.step, flush=True)
    for _ in range(start.step, steps):
        objects.step()
        ckpt.record(sc.Outcome.APPLIED)
        end = ckpt.step_end()
        assert isinstance(end.saved, sc.PendingSave), end.saved
        print("step", ckpt.step, flush=True)
    ckpt.finalize()
    torch.save({"model": objects.model.state_dict(),
                "optimizer": objects.optimizer.state_dict(),
                "cursor": objects.cursor.position}, result)
    print("done", ckpt.step, flush=True)
    """
)


def _launch(script: Path, out: Path, result: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "TESTS_DIR": str(Path(__file__).resolve().parents[1])}
    return subprocess.Popen(
        [sys.executable, str(script), str(out), str(STEPS), str(result)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _checkpoints(out: Path) -> Path:
    (attempt,) = (p for p in (out / "proj" / "group" / "name").iterdir() if p.is_dir())
    return attempt / "checkpoints"


def test_sigkill_during_async_saves_ends_bit_identical(tmp_path: Path) -> None:
    """Three SIGKILLs at random moments of a run that saves asynchronously every step: after
    each, latest names a checkpoint that verifies and the relaunch resumes from it or a newer
    commit (never an earlier one); the final checkpoint and the final live state are
    bit-identical to an uninterrupted run's."""
    script = tmp_path / "train.py"
    script.write_text(CHILD)
    reference = _launch(script, tmp_path / "ref", tmp_path / "ref.pt")
    _, err = reference.communicate(timeout=300)
    assert reference.returncode == 0, err

    rng = random.Random(1234)
    out, result = tmp_path / "killed", tmp_path / "killed.pt"
    kills, launches = 0, 0
    last_latest: int | None = None
    while True:
        launches += 1
        assert launches <= 12, "the killed run never completed"
        child = _launch(script, out, result)
        assert child.stdout is not None
        first = child.stdout.readline().split()
        assert first[0] == "resumed", (first, child.stderr.read() if child.stderr else "")
        resumed = int(first[1])
        if last_latest is not None:
            # resume=auto adopts latest, or a newer commit whose pointer update the kill cut
            assert resumed >= last_latest
        if kills < KILLS and resumed < STEPS - 1:
            target = rng.randint(resumed + 1, STEPS - 1)
            for line in child.stdout:
                if line.split() == ["step", str(target)]:
                    break
            time.sleep(rng.uniform(0.0, 0.05))  # inside a background write, or between
            child.send_signal(signal.SIGKILL)
            child.communicate(timeout=60)
            assert child.returncode == -signal.SIGKILL
            kills += 1
            ckpts = _checkpoints(out)
            if (ckpts / LATEST_POINTER).exists():
                last_latest = parse_latest((ckpts / LATEST_POINTER).read_bytes())
                store = LocalStore(str(ckpts))
                verify_checkpoint(store, last_latest)  # raises if it does not verify
            continue
        _, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
        break
    assert kills == KILLS
    ref_ckpts, run_ckpts = _checkpoints(tmp_path / "ref"), _checkpoints(out)
    name = f"iter_{STEPS:09d}"
    assert compare_checkpoints(ref_ckpts / name, run_ckpts / name) == []
    expected = torch.load(tmp_path / "ref.pt", weights_only=True)
    got = torch.load(result, weights_only=True)
    for key, value in expected["model"].items():
        assert torch.equal(got["model"][key], value), key
    for index, state in expected["optimizer"]["state"].items():
        for key, value in state.items():
            assert torch.equal(got["optimizer"]["state"][index][key], value), (index, key)
    assert got["cursor"] == expected["cursor"]
