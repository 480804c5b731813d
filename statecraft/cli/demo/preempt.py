"""The demo's preemption: the launch stopped through the sentinel file, as Slurm's
``--signal=B:SIGUSR1`` and the batch script's trap would stop it, and what it left on disk."""

from __future__ import annotations

import json
import random
from pathlib import Path

from statecraft.checkpoint.kernel.catalog import classify
from statecraft.checkpoint.kernel.layout import parse_iter_dirname
from statecraft.checkpoint.stop.records import DONE_FILE
from statecraft.cli.demo.disk import ADOPTABLE
from statecraft.cli.demo.launch import SENTINEL_NAME
from statecraft.cli.demo.records import Launch
from statecraft.storage.local import LocalStore

__all__ = ["choose_preempt", "inspect_after_stop", "stop_problems"]

#: the reason the training must record for a stop through the sentinel file
SENTINEL_REASON = "sentinel"


def choose_preempt(rng: random.Random, resumed: int, steps: int) -> tuple[str, float] | None:
    """The ``step <n>`` line on which the demo creates the sentinel: in the first half of what
    is left after ``resumed`` (so that the run is still training when the file appears), or
    None when fewer than two steps are left."""
    if steps - resumed < 2:
        return None
    last = max(resumed + 1, resumed + (steps - resumed) // 2)
    return f"step {rng.randint(resumed + 1, last)}", 0.0


def inspect_after_stop(launch: Launch, directory: Path | None, sentinel_dir: Path) -> None:
    """Record what a stop left: ``DONE.json``, the sentinel's consumption, and whether the
    emergency checkpoint verifies (at digest level)."""
    launch.sentinel_consumed = (
        not (sentinel_dir / SENTINEL_NAME).exists()
        and (sentinel_dir / f"{SENTINEL_NAME}.consumed").is_file()
    )
    if directory is None or not directory.is_dir():
        return
    done = directory.parent / DONE_FILE
    try:
        launch.done_record = json.loads(done.read_text())
    except (OSError, ValueError):
        launch.done_record = None
    if launch.stop_path and launch.stop_path.startswith(f"{directory.name}/"):
        iteration = parse_iter_dirname(launch.stop_path.split("/", 1)[1])
        if iteration is not None:
            entry = classify(LocalStore(str(directory.resolve())), iteration, level="digest")
            launch.stop_verified = entry.state in ADOPTABLE


def stop_problems(launch: Launch) -> list[str]:
    """One line per way the preempted launch did not do what a stop promises."""
    name = f"{launch.run} launch {launch.index}"
    if launch.stop_step is None:
        return [
            f"{name}: the sentinel created on '{launch.trigger}' did not stop the run (it "
            f"ended with '{launch.last_line}', status {launch.returncode})"
        ]
    problems = []
    if launch.returncode != 0:
        problems.append(f"{name} stopped but exited with status {launch.returncode}, not 0")
    if launch.stop_reason != SENTINEL_REASON:
        problems.append(f"{name} stopped for {launch.stop_reason!r}, not {SENTINEL_REASON!r}")
    done = launch.done_record or {}
    if (done.get("step"), done.get("preempted")) != (launch.stop_step, SENTINEL_REASON):
        problems.append(
            f"{name}: {DONE_FILE} says step {done.get('step')}, preempted "
            f"{done.get('preempted')!r}; expected step {launch.stop_step}, preempted "
            f"{SENTINEL_REASON!r}"
        )
    if launch.stop_kind != "covered" and launch.stop_verified is not True:
        problems.append(f"{name}: the emergency checkpoint {launch.stop_path} does not verify")
    if launch.sentinel_consumed is not True:
        problems.append(
            f"{name}: the sentinel was not renamed {SENTINEL_NAME}.consumed after the stop"
        )
    return problems
