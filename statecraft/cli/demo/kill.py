"""The kill demo: launch the training command, SIGKILL it at points drawn from the seed,
relaunch until it completes, and compare its checkpoints with an uninterrupted reference."""

from __future__ import annotations

import os
import queue
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from statecraft.checkpoint.layout import LATEST_POINTER, parse_latest
from statecraft.cli.demo.compare import compare_checkpoints
from statecraft.cli.demo.disk import (
    checkpoints_dir,
    committed_iterations,
    inspect_after_kill,
    published_iterations,
)
from statecraft.cli.demo.records import (
    _FIRST_SAVE_DELAY_S,
    LAUNCH_TIMEOUT_S,
    SAVE_KILL_DELAY_S,
    TRAINING_SEED,
    DemoError,
    DemoReport,
    Launch,
)

__all__ = ["run_kill_demo"]


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


_PROGRESS = re.compile(
    r"^(resumed|step|save-begin|save-staged|save-end|evaluated|pending|published|done) (\d+)"
    r"(?: (.+))?$"
)


def _parse_progress(line: str) -> tuple[str, int, str] | None:
    """``(kind, number, rest)`` of a progress line of ``demo_train``, None for other output."""
    match = _PROGRESS.match(line)
    if match is None:
        return None
    kind, number, rest = match.group(1), int(match.group(2)), match.group(3) or ""
    if kind in ("save-end", "save-staged"):
        try:
            [float(x) for x in rest.split()]
        except ValueError:
            return None
    return kind, number, rest


def _reader(stream: Any, lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line.rstrip("\n"))
    lines.put(None)


def _launch(
    launch: Launch,
    *,
    log_path: Path,
    choose: Callable[[int], tuple[str, float] | None] | None,
    timeout_s: float,
    cancel: threading.Event | None = None,
) -> None:
    """Run one process to its end, SIGKILLing it on the chosen line; fills in ``launch``.

    ``choose(resumed_step)`` picks the kill line once the process reports where it resumed.
    The process is SIGKILLed (by the pid this call started) when it runs past ``timeout_s``
    or when ``cancel`` is set; it never outlives this call.
    """
    started = time.monotonic()
    deadline = started + timeout_s
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            launch.command,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
        try:
            _follow(launch, proc, lines, choose, deadline, timeout_s, cancel)
        finally:
            if proc.poll() is None:  # an error or a timeout: never leave our process behind
                os.kill(proc.pid, signal.SIGKILL)
            launch.returncode = proc.wait()
            if launch.killed and launch.returncode != -signal.SIGKILL:
                launch.killed = False  # it exited on its own before the signal landed
            launch.wall_s = round(time.monotonic() - started, 3)
    if launch.error is None and not launch.killed and launch.returncode != 0:
        tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
        launch.error = (
            f"{launch.run} launch {launch.index} exited with status "
            f"{launch.returncode}: {' | '.join(tail) or 'no output'} (log: {log_path})"
        )


def _follow(
    launch: Launch,
    proc: subprocess.Popen[str],
    lines: queue.Queue[str | None],
    choose: Callable[[int], tuple[str, float] | None] | None,
    deadline: float,
    timeout_s: float,
    cancel: threading.Event | None,
) -> None:
    while True:
        if time.monotonic() >= deadline:
            launch.error = (
                f"{launch.run} launch {launch.index} did not finish within "
                f"{timeout_s:g} s; it was killed"
            )
            return
        if cancel is not None and cancel.is_set():
            launch.error = f"{launch.run} launch {launch.index} was cancelled; it was killed"
            return
        try:
            line = lines.get(timeout=min(0.5, max(0.0, deadline - time.monotonic())))
        except queue.Empty:
            continue
        if line is None:
            return
        event = _parse_progress(line)
        if event is None:  # not a progress line (a library printing to stdout): ignore it
            continue
        kind, number, rest = event
        launch.last_line = line
        if kind == "resumed":
            launch.resumed_step = number
            launch.resume_source = None if rest in ("", "-") else rest
            chosen = None if choose is None else choose(number)
            if chosen is not None:
                launch.trigger, delay = chosen
                launch.kill_delay_ms = round(delay * 1000, 1)
        elif kind == "step":
            launch.last_step = number
        elif kind == "save-end":
            seconds, *blocking = (float(x) for x in rest.split())
            launch.saves.append([number, seconds, blocking[0] if blocking else seconds])
        elif kind == "evaluated":
            launch.evaluated.append(number)
        elif kind == "pending":
            launch.resumed_stage = rest
        elif kind == "published":
            launch.published.append(number)
        elif kind == "done":
            launch.done_step = number
        if launch.trigger == f"{kind} {number}" and not launch.killed:
            if launch.kill_delay_ms:
                time.sleep(launch.kill_delay_ms / 1000)
            os.kill(proc.pid, signal.SIGKILL)  # the process this launch started, by its pid
            launch.killed = True
            # keep reading: lines the process wrote before it died show where the kill landed


def run_kill_demo(
    out: str | os.PathLike[str],
    *,
    steps: int,
    save_every: int,
    kills: int,
    seed: int,
    validate_every: int = 0,
    on_kill: Callable[[Launch, Path | None], None] | None = None,
    timeout_s: float = LAUNCH_TIMEOUT_S,
) -> DemoReport:
    """Run the reference and the killed run under ``out`` and compare their checkpoints.

    With ``validate_every`` both runs validate (durably) every that many steps, and the first
    kill is aimed inside a validation (on its ``evaluated`` line), so the relaunch shows the
    pending -> published path; every validation checkpoint must end published in both runs.

    The reference runs in the background while the killed run is driven, so the demo costs
    about one run's worth of process start-ups less. ``on_kill(launch, checkpoints_dir)`` is
    called after each kill, before the relaunch (tests verify the disk state there).

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
    report = DemoReport(str(root), seed, steps, save_every, kills, validate_every)
    rng = random.Random(seed)
    kinds = [rng.choice(("step", "save-begin")) for _ in range(kills)]
    if kills >= 2 and len(set(kinds)) == 1:  # show both kinds of kill
        flip = rng.randrange(kills)
        kinds[flip] = "step" if kinds[flip] == "save-begin" else "save-begin"
    if validate_every and kills:  # show the pending -> published path after a kill
        kinds[0] = "evaluated"
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)

    def command(sub: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "statecraft.cli.demo_train",
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

    reference = Launch("reference", 1, command("reference"))
    cancel = threading.Event()
    ref_thread = threading.Thread(
        target=_launch,
        args=(reference,),
        kwargs={
            "log_path": logs / "reference-1.log",
            "choose": None,
            "timeout_s": timeout_s,
            "cancel": cancel,
        },
    )
    ref_thread.start()
    launches: list[Launch] = []
    try:
        for index in range(1, kills + 2):
            launch = Launch("killed", index, command("killed"))
            launches.append(launch)
            kind = kinds[index - 1] if index <= kills else None
            choose = (
                None
                if kind is None
                else (
                    lambda resumed, kind=kind: _choose_trigger(
                        rng,
                        kind,
                        resumed,
                        steps,
                        save_every,
                        max_delay_s=_delay_cap([reference, *launches]),
                        validate_every=validate_every,
                    )
                )
            )
            _launch(
                launch, log_path=logs / f"killed-{index}.log", choose=choose, timeout_s=timeout_s
            )
            if launch.error or not launch.killed:
                break
            ckpt_dir = checkpoints_dir(root / "killed")
            inspect_after_kill(launch, ckpt_dir)
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
    if report.reference_checkpoints != report.killed_checkpoints:
        report.differences.append(
            f"committed iterations differ: reference {report.reference_checkpoints}, "
            f"killed run {report.killed_checkpoints}"
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
