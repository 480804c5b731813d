"""One launch of the demo's training process: read its progress lines, and on the chosen line
SIGKILL it or (a preemption) create the sentinel file the termination watch polls."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from statecraft.checkpoint.config.schema import TerminationConfig
from statecraft.cli.demo.records import Launch

__all__ = ["SENTINEL_NAME", "parse_progress", "run_launch"]

#: the sentinel's file name: the default ``termination.sentinel_name`` the training uses
SENTINEL_NAME = TerminationConfig().sentinel_name

_PROGRESS = re.compile(
    r"^(resumed|step|save-begin|save-staged|save-end|evaluated|pending|published|stopped|done) "
    r"(\d+)(?: (.+))?$"
)


def parse_progress(line: str) -> tuple[str, int, str] | None:
    """``(kind, number, rest)`` of a progress line of ``demo_train``, None for other output."""
    match = _PROGRESS.match(line)
    if match is None:
        return None
    kind, number, rest = match.group(1), int(match.group(2)), match.group(3) or ""
    try:
        if kind in ("save-end", "save-staged"):
            [float(x) for x in rest.split()]
        elif kind == "stopped":
            _, _, seconds, _ = rest.split(" ", 3)
            float(seconds)
    except ValueError:
        return None
    return kind, number, rest


def _children(pid: int) -> list[int]:
    """The live child processes of ``pid`` (Linux ``/proc``; ``[]`` elsewhere)."""
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if int(fields[1]) == pid:  # fields: state, ppid, ...
            found.append(int(name))
    return found


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the process group this launch started (``start_new_session``: its id is the
    process's pid) and, first, the group of each of its children: ``torchrun`` starts every
    rank in a session of its own, so killing the agent's group alone would leave the ranks
    training."""
    for child in _children(proc.pid):
        try:
            os.killpg(child, signal.SIGKILL)  # a rank leads its own group (its dataloaders)
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(child, signal.SIGKILL)  # a child in the launch's own group
            except ProcessLookupError:
                pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # already gone
        pass


def _reader(stream: Any, lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line.rstrip("\n"))
    lines.put(None)


def run_launch(
    launch: Launch,
    *,
    log_path: Path,
    choose: Callable[[int], tuple[str, float] | None] | None,
    timeout_s: float,
    sentinel_dir: Path,
    cancel: threading.Event | None = None,
) -> None:
    """Run one process to its end, interrupting it on the chosen line; fills in ``launch``.

    ``choose(resumed_step)`` picks the trigger line once the process reports where it
    resumed. On that line the process is SIGKILLed, or, for a launch whose ``action`` is
    ``"sentinel"``, the sentinel file ``sentinel_dir/SIGUSR1_RECEIVED`` is created (the
    process's ``SLURM_LOG_DIR`` is ``sentinel_dir``) and the process stops by itself at its
    next step boundary. The process is SIGKILLed (by the pid this call started) when it runs
    past ``timeout_s`` or when ``cancel`` is set; it never outlives this call.
    """
    started = time.monotonic()
    deadline = started + timeout_s
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "SLURM_LOG_DIR": str(sentinel_dir)}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(  # its own process group: a kill takes every rank of a job
            launch.command,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
            start_new_session=True,
        )
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
        try:
            _follow(launch, proc, lines, choose, deadline, timeout_s, cancel, sentinel_dir)
        finally:
            if proc.poll() is None:  # an error or a timeout: never leave our process behind
                _kill_group(proc)
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


def _record(launch: Launch, kind: str, number: int, rest: str) -> None:
    """What one progress line says about the launch."""
    if kind == "resumed":
        launch.resumed_step = number
        launch.resume_source = None if rest in ("", "-") else rest
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
    elif kind == "stopped":
        launch.stop_step = number
        launch.stop_kind, launch.stop_path, to_durable, launch.stop_reason = rest.split(" ", 3)
        launch.stop_seconds = float(to_durable)
    elif kind == "done":
        launch.done_step = number


def _follow(
    launch: Launch,
    proc: subprocess.Popen[str],
    lines: queue.Queue[str | None],
    choose: Callable[[int], tuple[str, float] | None] | None,
    deadline: float,
    timeout_s: float,
    cancel: threading.Event | None,
    sentinel_dir: Path,
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
        event = parse_progress(line)
        if event is None:  # not a progress line (a library printing to stdout): ignore it
            continue
        kind, number, rest = event
        launch.last_line = line
        _record(launch, kind, number, rest)
        if kind == "resumed" and choose is not None:
            chosen = choose(number)
            if chosen is not None:
                launch.trigger, delay = chosen
                launch.kill_delay_ms = round(delay * 1000, 1)
        if launch.trigger != f"{kind} {number}" or launch.killed or launch.sentinel_created:
            continue
        if launch.action == "sentinel":
            (sentinel_dir / SENTINEL_NAME).touch()
            launch.sentinel_created = True
            continue  # the process stops by itself at its next step boundary
        if launch.kill_delay_ms:
            time.sleep(launch.kill_delay_ms / 1000)
        _kill_group(proc)  # the process this launch started (and its ranks), by its pid
        launch.killed = True
        # keep reading: lines the process wrote before it died show where the kill landed
