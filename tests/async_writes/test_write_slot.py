"""Tests of statecraft.checkpoint.async_writes.write_slot: one in-flight write per role, the staged
and
durable signals, and a background error raised at the next join exactly once (never lost)."""

from __future__ import annotations

import gc
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from statecraft.checkpoint.async_writes.staging import StagingBuffers
from statecraft.checkpoint.async_writes.write_slot import PendingSave, WriteSlot, WriteSlots
from statecraft.checkpoint.kernel.layout import LATEST_POINTER
from statecraft.checkpoint.kernel.machines import load_machine
from statecraft.checkpoint.kernel.plan import CHECKPOINT_PLAN
from statecraft.checkpoint.save.bindings import SaveContext
from statecraft.engine.crash import FaultKind, IoGate
from statecraft.errors import CheckpointError, DiskFullError
from statecraft.storage.filesystem import OsFilesystem
from statecraft.storage.local import LocalStore, is_temporary_name

NOTE = "raised by the background write of iter_000000004 (role trainer)"


def pending(iteration: int = 4, role: str = "trainer") -> PendingSave:
    return PendingSave(iteration=iteration, location=f"/ckpt/iter_{iteration}", role=role)


def failing(exc: BaseException) -> Callable[[], Any]:
    def job() -> Any:
        raise exc

    return job


class TestPendingSave:
    def test_staged_then_durable_then_done(self) -> None:
        """submit sets staged before returning; the job sets durable; wait returns its result."""
        slot = WriteSlot()
        gate = threading.Event()
        p = pending()

        def job() -> str:
            gate.wait(10)
            p.durable.set()
            return "report"

        assert slot.submit(p, job) is p
        assert p.staged.is_set()
        assert not p.durable.is_set()
        assert not p.done
        assert p.report is None
        assert slot.in_flight is p
        gate.set()
        assert p.wait(10) == "report"
        assert p.durable.is_set()
        assert p.done
        assert p.report == "report"
        assert p.error is None
        assert p.finished_seconds is not None
        assert slot.join() is p
        assert slot.in_flight is None

    def test_wait_timeout(self) -> None:
        """wait(timeout) on a running write raises TimeoutError naming it; the write goes on."""
        slot = WriteSlot()
        gate = threading.Event()
        p = slot.submit(pending(), lambda: gate.wait(10))
        with pytest.raises(TimeoutError) as info:
            p.wait(0.01)
        assert str(info.value) == (
            "the background write of iter_000000004 (role trainer) did not finish within 0.01 s; "
            "it is still running: wait again or join the slot"
        )
        gate.set()
        assert slot.join() is p
        assert p.report is True

    def test_thread_named_after_role_and_not_daemon(self) -> None:
        """The job runs on a non-daemon thread named statecraft-write-<role>, not the caller's."""
        seen: list[threading.Thread] = []
        slot = WriteSlot("critic")
        slot.submit(pending(role="critic"), lambda: seen.append(threading.current_thread()))
        slot.join()
        (thread,) = seen
        assert thread.name == "statecraft-write-critic"
        assert not thread.daemon
        assert thread is not threading.main_thread()


class TestErrors:
    def test_error_raised_at_next_join_once_with_note(self) -> None:
        """A job's exception is raised by the next join, its original type and object, with a
        note naming the write; a second join returns None."""
        slot = WriteSlot()
        boom = OSError(28, "No space left on device")
        p = slot.submit(pending(), failing(boom))
        with pytest.raises(OSError, match="No space left") as info:
            slot.join()
        assert info.value is boom
        assert info.value.__notes__ == [NOTE]
        assert p.error is boom
        assert p.report is None
        assert not p.durable.is_set()
        assert slot.join() is None
        assert slot.in_flight is None

    def test_wait_delivers_error_and_join_does_not_repeat(self) -> None:
        """pending.wait() raises the job's error (every call); the slot's join then returns the
        write without raising it a second time, and the note is added once."""
        slot = WriteSlot()
        boom = ValueError("bad payload")
        p = slot.submit(pending(), failing(boom))
        for _ in range(2):
            with pytest.raises(ValueError, match="bad payload"):
                p.wait(10)
        assert boom.__notes__ == [NOTE]
        assert slot.join() is p

    def test_submit_refused_while_in_flight(self) -> None:
        """A second submit before the first is joined raises CheckpointError naming both; the
        first write is unaffected."""
        slot = WriteSlot()
        gate = threading.Event()
        first = slot.submit(pending(4), lambda: gate.wait(10))
        second = pending(6)
        with pytest.raises(CheckpointError) as info:
            slot.submit(second, lambda: None)
        assert str(info.value) == (
            "cannot start the background write of iter_000000006 (role trainer): the write of "
            "iter_000000004 (role trainer) is still in flight; join the slot first "
            "(WriteSlot.join()), since its staging buffers are reused"
        )
        assert not second.staged.is_set()
        gate.set()
        first.wait(10)
        with pytest.raises(CheckpointError, match="is finished but not joined"):
            slot.submit(second, lambda: None)
        assert slot.join() is first
        assert slot.submit(second, lambda: 6).wait(10) == 6
        slot.join()

    def test_submit_refused_for_other_role_and_after_close(self) -> None:
        """A pending save of another role, or any submit after close, is refused."""
        slot = WriteSlot()
        with pytest.raises(CheckpointError) as info:
            slot.submit(pending(role="critic"), lambda: None)
        assert str(info.value) == (
            "iter_000000004 (role critic) was handed to the write slot of role 'trainer'; "
            "submit it to the slot of role 'critic'"
        )
        slot.close()
        with pytest.raises(CheckpointError, match="the write slot of role 'trainer' is closed"):
            slot.submit(pending(), lambda: None)

    def test_uncollected_error_logged_at_close(self, caplog: pytest.LogCaptureFixture) -> None:
        """An error never joined is logged at ERROR when the slot is closed (not raised)."""
        slot = WriteSlot()
        slot.submit(pending(), failing(RuntimeError("lost write")))
        with caplog.at_level(logging.ERROR, logger="statecraft"):
            slot.close()
        (record,) = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert record.getMessage() == (
            "the background write of iter_000000004 (role trainer) failed and was never joined "
            "(the slot was closed): RuntimeError: lost write; the previous checkpoint is intact"
        )
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="statecraft"):
            slot.close()
        assert not caplog.records

    def test_uncollected_error_logged_when_collected(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """An error never joined is logged at ERROR when the slot is garbage collected."""
        slot = WriteSlot()
        p = slot.submit(pending(), failing(RuntimeError("dropped")))
        p._finished.wait(10)
        with caplog.at_level(logging.ERROR, logger="statecraft"):
            del slot
            gc.collect()
        messages = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert any("(the slot was garbage collected): RuntimeError: dropped" in m for m in messages)

    def test_joined_error_not_logged(self, caplog: pytest.LogCaptureFixture) -> None:
        """An error raised at a join is not logged again at close."""
        slot = WriteSlot()
        slot.submit(pending(), failing(RuntimeError("seen")))
        with pytest.raises(RuntimeError):
            slot.join()
        with caplog.at_level(logging.ERROR, logger="statecraft"):
            slot.close()
        assert not caplog.records


class TestWriteSlots:
    def test_join_all_joins_every_role_then_raises_first(self) -> None:
        """join_all waits for every role and raises the first error after joining them all."""
        slots = WriteSlots()
        assert slots.slot("trainer") is slots.slot("trainer")
        gate = threading.Event()
        ok = slots.slot("trainer").submit(pending(4), lambda: gate.wait(10))
        slots.slot("critic").submit(pending(4, "critic"), failing(KeyError("critic broke")))
        gate.set()
        with pytest.raises(KeyError) as info:
            slots.join_all()
        assert info.value.__notes__ == [
            "raised by the background write of iter_000000004 (role critic)"
        ]
        assert ok.done
        assert slots.slot("trainer").in_flight is None
        assert slots.slot("critic").in_flight is None
        assert slots.join_all() == []

    def test_join_all_returns_the_writes(self) -> None:
        """join_all returns every joined write."""
        slots = WriteSlots()
        a = slots.slot("a").submit(pending(role="a"), lambda: 1)
        b = slots.slot("b").submit(pending(role="b"), lambda: 2)
        assert slots.join_all() == [a, b]
        slots.close()


# --------------------------------------------------------------------- a real save job
class Objects:
    """Live objects whose model.pt is ~66 KB and optim.pt ~132 KB."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Linear(128, 128)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=0.01)
        self.step()

    def step(self) -> None:
        self.model(torch.randn(2, 128)).sum().backward()
        self.optimizer.step()
        self.optimizer.zero_grad()


def save_job(
    store: LocalStore, staging: StagingBuffers, objects: Objects, p: PendingSave
) -> Callable[[], int]:
    """Snapshot the objects now; return the job that runs the save machine on the snapshot."""
    produced = {
        "model.pt": objects.model.state_dict(),
        "optim.pt": objects.optimizer.state_dict(),
        "trainer.pt": {"step": p.iteration},
    }
    snap = staging.snapshot(produced)
    plan = CHECKPOINT_PLAN.save_plan(p.iteration, with_data=False)
    machine = load_machine("save")

    def job() -> int:
        ctx = SaveContext(
            store=store,
            plan=plan,
            payloads={name: (lambda v=v: v) for name, v in snap.payloads.items()},
        )
        machine.recover(ctx).raise_for_failure()
        p.durable.set()
        return p.iteration

    return job


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def fill(mount: Path) -> Path:
    """Fill the filesystem at ``mount`` to the last byte."""
    filler = mount / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    for chunk in (64 << 10, 4096, 1):
        try:
            while True:
                os.write(fd, bytes(chunk))
        except OSError:
            pass
    os.close(fd)
    return filler


def assert_disk_full_at_join(
    slot: WriteSlot, p: PendingSave, root: Path, before: dict[str, bytes]
) -> None:
    with pytest.raises(DiskFullError) as info:
        slot.join()
    assert str(info.value).startswith("disk full: writing ")
    assert "/iter_000000004/model.pt" in info.value.path
    assert info.value.__notes__ == [NOTE]
    assert not p.durable.is_set()
    assert tree(root) == before
    assert (root / LATEST_POINTER).read_bytes() == before[LATEST_POINTER]
    assert not [q for q in root.rglob("*") if is_temporary_name(q.name)]
    assert slot.join() is None


class TestDiskFullJob:
    def test_real_full_filesystem_raised_at_join(self, tmpfs: Path) -> None:
        """A background save into a full tmpfs raises DiskFullError at the next join, with the
        note; iter 2 and latest are byte-identical; after freeing space the next write commits."""
        root = tmpfs / "checkpoints"
        root.mkdir()
        store = LocalStore(str(root))
        staging, objects, slot = StagingBuffers(), Objects(), WriteSlot()
        first = pending(2)
        slot.submit(first, save_job(store, staging, objects, first))
        assert slot.join() is first
        assert first.durable.is_set()
        before = tree(root)
        filler = fill(tmpfs)
        objects.step()
        p = pending(4)
        slot.submit(p, save_job(store, staging, objects, p))
        assert_disk_full_at_join(slot, p, root, before)
        filler.unlink()
        again = pending(4)
        slot.submit(again, save_job(store, staging, objects, again))
        assert slot.join() is again
        assert (root / LATEST_POINTER).read_bytes() != before[LATEST_POINTER]
        assert (root / "iter_000000004" / "model.pt").is_file()

    def test_injected_enospc_raised_at_join(self, tmp_path: Path) -> None:
        """An ENOSPC injected into model.pt's first write on the real disk reaches the next
        join as DiskFullError with the note; committed bytes are unchanged."""
        root = tmp_path / "checkpoints"
        root.mkdir()
        gate = IoGate()
        store = LocalStore(str(root), fs=OsFilesystem(gate=gate))
        staging, objects, slot = StagingBuffers(), Objects(), WriteSlot()
        first = pending(2)
        slot.submit(first, save_job(store, staging, objects, first))
        slot.join()
        before = tree(root)
        objects.step()
        p = pending(4)
        job = save_job(store, staging, objects, p)
        start = gate.count
        opened = False

        # arm the fault on the first data write after model.pt's temporary file is opened
        original = gate.before_io

        def before_io(op: str, target: str) -> Any:
            nonlocal opened
            if op == "open_write" and ".model.pt" in target:
                opened = True
            elif op == "write" and opened and not gate.faults:
                gate.faults = {gate.count: FaultKind.NO_SPACE}
            return original(op, target)

        gate.before_io = before_io  # type: ignore[method-assign]
        slot.submit(p, job)
        assert_disk_full_at_join(slot, p, root, before)
        assert gate.count > start
