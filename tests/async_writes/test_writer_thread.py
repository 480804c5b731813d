"""Tests of the write slot's persistent writer thread
(statecraft.checkpoint.async_writes.write_slot): one thread per slot, kept between saves, that
ends when the slot is closed or collected, and lets the interpreter exit once its write is done."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from statecraft.checkpoint.async_writes.write_slot import PendingSave, WriteSlot


def pending(iteration: int, role: str = "trainer") -> PendingSave:
    return PendingSave(iteration=iteration, location=f"/ckpt/iter_{iteration}", role=role)


def _writer_threads(role: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"statecraft-write-{role}"]


def _gone(role: str, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while _writer_threads(role) and time.monotonic() < deadline:
        time.sleep(0.01)
    return not _writer_threads(role)


class TestWriterThread:
    def test_one_thread_serves_every_save(self) -> None:
        """Three saves of one slot run on one and the same writer thread, in order."""
        seen: list[tuple[int, threading.Thread]] = []
        slot = WriteSlot("reuse")
        for iteration in (1, 2, 3):
            slot.submit(
                pending(iteration, "reuse"),
                lambda i=iteration: seen.append((i, threading.current_thread())),
            )
            slot.join()
        assert [i for i, _ in seen] == [1, 2, 3]
        assert len({id(t) for _, t in seen}) == 1
        assert seen[0][1] is not threading.current_thread()
        slot.close()

    def test_close_ends_the_thread_after_the_write(self) -> None:
        """close() lets the write in flight finish (its result kept), then ends the thread."""
        gate = threading.Event()
        slot = WriteSlot("closing")
        p = slot.submit(pending(5, "closing"), lambda: gate.wait(10) and "written")
        assert len(_writer_threads("closing")) == 1
        threading.Timer(0.05, gate.set).start()
        slot.close()
        assert p.done
        assert p.report == "written"
        assert _gone("closing")

    def test_collected_slot_ends_its_thread(self) -> None:
        """A slot dropped after its write was joined is collected and its thread ends."""
        slot = WriteSlot("dropped")
        slot.submit(pending(6, "dropped"), lambda: None)
        slot.join()
        assert len(_writer_threads("dropped")) == 1
        del slot
        gc.collect()
        assert _gone("dropped")

    def test_thread_restarted_if_it_ended(self) -> None:
        """A slot whose thread has ended (the main thread's exit path) starts a new one at
        the next submit instead of queueing a job nobody runs."""
        slot = WriteSlot("restart")
        slot.submit(pending(7, "restart"), lambda: 7)
        slot.join()
        slot._stop_thread()  # what an ended thread looks like to the slot
        assert _gone("restart")
        p = slot.submit(pending(8, "restart"), lambda: 8)
        assert slot.join() is p
        assert p.report == 8
        slot.close()


class TestInterpreterExit:
    def test_exit_without_close_finishes_the_write_then_exits(self, tmp_path: Path) -> None:
        """A script that submits a slow write and returns without join or close still writes
        (the thread is not a daemon) and then exits (the idle thread does not hold it)."""
        marker = tmp_path / "written"
        script = textwrap.dedent(
            f"""
            import time
            from statecraft.checkpoint.async_writes.write_slot import PendingSave, WriteSlot
            slot = WriteSlot()
            def job():
                time.sleep(0.5)
                open({str(marker)!r}, "w").write("done")
            slot.submit(PendingSave(iteration=1, location="/x"), job)
            """
        )
        proc = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        assert marker.read_text() == "done"
