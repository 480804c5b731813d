"""Special files where a checkpoint file should be: FIFOs, symlinks (to ``/dev/zero``, to a
good copy, in a loop), directories, and a manifest nested too deeply to parse.

On the real filesystem, each case is run through ``resume=auto`` (the newest iteration is
passed over, its reason naming the problem), an explicit resume of it (a clear statecraft
error, nothing loaded) and ``statecraft inspect`` / ``inspect --verify`` in a subprocess with
a timeout (exit 0, the damaged candidate reported). Nothing may hang, read without bound, or
change a committed byte.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from checkpoint_runs import RUN, committed_run, open_checkpointer

from statecraft.checkpoint.kernel.layout import LATEST_POINTER, MANIFEST_NAME, iter_dirname
from statecraft.errors import SpecialFileError, StatecraftError
from statecraft.storage.filesystem import MAX_CONTROL_BYTES, OsFilesystem

CLI_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Committed iterations 2, 4, 6 and 8 of a run that tracks a data source."""
    return committed_run(tmp_path_factory.mktemp("pristine"), data=True)


@pytest.fixture
def out(pristine: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "out"
    shutil.copytree(pristine, copy)
    return copy


@pytest.fixture(autouse=True)
def no_hang() -> Iterator[None]:
    """Fail a test that blocks (a FIFO read) instead of hanging the suite."""

    def expire(*_: Any) -> None:
        raise TimeoutError("blocked for 60 s: a special file was read as if it were regular")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(60)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def checkpoints(out: Path) -> Path:
    attempt = min(p for p in RUN.job_dir(out).iterdir() if p.is_dir())
    return attempt / "checkpoints"


def iter_path(out: Path, iteration: int) -> Path:
    return checkpoints(out) / iter_dirname(iteration)


_COORDINATION_FILES = (".statecraft-writer.", ".statecraft-launch.")


def snapshot(root: Path) -> dict[str, tuple[str, bytes]]:
    """Every entry under ``root`` without following links or opening special files: its kind
    and its bytes (regular files) or target (links)."""
    found: dict[str, tuple[str, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if name.startswith(_COORDINATION_FILES):
                continue  # the writer lease and locks are rewritten on takeover by design
            st = path.lstat()
            rel = str(path.relative_to(root))
            if path.is_symlink():
                found[rel] = ("link", os.readlink(path).encode())
            elif path.is_dir():
                found[rel] = ("dir", b"")
            elif path.is_file():
                found[rel] = ("file", path.read_bytes())
            else:
                found[rel] = (f"mode {st.st_mode:o}", b"")
    return found


def replace(path: Path, make: Callable[[Path], None]) -> None:
    path.unlink()
    make(path)


def fifo(path: Path) -> None:
    os.mkfifo(path)


def to_dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def loop(path: Path) -> None:
    path.symlink_to(path.name)


def directory(path: Path) -> None:
    path.mkdir()


def to_good_copy(path: Path) -> None:
    """A symlink to a byte-identical copy (same size and digest): refused all the same."""
    copy = path.parent.parent / f"copy-of-{path.name}"
    shutil.copyfile(path.with_name(f"{path.name}.keep"), copy)
    path.symlink_to(copy)


def nested_json(path: Path) -> None:
    path.write_bytes(b"[" * 200_000 + b"]" * 200_000)


# (file in iter 8, how it is replaced, words the reason must contain)
ITERATION_CASES = {
    "manifest-fifo": (MANIFEST_NAME, fifo, "is a FIFO (named pipe), not a regular file"),
    "manifest-dev-zero": (MANIFEST_NAME, to_dev_zero, "is a symbolic link"),
    "manifest-loop": (MANIFEST_NAME, loop, "is a symbolic link"),
    "manifest-directory": (MANIFEST_NAME, directory, "is a directory, not a regular file"),
    "manifest-nested": (MANIFEST_NAME, nested_json, "nested too deeply to parse"),
    "model-fifo": ("model.pt", fifo, "model.pt: is a fifo, not a regular file"),
    "model-symlink-to-copy": (
        "model.pt",
        to_good_copy,
        "model.pt: is a symlink, not a regular file",
    ),
    "trainer-dev-zero": ("trainer.pt", to_dev_zero, "trainer.pt: is a symlink, not a regular file"),
    "trainer-symlink-to-copy": (
        "trainer.pt",
        to_good_copy,
        "trainer.pt: is a symlink, not a regular file",
    ),
}


def damage(out: Path, case: str) -> None:
    name, make, _ = ITERATION_CASES[case]
    path = iter_path(out, 8) / name
    if make is to_good_copy:
        shutil.copyfile(path, path.with_name(f"{name}.keep"))
    replace(path, make)
    if make is to_good_copy:
        path.with_name(f"{name}.keep").unlink()


def run_inspect(out: Path, *flags: str) -> dict[str, Any]:
    """``statecraft inspect <job dir> --json [flags]`` in a real subprocess with a timeout.

    The subprocess has its own bound (CLI_TIMEOUT_S); the in-process ``no_hang`` alarm is
    paused while it runs (a start-up slowed by a loaded machine is not an in-process hang)
    and re-armed with what was left of it after."""
    left = signal.alarm(0)
    try:
        done = _inspect_subprocess(out, *flags)
    finally:
        if left:
            signal.alarm(left)
    assert done.returncode == 0, done.stderr + done.stdout
    envelope: dict[str, Any] = json.loads(done.stdout)
    return envelope["data"]


def _inspect_subprocess(out: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from statecraft.cli import main; sys.exit(main())",
            "inspect",
            str(RUN.job_dir(out)),
            "--json",
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


def iteration_report(data: dict[str, Any], name: str) -> dict[str, Any]:
    (attempt,) = [a for a in data["attempts"] if a["checkpoints"]]
    (found,) = [i for i in attempt["checkpoints"]["iterations"] if i["name"] == name]
    return found


class TestDamagedIteration:
    @pytest.mark.parametrize("case", sorted(ITERATION_CASES))
    def test_auto_resume_passes_it_over(self, out: Path, case: str) -> None:
        """resume=auto passes over iter 8 with a reason naming the special file, resumes 6."""
        damage(out, case)
        before = snapshot(out)
        ckpt, _ = open_checkpointer(out)
        result = ckpt.resume()
        assert result.step == 6
        (passed,) = result.passed_over
        assert passed.name == "iter_000000008"
        assert ITERATION_CASES[case][2] in passed.reason
        assert snapshot(out) == before

    @pytest.mark.parametrize("case", sorted(ITERATION_CASES))
    def test_explicit_resume_refuses_it(self, out: Path, case: str) -> None:
        """An explicit resume of iter 8 fails with a statecraft error naming the problem and
        leaves the live objects as they were."""
        damage(out, case)
        before = snapshot(out)
        ckpt, objects = open_checkpointer(out, f"resume={iter_path(out, 8)}")
        weights = objects.model.weight.detach().clone()
        with pytest.raises(StatecraftError) as info:
            ckpt.resume()
        message = str(info.value)
        assert "iter_000000008" in message
        assert ITERATION_CASES[case][2] in message
        assert torch.equal(objects.model.weight, weights)
        assert snapshot(out) == before

    @pytest.mark.parametrize("case", sorted(ITERATION_CASES))
    @pytest.mark.parametrize("flags", [(), ("--verify",)], ids=["plain", "verify"])
    def test_inspect_reports_it(self, out: Path, case: str, flags: tuple[str, ...]) -> None:
        """inspect (and --verify) exits 0 without hanging and reports iter 8 corrupt with the
        reason; auto would pick iter 6."""
        damage(out, case)
        before = snapshot(out)
        data = run_inspect(out, *flags)
        found = iteration_report(data, "iter_000000008")
        assert found["state"] == "corrupt"
        assert ITERATION_CASES[case][2] in found["reason"]
        assert data["resume_auto"]["pick"].endswith("iter_000000006")
        assert snapshot(out) == before


LATEST_CASES = {
    "fifo": (fifo, "is a FIFO (named pipe)"),
    "dev-zero": (to_dev_zero, "is a symbolic link"),
    "loop": (loop, "is a symbolic link"),
    "directory": (directory, "is a directory"),
}


class TestDamagedLatestPointer:
    @pytest.mark.parametrize("case", sorted(LATEST_CASES))
    def test_auto_resume_ignores_it(self, out: Path, case: str) -> None:
        """A special file as latest_checkpoint.txt is ignored with a note naming it; auto still
        adopts iter 8 by its verified manifest."""
        make, words = LATEST_CASES[case]
        replace(checkpoints(out) / LATEST_POINTER, make)
        before = snapshot(out)
        ckpt, _ = open_checkpointer(out)
        result = ckpt.resume()
        assert result.step == 8
        assert any(words in note and LATEST_POINTER in note for note in result.notes)
        assert snapshot(out) == before

    @pytest.mark.parametrize("case", sorted(LATEST_CASES))
    def test_inspect_reports_it(self, out: Path, case: str) -> None:
        """inspect --verify exits 0 and reports the pointer as unreadable, naming the kind."""
        make, words = LATEST_CASES[case]
        replace(checkpoints(out) / LATEST_POINTER, make)
        before = snapshot(out)
        data = run_inspect(out, "--verify")
        assert words in json.dumps(data)
        assert data["resume_auto"]["pick"].endswith("iter_000000008")
        assert snapshot(out) == before


class TestOsFilesystemReads:
    def test_oversized_control_file_is_refused(self, tmp_path: Path) -> None:
        """A control file over MAX_CONTROL_BYTES is refused before it is read."""
        path = tmp_path / "manifest.json"
        with open(path, "wb") as f:
            f.truncate(MAX_CONTROL_BYTES + 1)
        with pytest.raises(SpecialFileError) as info:
            OsFilesystem().read(str(path))
        assert info.value.kind == "too large"
        assert f"{MAX_CONTROL_BYTES:,} a control file may" in str(info.value)

    def test_open_read_refuses_a_fifo_without_blocking(self, tmp_path: Path) -> None:
        """open_read of a FIFO raises SpecialFileError at once (no writer needed)."""
        os.mkfifo(tmp_path / "pipe")
        with pytest.raises(SpecialFileError, match="is a FIFO"):
            OsFilesystem().open_read(str(tmp_path / "pipe"))

    def test_stat_of_a_symlink_loop_is_not_a_raw_eloop(self, tmp_path: Path) -> None:
        """stat of a symlink loop reports a file (which read then refuses), not OSError."""
        loop(tmp_path / "latest")
        stat = OsFilesystem().stat(str(tmp_path / "latest"))
        assert stat is not None
        assert stat.kind == "symlink"
        with pytest.raises(SpecialFileError, match="symbolic link"):
            OsFilesystem().read(str(tmp_path / "latest"))


class TestConsolidatedRead:
    def test_symlink_is_never_mapped(self, tmp_path: Path) -> None:
        """ConsolidatedWriter.read refuses a symlink to a loadable file before torch.load."""
        from statecraft.errors import CheckpointCorruptError
        from statecraft.storage.local import LocalStore
        from statecraft.writers.consolidated import ConsolidatedWriter

        store = LocalStore(tmp_path)
        ConsolidatedWriter().write(store, "real.pt", {"w": torch.ones(3)})
        (tmp_path / "model.pt").symlink_to(tmp_path / "real.pt")
        with pytest.raises(CheckpointCorruptError) as info:
            ConsolidatedWriter().read(store, "model.pt")
        assert "model.pt: is a symlink where a torch.save file should be" in str(info.value)
        assert (tmp_path / "model.pt").is_symlink()
