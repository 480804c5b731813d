"""The write job (``machines/write_job.toml``): the save machine, then retention only once the
save is durable; its report, its failure states and the order, on a real filesystem."""

from __future__ import annotations

import logging
import tomllib
from pathlib import Path

import pytest

from statecraft.checkpoint.kernel.layout import LATEST_POINTER, format_latest
from statecraft.checkpoint.kernel.machines import load_machine, machine_bindings
from statecraft.checkpoint.kernel.retention_records import INVALIDATED_MARKER
from statecraft.checkpoint.retention.policies import LatestN
from statecraft.checkpoint.retention.run import RetentionPlan
from statecraft.checkpoint.save.write_job_bindings import (
    WriteJobContext,
    WriteJobReport,
    run_write_job,
)
from statecraft.engine import Machine, parse_table
from statecraft.engine.crash import FaultKind, IoGate
from statecraft.errors import CheckpointCorruptError, CheckpointError, RetentionError
from statecraft.proofs.save.scenarios import save_context
from statecraft.resources import machine_path
from statecraft.storage.filesystem import OsFilesystem
from statecraft.storage.local import LocalStore

KEEP_ONE = RetentionPlan(optimizer=LatestN(1), model=LatestN(1))


def committed_bytes(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes)."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def job(
    store: LocalStore,
    iteration: int,
    *,
    retention: RetentionPlan | None = KEEP_ONE,
    on_durable=None,
    payloads=None,
) -> WriteJobContext:
    save = save_context(store, iteration, with_data=False, salt=1)
    if payloads is not None:
        save.payloads = payloads
    return WriteJobContext(
        save=save,
        retention=retention,
        save_machine=load_machine("save"),
        retention_machine=load_machine("retention"),
        on_durable=on_durable,
    )


def saved(store: LocalStore, iteration: int) -> None:
    run_write_job(job(store, iteration, retention=None), load_machine("write_job"))


def swapped_table() -> Machine:
    """The write job table with retention ordered before the save (shipped bindings)."""
    data = tomllib.loads(machine_path("write_job").read_text())
    for t in data["transitions"]:
        if t["do"] == "save_checkpoint":
            t["do"] = "apply_retention"
        elif t["do"] == "apply_retention":
            t["do"] = "save_checkpoint"
    table = parse_table(data, source="retention-first write job table")
    return Machine(table, machine_bindings("write_job"))


class TestWriteJob:
    def test_save_then_retention_report(self, tmp_path: Path) -> None:
        """A job commits iter_4, reports the save's run and retention's report, and retention
        (keep_model_last=1) deleted iter_2 only after iter_4 was durable."""
        store = LocalStore(tmp_path)
        saved(store, 2)
        seen: list[tuple[bool, bool]] = []

        def on_durable() -> None:
            seen.append(
                (
                    (tmp_path / "iter_000000004/.posttrain-manifest.json").is_file(),
                    (tmp_path / "iter_000000002/.posttrain-manifest.json").is_file(),
                )
            )

        report = run_write_job(job(store, 4, on_durable=on_durable), load_machine("write_job"))
        assert isinstance(report, WriteJobReport)
        assert report.iteration == 4
        assert report.save.final_state == "committed"
        assert [e for e, _ in report.effects] == [
            "save_checkpoint",
            "skip_upload",
            "apply_retention",
            "skip_collect",
        ]
        assert report.retention is not None
        assert report.retention.deleted == (2,)
        assert report.bytes_written == sum(
            (tmp_path / "iter_000000004" / f).stat().st_size
            for f in ("model.pt", "optim.pt", "trainer.pt")
        )
        assert seen == [(True, True)]  # durable fired once, before retention removed iter_2
        assert not (tmp_path / "iter_000000002").exists()
        assert (tmp_path / "latest_checkpoint.txt").read_text() == "iter_000000004\n"

    def test_no_plan_skips_retention(self, tmp_path: Path) -> None:
        """retention=None takes the skip_retention branch: nothing but the save is touched."""
        store = LocalStore(tmp_path)
        saved(store, 2)
        before = committed_bytes(tmp_path)
        calls: list[int] = []
        report = run_write_job(
            job(store, 4, retention=None, on_durable=lambda: calls.append(1)),
            load_machine("write_job"),
        )
        assert [e for e, _ in report.effects] == [
            "save_checkpoint",
            "skip_upload",
            "skip_retention",
            "skip_collect",
        ]
        assert report.retention is None
        assert report.retention_seconds == 0.0
        assert calls == [1]
        after = committed_bytes(tmp_path)
        assert {k: v for k, v in after.items() if k.startswith("iter_000000002")} == {
            k: v for k, v in before.items() if k.startswith("iter_000000002")
        }

    def test_failed_save_raises_its_error_and_retention_never_runs(self, tmp_path: Path) -> None:
        """A payload that cannot be produced fails the save (its own error), on_durable is not
        called, retention does not run: every committed byte and latest are unchanged."""
        store = LocalStore(tmp_path)
        saved(store, 2)
        before = committed_bytes(tmp_path)

        def broken() -> object:
            raise RuntimeError("optimizer state_dict() failed")

        payloads = dict(save_context(store, 4, with_data=False, salt=1).payloads)
        payloads["optim.pt"] = broken
        calls: list[int] = []
        ctx = job(store, 4, payloads=payloads, on_durable=lambda: calls.append(1))
        with pytest.raises(RuntimeError, match="optimizer state_dict"):
            run_write_job(ctx, load_machine("write_job"))
        assert ctx.save_result is not None
        assert ctx.save_result.final_state == "aborted"
        assert ctx.retention_report is None
        assert calls == []
        assert not ctx.durable
        assert committed_bytes(tmp_path) == before

    def test_retention_failure_after_durable_save(self, tmp_path: Path) -> None:
        """An I/O error at retention's first operation ends the job in retention_failed: the
        RetentionError is raised, iter_4 is committed and named by latest, iter_2 untouched."""
        probe = tmp_path / "probe"
        saved(LocalStore(probe), 2)
        gate = IoGate()
        run_write_job(
            job(LocalStore(probe, fs=OsFilesystem(gate=gate)), 4), load_machine("write_job")
        )
        first = next(r.index for r in gate.log if "iter_000000002" in r.target)
        out = tmp_path / "out"
        saved(LocalStore(out), 2)
        before = committed_bytes(out)
        faulty = LocalStore(out, fs=OsFilesystem(gate=IoGate(faults={first: FaultKind.IO_ERROR})))
        ctx = job(faulty, 4)
        machine = load_machine("write_job")
        with pytest.raises(RetentionError, match="iter_000000004 is committed and durable") as e:
            run_write_job(ctx, machine)
        assert "iter_000000002" in str(e.value)
        assert ctx.durable
        # The first retention operation failed: iter_2 is untouched, byte for byte.
        assert {
            k: v for k, v in committed_bytes(out).items() if k.startswith("iter_000000002")
        } == {k: v for k, v in before.items() if k.startswith("iter_000000002")}
        assert (out / "latest_checkpoint.txt").read_text() == "iter_000000004\n"
        saved_bytes = {
            k: v for k, v in committed_bytes(out).items() if k.startswith("iter_000000004")
        }
        assert sorted(saved_bytes) == [
            f"iter_000000004/{n}"
            for n in (".posttrain-manifest.json", "model.pt", "optim.pt", "trainer.pt")
        ]
        # The next pass finishes what the failed one left.
        run_write_job(job(LocalStore(out), 4), machine)
        assert sorted(p.name for p in out.iterdir() if p.name.startswith("iter_")) == [
            "iter_000000004"
        ]

    def test_on_durable_error_is_logged_and_the_job_goes_on(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A hook that raises is logged at ERROR with the iteration; the save stays durable and
        retention still runs."""
        store = LocalStore(tmp_path)
        saved(store, 2)

        def hook() -> None:
            raise ValueError("hook bug")

        with caplog.at_level(logging.ERROR, logger="statecraft.write_job"):
            report = run_write_job(job(store, 4, on_durable=hook), load_machine("write_job"))
        assert report.retention is not None
        assert report.retention.deleted == (2,)
        assert "on_durable hook of the write job of" in caplog.text
        assert "iter_000000004" in caplog.text
        assert "hook bug" in caplog.text

    def test_retention_before_the_save_is_refused(self, tmp_path: Path) -> None:
        """A table that orders retention first is refused by apply_retention itself (the save
        is not durable in this job): nothing is pruned, committed bytes unchanged."""
        store = LocalStore(tmp_path)
        saved(store, 2)
        before = committed_bytes(tmp_path)
        with pytest.raises(CheckpointError, match="retention was about to run before the save"):
            run_write_job(job(store, 4), swapped_table())
        assert committed_bytes(tmp_path) == before

    def test_observe_then_recover_reconciles_before_retention(self, tmp_path: Path) -> None:
        """A committed iter_4 observes durable, and recover still runs the save machine first
        (its reconcile path makes the commit durable) before retention."""
        store = LocalStore(tmp_path)
        saved(store, 2)
        saved(store, 4)
        machine = load_machine("write_job")
        ctx = job(store, 4)
        assert machine.observe(ctx) == "durable"
        assert machine.observe(job(store, 6)) == "pending"
        result = machine.recover(ctx)
        assert result.final_state == "retained"
        assert ctx.save_result is not None
        assert [e.effect for e in ctx.save_result.trace] == [
            "reconcile_committed",
            "advance_latest",
        ]
        assert not (tmp_path / "iter_000000002").exists()
        assert not list(tmp_path.rglob(INVALIDATED_MARKER))


class TestDamagedCommitFoundByARetriedSave:
    def test_a_damaged_commit_is_refused_and_retention_removes_nothing(
        self, tmp_path: Path
    ) -> None:
        """A save that finds iter_4 committed (a resumed run reaching a step whose newer
        checkpoint resume passed over as damaged) verifies it at level digest before the pointer
        moves: when iter_4's bytes do not match its manifest (same size), the save refuses with
        CheckpointCorruptError naming the file, retention never runs, and iter_2, the last good
        checkpoint, keeps every byte (its optimizer included)."""
        store = LocalStore(tmp_path)
        saved(store, 2)
        saved(store, 4)
        model = tmp_path / "iter_000000004" / "model.pt"
        data = bytearray(model.read_bytes())
        data[-100] ^= 0xFF  # same size: only the digest tells
        model.write_bytes(bytes(data))
        before = committed_bytes(tmp_path / "iter_000000002")
        with pytest.raises(CheckpointCorruptError) as caught:
            run_write_job(job(store, 4), load_machine("write_job"))
        message = str(caught.value)
        assert "iter_000000004/model.pt: digest" in message
        assert "found committed by this retried save, which leaves latest as it was" in message
        assert "move it aside and resume from an older one" in message
        assert committed_bytes(tmp_path / "iter_000000002") == before
        assert (tmp_path / "iter_000000002" / "optim.pt").exists()

    def test_latest_is_not_moved_onto_a_damaged_commit(self, tmp_path: Path) -> None:
        """With latest still naming iter_2 (the pointer write of iter_4 was lost), the retried
        save of iter_4 over damaged bytes refuses and latest keeps naming iter_2."""
        store = LocalStore(tmp_path)
        saved(store, 2)
        saved(store, 4)
        (tmp_path / LATEST_POINTER).write_bytes(format_latest(2))
        model = tmp_path / "iter_000000004" / "model.pt"
        data = bytearray(model.read_bytes())
        data[-100] ^= 0xFF
        model.write_bytes(bytes(data))
        with pytest.raises(CheckpointCorruptError, match="leaves latest as it was"):
            run_write_job(job(store, 4, retention=None), load_machine("write_job"))
        assert (tmp_path / LATEST_POINTER).read_bytes() == format_latest(2)

    def test_a_retried_save_of_an_intact_commit_still_runs_retention(self, tmp_path: Path) -> None:
        """The same retried save over an intact iter_4 verifies it and prunes iter_2 as the
        plan says (keep_model_last=1): the check does not switch retention off."""
        store = LocalStore(tmp_path)
        saved(store, 2)
        saved(store, 4)
        report = run_write_job(job(store, 4), load_machine("write_job"))
        assert report.retention is not None
        assert report.retention.deleted == (2,)
        assert not (tmp_path / "iter_000000002").exists()
