"""``statecraft demo``: train, SIGKILL, resume, and prove the result is bit-exact.

Two runs of the same command (``python -m statecraft.cli.demo_train``, see its progress protocol),
each in its own output root under the demo's root:

- ``reference/``: one uninterrupted run to completion;
- ``killed/``: the same command, SIGKILLed ``kills`` times at points drawn with
  ``random.Random(seed)`` -- on a ``step <n>`` line (mid-training) or a random fraction of a
  typical save after a ``save-begin <n>`` line (so the kill lands inside the save) -- and
  relaunched unchanged each time until it completes. After every kill the latest pointer is
  checked: the iteration it names must verify.

Then every committed checkpoint of both runs is compared payload by payload
(:func:`compare_checkpoints`): each tensor by dtype, shape and bits, every other value by type
and value. Exit 0 when the killed run's checkpoints are bit-identical to the reference's.
"""

from __future__ import annotations

import argparse
import os
import queue
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import torch

from statecraft.checkpoint.layout import LATEST_POINTER, MANIFEST_NAME, parse_latest
from statecraft.checkpoint.transactions.resume import list_iterations, verify_checkpoint
from statecraft.cli.demo_train import DEMO_RUN
from statecraft.cli.envelope import emit
from statecraft.errors import StatecraftError
from statecraft.storage.local import LocalStore

__all__ = [
    "DemoError",
    "DemoReport",
    "Launch",
    "checkpoints_dir",
    "committed_iterations",
    "compare_checkpoints",
    "run_demo",
    "run_kill_demo",
]

#: A launch that has not finished after this many seconds is killed and reported as an error.
LAUNCH_TIMEOUT_S = 300.0
#: A kill triggered by ``save-begin`` is sent a random delay after the line, so that kills land
#: throughout the save: up to 80% of the median save time observed so far, at most this long.
SAVE_KILL_DELAY_S = 0.03
_FIRST_SAVE_DELAY_S = 0.005  # the cap before any save time has been observed
_LIST_DETAIL = 3  # a list with more differing items than this is summarized in one line
TRAINING_SEED = 0


class DemoError(StatecraftError, ValueError):
    """The demo cannot run as asked (its output root already holds runs)."""

    code = "demo_invalid"


# --------------------------------------------------------------------------- comparison
def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's raw bytes as ``[numel, itemsize]`` uint8 (bit-exact, NaN- and -0.0-aware)."""
    flat = t.detach().cpu().contiguous().reshape(-1)
    return flat.view(torch.uint8).reshape(flat.numel(), t.element_size())


def _tensor_differences(a: torch.Tensor, b: torch.Tensor, path: str) -> list[str]:
    if a.dtype != b.dtype:
        return [f"{path}: dtype {a.dtype} != {b.dtype}"]
    if a.shape != b.shape:
        return [f"{path}: shape {tuple(a.shape)} != {tuple(b.shape)}"]
    if a.numel() == 0 or (torch.equal(a.cpu(), b.cpu()) and torch.equal(_bits(a), _bits(b))):
        return []
    differing = (_bits(a) != _bits(b)).any(dim=1)
    count = int(differing.sum())
    detail = f"{count} of {a.numel()} elements differ"
    if count and not a.is_complex() and a.dtype != torch.bool:
        delta = (a.detach().cpu().double() - b.detach().cpu().double()).abs().reshape(-1)
        first = int(differing.nonzero()[0])
        detail += f" (first at flat index {first}; max |a-b| = {delta[differing].max().item():.3g})"
    return [f"{path}: {detail}"]


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _differences(a: Any, b: Any, path: str) -> list[str]:
    """Every difference between two loaded payloads, each naming its path (type-strict)."""
    where = path or "<root>"
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return _tensor_differences(a, b, where)
    if type(a) is not type(b):
        return [f"{where}: type {type(a).__name__} != {type(b).__name__} ({a!r:.60} vs {b!r:.60})"]
    if isinstance(a, dict):
        out = [
            f"{_join(path, k)}: only in the {side} checkpoint"
            for side, keys in (("first", a.keys() - b.keys()), ("second", b.keys() - a.keys()))
            for k in sorted(keys, key=repr)
        ]
        for key in sorted(a.keys() & b.keys(), key=repr):
            out.extend(_differences(a[key], b[key], _join(path, key)))
        return out
    if isinstance(a, list | tuple):
        if len(a) != len(b):
            return [f"{where}: length {len(a)} != {len(b)}"]
        per_item = [
            _differences(x, y, f"{path}[{i}]") for i, (x, y) in enumerate(zip(a, b, strict=True))
        ]
        differing = [d for d in per_item if d]
        if len(differing) > _LIST_DETAIL:  # e.g. a Python RNG state: one line, not 600
            return [f"{where}: {len(differing)} of {len(a)} items differ, first {differing[0][0]}"]
        return [line for lines in differing for line in lines]
    if isinstance(a, float):
        return [] if a.hex() == b.hex() else [f"{where}: {a!r} != {b!r}"]
    return [] if a == b else [f"{where}: {a!r:.80} != {b!r:.80}"]


def compare_checkpoints(a_dir: str | os.PathLike[str], b_dir: str | os.PathLike[str]) -> list[str]:
    """Every difference between the payloads of two checkpoint directories; empty = identical.

    Each ``*.pt`` file (``model.pt``, ``optim.pt``, ``trainer.pt``, ``data.pt``) is loaded with
    ``weights_only=True`` and walked: tensors must agree in dtype, shape and every bit (so NaN
    equals the same NaN and ``-0.0`` differs from ``0.0``); every other value in type and value
    (``1`` differs from ``1.0``). The manifest is not compared: it records digests of bytes,
    and identical state is what exact resume promises.

    Args:
        a_dir: an ``iter_*`` directory (the reference).
        b_dir: another one (the candidate).

    Returns:
        Lines like ``"optim.pt: state.0.exp_avg: 1 of 8192 elements differ (...)"`` or
        ``"trainer.pt: attempt_id: 12 != 13"``; a missing directory or file, or one that does
        not load, is a difference too.

    Example:
        >>> compare_checkpoints(ref / "iter_000000060", run / "iter_000000060")
        []
    """
    dirs = (Path(a_dir), Path(b_dir))
    missing = [f"{d}: not a directory" for d in dirs if not d.is_dir()]
    if missing:
        return missing
    names = [{p.name for p in d.glob("*.pt")} for d in dirs]
    out = [
        f"{n}: only in {dirs[i]}" for i, j in ((0, 1), (1, 0)) for n in sorted(names[i] - names[j])
    ]
    if not names[0] | names[1]:
        out.append(f"no *.pt files in {dirs[0]} or {dirs[1]}")
    for name in sorted(names[0] & names[1]):
        payloads = []
        for d in dirs:
            try:
                payloads.append(torch.load(d / name, weights_only=True, map_location="cpu"))
            except Exception as exc:  # an unloadable file is a difference, not a crash
                out.append(f"{name}: {d / name} does not load ({type(exc).__name__}: {exc})")
        if len(payloads) == 2:
            out.extend(f"{name}: {line}" for line in _differences(*payloads, ""))
    return out


# ------------------------------------------------------------------------------- records
@attrs.define
class Launch:
    """One process of the demo and what happened to it.

    Attributes:
        run: ``"reference"`` or ``"killed"``.
        index: 1-based launch number within its run.
        resumed_step / resume_source: from the ``resumed`` line (source ``None``: fresh start).
        trigger: the line the kill was aimed at (``"step 37"``, ``"save-begin 20"``), or None.
        kill_delay_ms: how long after a ``save-begin`` trigger the signal was sent, so that
            kills land at different points of the save.
        killed: this launch was SIGKILLed by the demo.
        last_line: the last progress line the process wrote before it ended.
        killed_in_save: the iteration whose save the kill interrupted, or None.
        last_step: the last ``step`` line seen (None before the first step).
        saves: ``[iteration, seconds]`` of each ``save-end`` line.
        done_step: the ``done`` line's step, or None when the launch did not complete.
        returncode: the process's exit status (``-9`` for SIGKILL).
        wall_s: seconds from launch to exit.
        latest: after a kill: the iteration ``latest_checkpoint.txt`` names, or None.
        latest_verified: after a kill: whether that iteration verifies (None: no pointer yet).
        latest_problem: why it does not verify.
        partial: after a kill: ``iter_*`` directories without a manifest (never adopted).
        save_state: after a kill inside a save: what that iteration looked like on disk.
        error: what went wrong (timeout, crash), or None.
    """

    run: str
    index: int
    command: list[str]
    resumed_step: int | None = None
    resume_source: str | None = None
    trigger: str | None = None
    kill_delay_ms: float = 0.0
    killed: bool = False
    last_line: str | None = None
    killed_in_save: int | None = None
    last_step: int | None = None
    saves: list[list[float]] = attrs.field(factory=list)
    done_step: int | None = None
    returncode: int | None = None
    wall_s: float = 0.0
    latest: int | None = None
    latest_verified: bool | None = None
    latest_problem: str | None = None
    partial: list[str] = attrs.field(factory=list)
    save_state: str | None = None
    error: str | None = None


@attrs.define
class DemoReport:
    """Everything ``statecraft demo`` did and found (the ``--json`` ``data``)."""

    out: str
    seed: int
    steps: int
    save_every: int
    kills_requested: int
    launches: list[Launch] = attrs.field(factory=list)
    reference_checkpoints: list[int] = attrs.field(factory=list)
    killed_checkpoints: list[int] = attrs.field(factory=list)
    final_iteration: int | None = None
    compared: list[int] = attrs.field(factory=list)
    differences: list[str] = attrs.field(factory=list)
    save_seconds: dict[str, float] = attrs.field(factory=dict)
    final_bytes: int = 0
    wall_s: float = 0.0
    errors: list[str] = attrs.field(factory=list)

    @property
    def kills(self) -> list[Launch]:
        return [launch for launch in self.launches if launch.killed]

    @property
    def bit_exact(self) -> bool:
        return (
            not self.errors
            and not self.differences
            and self.final_iteration == self.steps
            and self.reference_checkpoints == self.killed_checkpoints
        )

    def to_dict(self) -> dict[str, Any]:
        data = attrs.asdict(self)
        data["bit_exact"] = self.bit_exact
        data["kills_performed"] = len(self.kills)
        return data


# ------------------------------------------------------------------------------ launches
def checkpoints_dir(root: str | os.PathLike[str]) -> Path | None:
    """The demo run's ``checkpoints/`` under output root ``root`` (newest attempt), or None."""
    job = DEMO_RUN.job_dir(Path(root))
    attempts = sorted(p for p in job.glob("[0-9]" * 14) if p.is_dir()) if job.is_dir() else []
    return attempts[-1] / "checkpoints" if attempts else None


def committed_iterations(directory: Path | None) -> list[int]:
    """Iterations under ``directory`` that hold a manifest, oldest first."""
    if directory is None or not directory.is_dir():
        return []
    store = LocalStore(str(directory.resolve()))
    return sorted(
        i for i in list_iterations(store) if (directory / f"iter_{i:09d}" / MANIFEST_NAME).is_file()
    )


def _inspect_after_kill(launch: Launch, directory: Path | None) -> None:
    """Record what a kill left: the latest pointer, whether it verifies, partial iterations."""
    if launch.last_line and launch.last_line.startswith("save-begin"):
        launch.killed_in_save = int(launch.last_line.split()[1])
    if directory is None or not directory.is_dir():
        return
    if launch.killed_in_save is not None:
        launch.save_state = _save_state(directory, launch.killed_in_save)
    launch.partial = sorted(
        p.name for p in directory.glob("iter_*") if p.is_dir() and not (p / MANIFEST_NAME).is_file()
    )
    pointer = directory / LATEST_POINTER
    if not pointer.is_file():
        return
    try:
        launch.latest = parse_latest(pointer.read_bytes())
        verify_checkpoint(LocalStore(str(directory.resolve())), launch.latest)
        launch.latest_verified = True
    except (ValueError, StatecraftError) as exc:
        launch.latest_verified = False
        launch.latest_problem = str(exc)


def _choose_trigger(
    rng: random.Random,
    kind: str,
    resumed: int,
    steps: int,
    save_every: int,
    *,
    max_delay_s: float = SAVE_KILL_DELAY_S,
) -> tuple[str, float] | None:
    """A line of this launch to kill on -- ``step <n>`` or ``save-begin <n>`` after
    ``resumed`` -- and, for a save, a delay in seconds up to ``max_delay_s`` (a point inside
    the save). None when nothing is left to kill."""
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
    seen = [seconds for launch in launches for _, seconds in list(launch.saves)]
    if not seen:
        return _FIRST_SAVE_DELAY_S
    return min(SAVE_KILL_DELAY_S, 0.8 * statistics.median(seen))


def _save_state(directory: Path, iteration: int) -> str:
    """What a save interrupted by a kill left on disk for ``iteration``."""
    where = directory / f"iter_{iteration:09d}"
    if not where.is_dir():
        return "nothing on disk yet (killed before its directory was created)"
    names = sorted(p.name for p in where.iterdir())
    if MANIFEST_NAME in names:
        try:
            latest = parse_latest((directory / LATEST_POINTER).read_bytes())
        except (OSError, ValueError):
            latest = None
        pointer = "advanced" if latest == iteration else "not yet advanced"
        return f"committed (manifest written), {LATEST_POINTER} {pointer}"
    files = [n for n in names if n.endswith(".pt")]
    temps = [n for n in names if ".tmp-" in n]
    text = f"partial: {', '.join(files) or 'no file'} complete"
    if temps:
        text += f", {len(temps)} half-written temporary file(s)"
    return text + ", no manifest (never adopted)"


_PROGRESS = re.compile(r"^(resumed|step|save-begin|save-end|done) (\d+)(?: (.+))?$")


def _parse_progress(line: str) -> tuple[str, int, str] | None:
    """``(kind, number, rest)`` of a progress line of ``demo_train``, None for other output."""
    match = _PROGRESS.match(line)
    if match is None:
        return None
    kind, number, rest = match.group(1), int(match.group(2)), match.group(3) or ""
    if kind == "save-end":
        try:
            float(rest)
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
            launch.saves.append([number, float(rest)])
        elif kind == "done":
            launch.done_step = number
        if launch.trigger is not None and line == launch.trigger and not launch.killed:
            if launch.kill_delay_ms:
                time.sleep(launch.kill_delay_ms / 1000)
            os.kill(proc.pid, signal.SIGKILL)  # the process this launch started, by its pid
            launch.killed = True
            # keep reading: lines the process wrote before it died show where the kill landed


# ---------------------------------------------------------------------------------- demo
def run_kill_demo(
    out: str | os.PathLike[str],
    *,
    steps: int,
    save_every: int,
    kills: int,
    seed: int,
    on_kill: Callable[[Launch, Path | None], None] | None = None,
    timeout_s: float = LAUNCH_TIMEOUT_S,
) -> DemoReport:
    """Run the reference and the killed run under ``out`` and compare their checkpoints.

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
    report = DemoReport(str(root), seed, steps, save_every, kills)
    rng = random.Random(seed)
    kinds = [rng.choice(("step", "save-begin")) for _ in range(kills)]
    if kills >= 2 and len(set(kinds)) == 1:  # show both kinds of kill
        flip = rng.randrange(kills)
        kinds[flip] = "step" if kinds[flip] == "save-begin" else "save-begin"
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
                    )
                )
            )
            _launch(
                launch, log_path=logs / f"killed-{index}.log", choose=choose, timeout_s=timeout_s
            )
            if launch.error or not launch.killed:
                break
            ckpt_dir = checkpoints_dir(root / "killed")
            _inspect_after_kill(launch, ckpt_dir)
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
        }
    report.wall_s = round(time.monotonic() - started, 2)
    return report


def _compare(report: DemoReport, root: Path) -> None:
    ref_dir = checkpoints_dir(root / "reference")
    run_dir = checkpoints_dir(root / "killed")
    report.reference_checkpoints = committed_iterations(ref_dir)
    report.killed_checkpoints = committed_iterations(run_dir)
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


# ------------------------------------------------------------------------------- output
def _short(source: str) -> str:
    """``<attempt>/checkpoints/iter_...`` of a resume source (the rest is the run's root)."""
    parts = source.split("/")
    return "/".join(parts[-3:]) if len(parts) > 3 else source


def _describe_launch(launch: Launch) -> str:
    start = (
        "fresh start"
        if launch.resume_source is None
        else f"resumed at step {launch.resumed_step} from {_short(launch.resume_source)}"
    )
    saved = (
        ", saved " + ", ".join(f"{int(i)} ({s * 1000:.0f} ms)" for i, s in launch.saves)
        if launch.saves
        else ""
    )
    text = f"  launch {launch.index}: {start}{saved}"
    if launch.error:
        return f"{text}\n    ERROR: {launch.error}"
    if not launch.killed:
        return f"{text}\n    completed: done {launch.done_step} ({launch.wall_s:.1f} s)"
    if launch.killed_in_save is not None:
        where = f"INSIDE the save of iter {launch.killed_in_save}"
    elif launch.last_line and launch.last_line.startswith("save-end"):
        where = f"just after the save of iter {launch.last_line.split()[1]} completed"
    elif launch.last_line and launch.last_line.startswith("done"):
        where = "after training finished, during the process exit"
    else:
        where = f"mid-training after step {launch.last_step}"
    delay = f" + {launch.kill_delay_ms:.0f} ms" if launch.kill_delay_ms else ""
    lines = [
        text,
        f"    SIGKILL on '{launch.trigger}'{delay} -> died {where} ({launch.wall_s:.1f} s)",
    ]
    if launch.save_state:
        lines.append(f"    iter {launch.killed_in_save} on disk: {launch.save_state}")
    if launch.latest is None:
        pointer = f"no {LATEST_POINTER} yet"
    else:
        state = (
            "verifies" if launch.latest_verified else f"DOES NOT VERIFY: {launch.latest_problem}"
        )
        pointer = f"{LATEST_POINTER} -> iter {launch.latest} ({state})"
    lines.append(f"    {pointer}")
    return "\n".join(lines)


def render(report: DemoReport) -> str:
    """The human-readable account of a demo."""
    lines = [
        f"statecraft demo: {report.steps} steps, save every {report.save_every}, "
        f"{report.kills_requested} SIGKILL(s), kill seed {report.seed}"
    ]
    for run in ("reference", "killed"):
        title = "uninterrupted" if run == "reference" else "killed and relaunched"
        lines.append(f"{run} run ({title}): {Path(report.out) / run}")
        lines += [_describe_launch(x) for x in report.launches if x.run == run]
    in_save = sum(1 for x in report.kills if x.killed_in_save is not None)
    lines.append(
        f"kills: {len(report.kills)} of {report.kills_requested} ({in_save} inside a save)"
    )
    lines.append(
        f"checkpoints: reference {report.reference_checkpoints}, "
        f"killed run {report.killed_checkpoints}; final iter {report.final_iteration} "
        f"({report.final_bytes / 1024:.0f} KiB)"
    )
    if report.save_seconds:
        s = report.save_seconds
        lines.append(
            f"save times: {s['count']} saves, min {s['min'] * 1000:.0f} ms, median "
            f"{s['median'] * 1000:.0f} ms, max {s['max'] * 1000:.0f} ms"
        )
    lines.append(
        f"compared bit-for-bit (model.pt, optim.pt, trainer.pt, data.pt): iterations "
        f"{report.compared}"
    )
    for line in report.differences[:20]:
        lines.append(f"  DIFFERS: {line}")
    if len(report.differences) > 20:
        lines.append(f"  ... and {len(report.differences) - 20} more")
    lines.append(f"bit-exact: {'yes' if report.bit_exact else 'no'}")
    lines.append(f"output root (kept): {report.out}   wall time: {report.wall_s:.1f} s")
    return "\n".join(lines)


def run_demo(args: argparse.Namespace) -> int:
    """The ``statecraft demo`` command: exit 0 when the resumed run is bit-exact, else 1."""
    bad = [
        f"--{name.replace('_', '-')} must be >= {low}, got {getattr(args, name)}"
        for name, low in (("steps", 1), ("save_every", 1), ("kills", 0))
        if getattr(args, name) < low
    ]
    if (
        args.out
        and Path(args.out).exists()
        and (not Path(args.out).is_dir() or any(Path(args.out).iterdir()))
    ):
        bad.append(
            f"--out {args.out} is not an empty directory; pass a new or empty one, or "
            "omit --out for a temporary directory"
        )
    if bad:
        return emit(
            "demo",
            as_json=args.json,
            exit_code=2,
            errors=[("invalid_argument", line) for line in bad],
        )
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    out = args.out or tempfile.mkdtemp(prefix="statecraft-demo-")
    report = run_kill_demo(
        out, steps=args.steps, save_every=args.save_every, kills=args.kills, seed=seed
    )
    errors = [("demo_failed", e) for e in report.errors]
    if not report.errors and not report.bit_exact:
        errors.append(
            (
                "not_bit_exact",
                f"{len(report.differences)} difference(s) between the "
                "killed run and the uninterrupted reference",
            )
        )
    return emit(
        "demo",
        as_json=args.json,
        data=report.to_dict(),
        errors=errors,
        exit_code=0 if report.bit_exact else 1,
        text=render(report),
    )
