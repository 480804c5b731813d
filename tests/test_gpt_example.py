"""Tests of ``examples/gpt/``: the character-level GPT trainer killed with SIGKILL at random
points (during startup, between steps, inside saves) and relaunched with the unchanged command
ends bit for bit where an uninterrupted run ends, and ``sample.py`` reads its checkpoint.

Every process writes only under ``tmp_path``.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import attrs
import pytest

from statecraft.checkpoint.kernel.layout import LATEST_POINTER
from statecraft.checkpoint.kernel.retention_records import WEIGHTS_ONLY_MARKER
from statecraft.cli.demo import compare_checkpoints

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "gpt"
MAX_ITERS = 30
SAVE_EVERY = 5
TINY = [
    "--max-iters", str(MAX_ITERS), "--save-every", str(SAVE_EVERY), "--eval-interval", "10",
    "--eval-iters", "2", "--batch-size", "8", "--grad-accum", "2", "--block-size", "32",
    "--n-layer", "2", "--n-head", "2", "--n-embd", "32", "--dropout", "0.1",
    "--warmup-iters", "5", "--threads", "1",
]  # fmt: skip
STEP_LINE = re.compile(r"^step (\d+): ")
LAUNCH_TIMEOUT_S = 120.0


def example_command(tmp_path: Path, script: str, *args: str) -> list[str]:
    """The command that runs ``examples/gpt/<script>`` with ``args``."""
    return [sys.executable, str(EXAMPLE / script), *args]


def training_text(path: Path) -> Path:
    """A small corpus made here: the source of a few standard-library modules."""
    import bisect
    import heapq
    import textwrap

    text = "".join(Path(m.__file__).read_text(encoding="utf-8") for m in (bisect, heapq, textwrap))
    path.write_text(text, encoding="utf-8")
    return path


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "TMPDIR": str(tmp_path), "PYTHONUNBUFFERED": "1"}


@attrs.define
class Launch:
    """One process of the killed run: its output lines and how it ended."""

    lines: list[str] = attrs.field(factory=list)
    stderr: str = ""
    returncode: int | None = None
    killed_at: str = ""


def run_to_end(
    command: list[str], tmp_path: Path, *, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` (in ``cwd``) to its end; it must succeed."""
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=LAUNCH_TIMEOUT_S,
        cwd=cwd,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def launch_and_kill(
    command: list[str], tmp_path: Path, *, cwd: Path, kill_line: str | None, delay_s: float
) -> Launch:
    """Run ``command``; SIGKILL it (by the pid started here) ``delay_s`` after it prints
    ``kill_line`` (``None``: ``delay_s`` after the start, i.e. during startup)."""
    launch = Launch()
    err = (tmp_path / "stderr.log").open("w+")
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=err, text=True, env=_env(tmp_path), cwd=cwd
    )
    deadline = time.monotonic() + LAUNCH_TIMEOUT_S
    watchdog = threading.Timer(LAUNCH_TIMEOUT_S, lambda: proc.poll() is None and proc.kill())
    watchdog.start()  # a hung process is killed (by its Popen), so the read below ends
    try:
        if kill_line is None:
            time.sleep(delay_s)
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                launch.killed_at = f"startup +{delay_s:.2f}s"
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip("\n")
            launch.lines.append(line)
            if line.startswith(kill_line or "\0") and not launch.killed_at:
                time.sleep(delay_s)
                os.kill(proc.pid, signal.SIGKILL)
                launch.killed_at = f"{line!r} +{delay_s * 1000:.0f}ms"
    finally:
        watchdog.cancel()
        launch.returncode = proc.wait()
        err.seek(0)
        launch.stderr = err.read()
        err.close()
    if launch.returncode != -signal.SIGKILL:
        launch.killed_at = ""  # it ended before the signal landed
    assert time.monotonic() < deadline, f"launch ran past {LAUNCH_TIMEOUT_S}s: {launch}"
    return launch


def newest_committed(root: Path) -> int:
    """The newest iteration under ``root`` that holds a manifest (0 when none): where a
    relaunch resumes."""
    done = [int(p.parent.name[5:]) for p in root.glob("*/*/*/*/checkpoints/iter_*/.post*")]
    return max(done, default=0)


def checkpoints_of(root: Path) -> Path:
    (found,) = root.glob("*/*/*/*/checkpoints")
    return found


def inside_save_evidence(ckpts: Path) -> list[str]:
    """What an interrupted save left: an iteration without a manifest, a temporary file, or a
    manifest newer than ``latest``."""
    seen = []
    iters = sorted(p for p in ckpts.glob("iter_*") if p.is_dir())
    for it in iters:
        if not (it / ".posttrain-manifest.json").exists():
            seen.append(f"{it.name} without a manifest")
        seen += [f"{it.name}/{t.name}" for t in it.iterdir() if ".tmp" in t.name]
    committed = [it.name for it in iters if (it / ".posttrain-manifest.json").exists()]
    latest = (
        (ckpts / LATEST_POINTER).read_text().strip() if (ckpts / LATEST_POINTER).exists() else ""
    )
    if committed and latest != committed[-1]:
        seen.append(f"{committed[-1]} committed, latest names {latest or 'nothing'}")
    return seen


def step_lines(lines: list[str]) -> list[tuple[int, str]]:
    """``(step, line)`` of each ``step N: loss X`` and ``step N: train loss X, val loss Y``."""
    return [(int(m.group(1)), line) for line in lines if (m := STEP_LINE.match(line))]


def keyed(lines: list[str]) -> dict[tuple[int, bool], str]:
    """The step lines by (step, is an eval line)."""
    return {(n, "train loss" in line): line for n, line in step_lines(lines)}


@pytest.mark.slow
def training_differences(ref: Path, got: Path) -> list[str]:
    """``compare_checkpoints`` without retention's state: retention runs after a save, so a
    launch that ended with nothing left to save keeps the optimizer of an older checkpoint the
    uninterrupted run had already pruned (or the other way round). Which iterations still hold
    ``optim.pt`` is retention's bookkeeping, not training state: an ``optim.pt`` present on one
    side only is accepted where the other side is weights-only (holds the marker)."""
    out = []
    for line in compare_checkpoints(ref, got):
        if line.startswith("optim.pt: only in "):
            holder = Path(line.removeprefix("optim.pt: only in "))
            other = got if holder == ref else ref
            if (other / WEIGHTS_ONLY_MARKER).exists():
                continue
        out.append(line)
    return out


class TestGptKilledAndRelaunched:
    def test_sigkilled_run_matches_the_uninterrupted_run_bit_for_bit(self, tmp_path: Path):
        """Killed at random points (startup, steps, inside saves) and relaunched unchanged,
        the run ends with the uninterrupted run's weights, optimizer, loop state and every
        loss line of the steps each launch trained."""
        text = training_text(tmp_path / "corpus.txt")
        # the same command in two directories: the stored config (``--out out``) is the same
        ref_dir, kill_dir = tmp_path / "ref", tmp_path / "killed"
        ref_dir.mkdir()
        kill_dir.mkdir()
        ref_root, kill_root = ref_dir / "out", kill_dir / "out"
        command = example_command(tmp_path, "train.py", "--data", str(text), "--out", "out", *TINY)
        ref = run_to_end(command, tmp_path, cwd=ref_dir)
        ref_lines = ref.stdout.splitlines()
        expected = keyed(ref_lines)
        assert len(expected) == len(step_lines(ref_lines)) == MAX_ITERS + MAX_ITERS // 10
        saves = [
            float(s)
            for s in re.findall(r"statecraft: saved iter \d+: .* in ([0-9.]+) s -> ", ref.stderr)
        ]
        save_s = max(saves) if saves else 0.05

        rng = random.Random(7)
        launches: list[Launch] = []
        inside_saves: set[str] = set()  # what kills inside saves left behind, for the log
        kinds = ["startup", "step", "save", "save", "step", "save"]
        while True:
            if len(launches) >= 14:
                pytest.fail(f"the run did not finish in 14 launches: {launches[-1]}")
            resumed = newest_committed(kill_root)
            kind = kinds[len(launches)] if len(launches) < len(kinds) else "none"
            saves = [n for n in range(SAVE_EVERY, MAX_ITERS + 1, SAVE_EVERY) if n > resumed]
            if kind == "startup":
                kill_line, delay = None, rng.uniform(0.5, 2.0)
            elif kind == "step" and resumed + 1 < MAX_ITERS:
                kill_line, delay = f"step {rng.randrange(resumed + 1, MAX_ITERS)}: loss", 0.0
            elif kind == "save" and saves:  # the step line is printed just before the save
                kill_line, delay = f"step {rng.choice(saves)}: loss", rng.uniform(0, save_s)
            else:
                kill_line, delay = "\0never", 0.0
            launch = launch_and_kill(
                command, tmp_path, cwd=kill_dir, kill_line=kill_line, delay_s=delay
            )
            launches.append(launch)
            if launch.killed_at:
                if list(kill_root.glob("*/*/*/*/checkpoints")):
                    inside_saves.update(inside_save_evidence(checkpoints_of(kill_root)))
                continue
            assert launch.returncode == 0, launch.stderr[-3000:]
            break

        # every loss line a launch printed is the uninterrupted run's line for that step,
        # and each launch continues from the step it resumed at, without gaps
        for launch in launches:
            got = step_lines(launch.lines)
            for key, line in keyed(launch.lines).items():
                assert line == expected[key], (launch.killed_at, line, expected[key])
            starts = [ln for ln in launch.lines if ln.startswith("start at step ")]
            if got:
                first = int(starts[0].split()[3].rstrip(":"))
                numbers = sorted({n for n, _ in got})
                assert numbers == list(range(first + 1, numbers[-1] + 1)), launch
        assert launches[-1].lines[-1] == ref_lines[-1]  # "done at step N; best val loss X"
        combined = {n for launch in launches for n, _ in step_lines(launch.lines)}
        assert combined == set(range(1, MAX_ITERS + 1))

        # every committed checkpoint of the killed run equals the uninterrupted run's, bit for
        # bit: weights, optimizer, trainer state (clocks, RNG, loop state), data.pt
        ref_ckpts, kill_ckpts = checkpoints_of(ref_root), checkpoints_of(kill_root)
        names = sorted(p.name for p in ref_ckpts.glob("iter_*"))
        assert names == [f"iter_{n:09d}" for n in range(SAVE_EVERY, MAX_ITERS + 1, SAVE_EVERY)]
        for name in names:
            assert training_differences(ref_ckpts / name, kill_ckpts / name) == [], name
        assert (kill_ckpts / LATEST_POINTER).read_text() == (ref_ckpts / LATEST_POINTER).read_text()
        killed = [launch.killed_at for launch in launches if launch.killed_at]
        assert len(killed) >= 4, killed
        print(f"{len(launches)} launches, kills: {killed}; left by kills: {sorted(inside_saves)}")

    def test_sample_reads_the_newest_checkpoint_without_writing(self, tmp_path: Path):
        """sample.py rebuilds the model from the loop state's model_args, loads the newest
        committed weights from the output root, prints text, and writes nothing."""
        text = training_text(tmp_path / "corpus.txt")
        root = tmp_path / "out"
        tiny = [*TINY]
        tiny[tiny.index("--max-iters") + 1] = "10"
        run_to_end(
            example_command(tmp_path, "train.py", "--data", str(text), "--out", str(root), *tiny),
            tmp_path,
        )
        before = sorted((str(p), p.stat().st_mtime_ns) for p in root.rglob("*"))
        done = run_to_end(
            example_command(
                tmp_path,
                "sample.py",
                "--out",
                str(root),
                "--max-new-tokens",
                "40",
                "--start",
                "def ",
            ),
            tmp_path,
        )
        first, sample = done.stdout.split("\n", 1)
        assert first.startswith("sampling ")
        assert first.endswith("iter_000000010 (step 10)")
        assert sample.startswith("def ")
        assert len(sample.split("\n---")[0]) == len("def ") + 40
        assert sorted((str(p), p.stat().st_mtime_ns) for p in root.rglob("*")) == before
