"""The kill demo: launch the training command, SIGKILL it at points drawn from the seed,
preempt it once through the sentinel file, relaunch until it completes, and compare its
checkpoints with an uninterrupted reference."""

from __future__ import annotations

import os
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from statecraft.checkpoint.kernel.layout import LATEST_POINTER, parse_latest
from statecraft.cli.demo.compare import compare_checkpoints
from statecraft.cli.demo.disk import (
    checkpoints_dir,
    committed_iterations,
    inspect_after_kill,
    published_iterations,
)
from statecraft.cli.demo.launch import run_launch
from statecraft.cli.demo.preempt import choose_preempt, inspect_after_stop, stop_problems
from statecraft.cli.demo.records import (
    _FIRST_SAVE_DELAY_S,
    LAUNCH_TIMEOUT_S,
    SAVE_KILL_DELAY_S,
    TRAINING_SEED,
    DemoError,
    DemoReport,
    Launch,
)

__all__ = ["DCP_RANKS", "run_kill_demo"]

#: gloo ranks of each launch of ``statecraft demo --format dcp``
DCP_RANKS = 2


def _choose_trigger(
    rng: random.Random,
    kind: str,
    resumed: int,
    steps: int,
    save_every: int,
    *,
    max_delay_s: float = SAVE_KILL_DELAY_S,
    validate_every: int = 0,
) -> tuple[str, float] | None:
    """A line of this launch to kill on -- ``step <n>``, ``save-begin <n>`` or (kind
    ``evaluated``: inside a validation, right after its evaluation returned and before its
    result is recorded) ``evaluated <n>`` after ``resumed`` -- and, for a save, a delay in
    seconds up to ``max_delay_s`` (a point inside the save). None when nothing is left to
    kill. A validation kill falls back to a step kill when no validation step (before the
    last) is left."""
    if kind == "evaluated":
        targets = [v for v in range(validate_every, steps, validate_every or steps) if v > resumed]
        if validate_every and targets:
            return f"evaluated {rng.choice(targets)}", 0.0
        kind = "step"
    saves = [s for s in range(save_every, steps, save_every) if s > resumed]
    if not saves and steps > resumed:
        # the final save only when nothing else is left: a delayed kill aimed at it may
        # arrive after the process has already finished
        saves = [steps]
    step_points = list(range(resumed + 1, steps))
    if saves and (kind == "save-begin" or not step_points):
        target, delay = rng.choice(saves), rng.uniform(0.0, max_delay_s)
        # the final save is followed by the exit: kill at once so that the kill lands
        return f"save-begin {target}", 0.0 if target == steps else delay
    if step_points:
        return f"step {rng.choice(step_points)}", 0.0
    return None


def _delay_cap(launches: list[Launch]) -> float:
    """The longest delay after ``save-begin`` that still lands inside a typical save."""
    seen = [save[1] for launch in launches for save in list(launch.saves)]
    if not seen:
        return _FIRST_SAVE_DELAY_S
    return min(SAVE_KILL_DELAY_S, 0.8 * statistics.median(seen))


def run_kill_demo(
    out: str | os.PathLike[str],
    *,
    steps: int,
    save_every: int,
    kills: int,
    seed: int,
    validate_every: int = 0,
    preempt: bool = True,
    on_kill: Callable[[Launch, Path | None], None] | None = None,
    timeout_s: float = LAUNCH_TIMEOUT_S,
    checkpoint_format: str = "consolidated",
) -> DemoReport:
    """Run the reference and the killed run under ``out`` and compare their checkpoints.

    The killed run is SIGKILLed ``kills`` times, then (with ``preempt``) preempted once: the
    demo creates the sentinel file ``<out>/logs/slurm/SIGUSR1_RECEIVED`` (the launch's
    ``SLURM_LOG_DIR``) on a ``step`` line drawn from the seed, and the process stops by itself
    at its next step boundary with an emergency checkpoint, ``DONE.json`` naming the reason
    and exit code 0; then it is relaunched unchanged until it completes. The preemption's
    emergency checkpoint is the one iteration the killed run may hold beyond the reference's
    (when it is off the cadence); every common iteration must be bit-identical.

    With ``validate_every`` both runs validate (durably) every that many steps, and the first
    kill is aimed inside a validation (on its ``evaluated`` line), so the relaunch shows the
    pending -> published path; every validation checkpoint must end published in both runs.

    The reference runs in the background while the killed run is driven, so the demo costs
    about one run's worth of process start-ups less. ``on_kill(launch, checkpoints_dir)`` is
    called after each interrupted launch (a kill or the preemption), before the relaunch
    (tests verify the disk state there).

    With ``checkpoint_format="dcp"`` every launch is a :data:`DCP_RANKS`-rank gloo job
    (``torch.distributed.run --standalone``) saving DCP checkpoints; a kill takes the whole
    job (its process group: the launcher and every rank).

    Returns:
        the :class:`DemoReport`; ``bit_exact`` is the verdict.

    Raises:
        DemoError: ``out`` exists and is not empty (both runs would resume what is there).
    """
    started = time.monotonic()
    root = Path(out)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise DemoError(
            f"demo output root {root} is not an empty directory; the runs would resume what is "
            "there instead of training. Pass a new or empty --out, or omit it for a temporary one"
        )
    report = DemoReport(str(root), seed, steps, save_every, kills, validate_every, preempt)
    rng = random.Random(seed)
    kinds = [rng.choice(("step", "save-begin")) for _ in range(kills)]
    if kills >= 2 and len(set(kinds)) == 1:  # show both kinds of kill
        flip = rng.randrange(kills)
        kinds[flip] = "step" if kinds[flip] == "save-begin" else "save-begin"
    if validate_every and kills:  # show the pending -> published path after a kill
        kinds[0] = "evaluated"
    plan: list[str | None] = [*kinds, *(["sentinel"] if preempt else []), None]
    logs = root / "logs"
    sentinels = {"reference": logs / "slurm-reference", "killed": logs / "slurm"}
    for directory in sentinels.values():
        directory.mkdir(parents=True, exist_ok=True)

    dcp = checkpoint_format == "dcp"
    torchrun = ["torch.distributed.run", "--standalone", "--nproc-per-node", str(DCP_RANKS), "-m"]
    launcher = [sys.executable, "-m", *(torchrun if dcp else [])]
    fmt = ["--format", "dcp", "--progress", "rank0"] if dcp else []

    def command(sub: str) -> list[str]:
        return [
            *launcher,
            "statecraft.cli.demo_train",
            *fmt,
            "--out",
            str(root / sub),
            "--steps",
            str(steps),
            "--save-every",
            str(save_every),
            "--validate-every",
            str(validate_every),
            "--seed",
            str(TRAINING_SEED),
        ]

    def chooser(kind: str | None) -> Callable[[int], tuple[str, float] | None] | None:
        if kind is None:
            return None
        if kind == "sentinel":
            return lambda resumed: choose_preempt(rng, resumed, steps)
        return lambda resumed: _choose_trigger(
            rng,
            kind,
            resumed,
            steps,
            save_every,
            max_delay_s=_delay_cap([reference, *launches]),
            validate_every=validate_every,
        )

    reference = Launch("reference", 1, command("reference"))
    cancel = threading.Event()
    ref_thread = threading.Thread(
        target=run_launch,
        args=(reference,),
        kwargs={
            "log_path": logs / "reference-1.log",
            "choose": None,
            "timeout_s": timeout_s,
            "sentinel_dir": sentinels["reference"],
            "cancel": cancel,
        },
    )
    ref_thread.start()
    launches: list[Launch] = []
    try:
        for index, kind in enumerate(plan, start=1):
            action = "sentinel" if kind == "sentinel" else "SIGKILL"
            launch = Launch("killed", index, command("killed"), action=action)
            launches.append(launch)
            run_launch(
                launch,
                log_path=logs / f"killed-{index}.log",
                choose=chooser(kind),
                timeout_s=timeout_s,
                sentinel_dir=sentinels["killed"],
            )
            if launch.error or not launch.interrupted:
                break
            ckpt_dir = checkpoints_dir(root / "killed")
            if launch.killed:
                inspect_after_kill(launch, ckpt_dir)
            else:
                inspect_after_stop(launch, ckpt_dir, sentinels["killed"])
            if on_kill is not None:
                on_kill(launch, ckpt_dir)
    except BaseException:  # Ctrl-C or a failing on_kill: stop the reference run too
        cancel.set()
        raise
    finally:
        ref_thread.join()
    report.launches = [reference, *launches]
    report.errors = [launch.error for launch in report.launches if launch.error]
    report.errors += [
        f"after the SIGKILL of killed launch {launch.index}, "
        f"{LATEST_POINTER} names iter {launch.latest}, which does not verify: "
        f"{launch.latest_problem}"
        for launch in launches
        if launch.latest_verified is False
    ]
    for launch in launches:
        if launch.action == "sentinel" and launch.error is None:
            report.errors += stop_problems(launch)
    report.emergency_checkpoints = [
        x.stop_step for x in launches if x.stop_step is not None and x.stop_kind != "covered"
    ]
    for launch in (reference, launches[-1]) if launches else (reference,):
        if not report.errors and launch.done_step != steps:
            report.errors.append(
                f"the {launch.run} run did not complete: its last launch "
                f"ended with '{launch.last_line}' (status {launch.returncode})"
            )
    _compare(report, root)
    all_saves = [s[1] for launch in report.launches for s in launch.saves]
    if all_saves:
        report.save_seconds = {
            "count": len(all_saves),
            "min": min(all_saves),
            "median": statistics.median(all_saves),
            "max": max(all_saves),
            "blocking_median": statistics.median(
                s[2] for launch in report.launches for s in launch.saves
            ),
        }
    report.wall_s = round(time.monotonic() - started, 2)
    return report


def _compare(report: DemoReport, root: Path) -> None:
    ref_dir = checkpoints_dir(root / "reference")
    run_dir = checkpoints_dir(root / "killed")
    report.reference_checkpoints = committed_iterations(ref_dir)
    report.killed_checkpoints = committed_iterations(run_dir)
    report.reference_published = published_iterations(ref_dir)
    report.killed_published = published_iterations(run_dir)
    report.errors += report.publication_problems()
    if ref_dir is None or run_dir is None or not report.reference_checkpoints:
        report.errors.append("no checkpoints to compare")
        return
    for directory, name in ((ref_dir, "reference"), (run_dir, "killed")):
        try:
            latest = parse_latest((directory / LATEST_POINTER).read_bytes())
        except (OSError, ValueError) as exc:
            report.errors.append(f"{name} run: {LATEST_POINTER} is unreadable ({exc})")
            return
        if name == "reference":
            report.final_iteration = latest
        elif latest != report.final_iteration:
            report.differences.append(
                f"{LATEST_POINTER}: reference names iter {report.final_iteration}, "
                f"killed run names iter {latest}"
            )
    expected = [i for i in report.killed_checkpoints if i not in report.extra_checkpoints]
    if report.reference_checkpoints != expected:
        extra = f" (its emergency checkpoint {report.extra_checkpoints} aside)"
        report.differences.append(
            f"committed iterations differ: reference {report.reference_checkpoints}, "
            f"killed run {report.killed_checkpoints}{extra if report.extra_checkpoints else ''}"
        )
    for iteration in report.reference_checkpoints:
        if iteration in report.killed_checkpoints:
            name = f"iter_{iteration:09d}"
            report.compared.append(iteration)
            report.differences += [
                f"{name}/{line}" for line in compare_checkpoints(ref_dir / name, run_dir / name)
            ]
    final = run_dir / f"iter_{report.final_iteration:09d}"
    report.final_bytes = sum(p.stat().st_size for p in final.glob("*.pt")) if final.is_dir() else 0
