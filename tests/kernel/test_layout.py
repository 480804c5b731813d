"""Layout and run attempts: iteration names, the latest pointer format, RUN_TS resolution."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from statecraft.checkpoint.kernel.layout import (
    RunIdentity,
    format_latest,
    iter_dirname,
    list_attempts,
    parse_iter_dirname,
    parse_latest,
    resolve_run_attempt,
)
from statecraft.errors import ConfigError

RUN = RunIdentity("proj", "group", "name")
NOON = dt.datetime(2026, 11, 30, 12, 0, 0)


def clock(*stamps: dt.datetime):
    values = iter(stamps)
    return lambda: next(values)


class TestNames:
    def test_iter_dirname_round_trip(self) -> None:
        """iter_<9 digits> names round-trip and other names are not iterations."""
        assert iter_dirname(100) == "iter_000000100"
        assert parse_iter_dirname("iter_000000100") == 100
        for name in ("iter_100", "iter_0000001000", "latest_checkpoint.txt", "iter_00000010x"):
            assert parse_iter_dirname(name) is None

    @pytest.mark.parametrize("bad", [-1, 10**9, 1.0, True, "5"])
    def test_iter_dirname_rejects(self, bad) -> None:
        """Negative, too large, or non-int iterations are refused with the value named."""
        with pytest.raises(ValueError, match="iteration must be an int"):
            iter_dirname(bad)

    def test_latest_pointer_format(self) -> None:
        """The pointer is one line naming the iteration; anything else is refused."""
        assert format_latest(7) == b"iter_000000007\n"
        assert parse_latest(b"iter_000000007\n") == 7
        assert parse_latest(b"iter_000000007") == 7
        for bad in (b"", b"garbage\n", b"iter_7\n", b"iter_000000007\niter_000000008\n", b"\xff"):
            with pytest.raises(ValueError, match=r"expected one line|not ASCII"):
                parse_latest(bad)

    def test_run_identity_validates_parts(self) -> None:
        """Run identity parts must be plain names; every bad part is listed."""
        with pytest.raises(ConfigError) as info:
            RunIdentity("", "a/b", "ok")
        assert {i.path for i in info.value.issues} == {"run.project", "run.group"}


class TestResolveRunAttempt:
    def test_first_launch_mints(self, tmp_path: Path) -> None:
        """resume=auto with no attempt mints one named by the launch time."""
        attempt = resolve_run_attempt(tmp_path, RUN, resume="auto", now=clock(NOON))
        assert attempt.run_ts == "20261130120000"
        assert attempt.minted
        assert attempt.checkpoints_dir == tmp_path / "proj/group/name/20261130120000/checkpoints"
        assert attempt.run_dir.is_dir()

    def test_auto_adopts_the_newest_attempt(self, tmp_path: Path) -> None:
        """A relaunch with resume=auto reuses the newest attempt (the RUN_TS of the run)."""
        resolve_run_attempt(tmp_path, RUN, resume="auto", now=clock(NOON))
        later = NOON + dt.timedelta(hours=1)
        resolve_run_attempt(tmp_path, RUN, resume="off", now=clock(later))
        again = resolve_run_attempt(tmp_path, RUN, resume="auto", now=clock(NOON))
        assert again.run_ts == "20261130130000"
        assert not again.minted

    def test_off_mints_a_sibling_even_in_the_same_second(self, tmp_path: Path) -> None:
        """resume=off never reuses an attempt; a clash in the same second takes the next one."""
        first = resolve_run_attempt(tmp_path, RUN, resume="off", now=clock(NOON))
        second = resolve_run_attempt(tmp_path, RUN, resume="off", now=clock(NOON))
        assert (first.run_ts, second.run_ts) == ("20261130120000", "20261130120001")
        assert list_attempts(tmp_path / "proj/group/name") == [first.run_ts, second.run_ts]

    def test_pinned_run_ts(self, tmp_path: Path) -> None:
        """A pinned run_ts is used as is; a malformed one is refused."""
        attempt = resolve_run_attempt(tmp_path, RUN, resume="auto", run_ts="20250101000000")
        assert attempt.run_ts == "20250101000000"
        with pytest.raises(ConfigError, match="run_ts"):
            resolve_run_attempt(tmp_path, RUN, resume="auto", run_ts="20251301000000")

    def test_legacy_flat_layout_is_kept(self, tmp_path: Path) -> None:
        """A job whose <name>/checkpoints/ exists keeps the flat layout."""
        (tmp_path / "proj/group/name/checkpoints").mkdir(parents=True)
        attempt = resolve_run_attempt(tmp_path, RUN, resume="auto")
        assert attempt.legacy
        assert attempt.checkpoints_dir == tmp_path / "proj/group/name/checkpoints"

    def test_explicit_path_continues_in_a_new_sibling(self, tmp_path: Path) -> None:
        """An explicit resume path writes into a fresh sibling attempt, never into the source."""
        resolve_run_attempt(tmp_path, RUN, resume="auto", now=clock(NOON))
        attempt = resolve_run_attempt(
            tmp_path, RUN, resume="/some/iter_000000010", now=clock(NOON + dt.timedelta(minutes=5))
        )
        assert attempt.minted
        assert attempt.run_ts == "20261130120500"
        assert "new sibling attempt" in attempt.reason


class TestAttemptsThroughTheFilesystem:
    """Attempt directories are listed and created through the Filesystem seam, so the crash
    harness and fault injection cover them."""

    def test_minting_goes_through_the_simulated_filesystem(self) -> None:
        """A minted attempt exists only in the SimFilesystem handed in, made durable by an
        fsync of each created directory's parent."""
        from statecraft.engine.crash import IoGate
        from statecraft.storage.simfs import SimFilesystem

        gate = IoGate()
        fs = SimFilesystem(gate=gate)
        attempt = resolve_run_attempt("/out", RUN, resume="auto", now=clock(NOON), filesystem=fs)
        assert attempt.minted
        assert attempt.run_ts == "20261130120000"
        assert not Path("/out").exists()
        stat = fs.stat(str(attempt.run_dir))
        assert stat is not None
        assert stat.is_dir
        ops = [(r.op, r.target) for r in gate.log]
        assert ("mkdir", str(attempt.run_dir)) in ops
        assert ops[-1] == ("fsync_dir", str(attempt.run_dir.parent))
        assert list_attempts(attempt.run_dir.parent, filesystem=fs) == ["20261130120000"]
        again = resolve_run_attempt("/out", RUN, resume="auto", filesystem=fs)
        assert (again.run_ts, again.minted) == ("20261130120000", False)

    def test_a_fault_while_minting_reaches_the_caller(self, tmp_path: Path) -> None:
        """An injected ENOSPC on the attempt's mkdir fails the resolution with that error."""
        from statecraft.engine.crash import FaultKind, IoGate
        from statecraft.storage.filesystem import OsFilesystem

        gate = IoGate(faults={0: FaultKind.NO_SPACE})
        with pytest.raises(OSError, match="injected no_space"):
            resolve_run_attempt(
                tmp_path, RUN, resume="off", now=clock(NOON), filesystem=OsFilesystem(gate=gate)
            )
        assert gate.log[0].op == "mkdir"
        assert not RUN.job_dir(tmp_path).exists()

    def test_newest_attempt_is_the_one_rule(self, tmp_path: Path) -> None:
        """newest_attempt picks the newest valid RUN_TS and ignores other names."""
        from statecraft.checkpoint.kernel.layout import newest_attempt

        job = RUN.job_dir(tmp_path)
        for name in ("20261130120000", "20261130130000", "20261399000000", "notes"):
            (job / name).mkdir(parents=True)
        (job / "20261130140000").write_text("a file, not an attempt")
        assert newest_attempt(job) == "20261130130000"
        assert newest_attempt(tmp_path / "nothing") is None
