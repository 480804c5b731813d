"""The background write slot of a trainer role: one in-flight write at a time, its two
completion signals, and an error that is always delivered.

Call order (the training thread; the facade drives it):

1. :meth:`WriteSlot.join` the role's previous write (its error, if any, is raised here, once);
2. snapshot the payloads (:mod:`statecraft.checkpoint.async_writes.staging`) and build a
   :class:`PendingSave`;
3. :meth:`WriteSlot.submit` the write job: ``staged`` is set (the live state may change) and
   the job is handed to the slot's writer thread ``statecraft-write-<role>`` (non-daemon,
   started at the first submit and kept between saves, so a save pays a queue put, not a
   thread start); the job sets ``durable`` itself (the write job's ``on_durable`` hook) when
   its save committed;
4. at the next save, at ``finalize()`` and at ``close()``: join again
   (:meth:`WriteSlots.join_all` for every role).

The writer thread ends when the slot is closed or garbage collected, and, at interpreter
exit, once the main thread has ended and no job is queued: a write in flight at exit is
finished first, as with a thread per write.

An exception raised by a job never vanishes: it is raised by the next :meth:`WriteSlot.join`
(or :meth:`PendingSave.wait`), with a note naming the write; one never collected is logged
at ERROR when the slot is closed or garbage collected.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs

from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.errors import CheckpointError

__all__ = ["PendingSave", "WriteSlot", "WriteSlots"]

log = logging.getLogger("statecraft")

#: How often an idle writer thread looks whether the main thread has ended (interpreter
#: exit); a submitted job wakes it at once.
_IDLE_POLL_S = 0.2

#: One job for a writer thread: the pending save and its body; ``None`` ends the thread.
_Job = tuple["PendingSave", Callable[[], Any]] | None


def _serve(jobs: queue.SimpleQueue[_Job]) -> None:
    """A writer thread's body: run the queued jobs in order until ``None`` is queued, or the
    main thread has ended and nothing is queued (interpreter exit). It holds only the queue,
    never the slot, so a dropped slot is collected and ends it."""
    main = threading.main_thread()
    while True:
        try:
            job = jobs.get(timeout=_IDLE_POLL_S)
        except queue.Empty:
            if not main.is_alive():
                return
            continue
        if job is None:
            return
        pending, body = job
        pending._run(body)
        del job, pending, body  # hold nothing of a finished write while idle


@attrs.define(eq=False)
class PendingSave:
    """A save handed to a background slot.

    Attributes:
        iteration: the iteration being written.
        location: where it lands (``.../checkpoints/iter_N``), for messages.
        role: the trainer role whose slot writes it.
        blocking_seconds: training-thread time of the save call (join + produce + copy +
            proof + hand-off), filled in by the caller before ``save()`` returns.
        staged: set once the payloads are copied; the live state may change.
        durable: set by the job when its save committed (the manifest and ``latest`` are
            durable); retention may still be running.
    """

    iteration: int
    location: str
    role: str = "trainer"
    blocking_seconds: float = 0.0
    staged: threading.Event = attrs.field(factory=threading.Event)
    durable: threading.Event = attrs.field(factory=threading.Event)
    _finished: threading.Event = attrs.field(factory=threading.Event, repr=False)
    _result: Any = attrs.field(default=None, repr=False)
    _error: BaseException | None = attrs.field(default=None, repr=False)
    _delivered: bool = attrs.field(default=False, repr=False)
    _started: float = attrs.field(factory=time.perf_counter, repr=False)
    finished_seconds: float | None = attrs.field(default=None)
    """Wall time from this object's creation to the job's end (``None`` while running)."""

    @property
    def done(self) -> bool:
        """The job finished (committed, failed, or retention ended)."""
        return self._finished.is_set()

    @property
    def report(self) -> Any:
        """The job's result (a ``SaveReport``) once it finished without error, else ``None``."""
        return self._result if self.done and self._error is None else None

    @property
    def error(self) -> BaseException | None:
        """The job's exception once it finished with one, else ``None``."""
        return self._error if self.done else None

    def describe(self) -> str:
        """``iter_000000004 (role trainer)``, for messages and notes."""
        return f"{iter_dirname(self.iteration)} (role {self.role})"

    def wait(self, timeout: float | None = None) -> Any:
        """Wait for the job and return its result (the ``SaveReport``).

        Raises:
            TimeoutError: the job did not finish within ``timeout`` seconds (it goes on).
            BaseException: the job's own exception, its original type, with the note
                ``raised by the background write of iter_N (role R)``; every call raises it,
                and a later :meth:`WriteSlot.join` does not raise it again.
        """
        if not self._finished.wait(timeout):
            raise TimeoutError(
                f"the background write of {self.describe()} did not finish within "
                f"{timeout} s; it is still running: wait again or join the slot"
            )
        if self._error is not None:
            self._delivered = True
            raise self._error
        return self._result

    def _run(self, job: Callable[[], Any]) -> None:
        """The thread body: run ``job``, keep its result or exception."""
        try:
            self._result = job()
        except BaseException as exc:
            note = f"raised by the background write of {self.describe()}"
            if note not in getattr(exc, "__notes__", ()):
                exc.add_note(note)
            self._error = exc
        finally:
            self.finished_seconds = time.perf_counter() - self._started
            self._finished.set()

    def _undelivered(self) -> BaseException | None:
        return self._error if self.done and not self._delivered else None


class WriteSlot:
    """One trainer role's background write slot: at most one write in flight.

    Example::

        slot = WriteSlot()
        slot.join()  # raises the previous write's error, once
        pending = slot.submit(PendingSave(iteration=4, location=loc), job)
        ...
        report = slot.join().report
    """

    def __init__(self, role: str = "trainer") -> None:
        self.role = role
        self._pending: PendingSave | None = None
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False

    def __repr__(self) -> str:
        held = self._pending.describe() if self._pending is not None else "idle"
        return f"WriteSlot(role={self.role!r}, {held})"

    @property
    def in_flight(self) -> PendingSave | None:
        """The write submitted and not yet joined (running or finished), or ``None``."""
        return self._pending

    def submit(self, pending: PendingSave, job: Callable[[], Any]) -> PendingSave:
        """Set ``pending.staged`` and queue ``job`` on the slot's writer thread (started here
        the first time, or again if it ended); return ``pending``.

        ``job`` takes no argument; it runs the write (save machine, then retention), calls
        ``pending.durable.set`` through the write job's ``on_durable`` hook when the save
        committed, and returns the report :meth:`PendingSave.wait` gives back.

        Raises:
            CheckpointError: a write of this role was submitted and not joined yet (callers
                join first: the staging buffers it reads are reused), or the slot is closed.
        """
        if self._closed:
            raise CheckpointError(
                f"the write slot of role {self.role!r} is closed; {pending.describe()} was not "
                "written. Open a new Checkpointer to save again."
            )
        if self._pending is not None:
            state = "still in flight" if not self._pending.done else "finished but not joined"
            raise CheckpointError(
                f"cannot start the background write of {pending.describe()}: the write of "
                f"{self._pending.describe()} is {state}; join the slot first "
                "(WriteSlot.join()), since its staging buffers are reused"
            )
        if pending.role != self.role:
            raise CheckpointError(
                f"{pending.describe()} was handed to the write slot of role {self.role!r}; "
                f"submit it to the slot of role {pending.role!r}"
            )
        pending.staged.set()
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=_serve, args=(self._jobs,), name=f"statecraft-write-{self.role}",
                daemon=False,
            )  # fmt: skip
            self._thread.start()
        self._pending = pending
        self._jobs.put((pending, job))
        return pending

    def _stop_thread(self) -> None:
        """End the writer thread after the queued jobs (returns once it has ended)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._jobs.put(None)
            if thread is not threading.current_thread():
                thread.join()

    def join(self) -> PendingSave | None:
        """Wait for the write in flight and return it (``None`` when there is none).

        Raises:
            BaseException: the job's exception (original type, with the note naming the
                write), exactly once: the slot is empty afterwards and a second join returns
                ``None``. An error already raised to the caller by ``pending.wait()`` is not
                raised again.
        """
        pending = self._pending
        if pending is None:
            return None
        pending._finished.wait()
        self._pending = None
        error = pending._undelivered()
        if error is not None:
            pending._delivered = True
            raise error
        return pending

    def close(self) -> None:
        """Wait for the write in flight and close the slot; an error nobody collected is
        logged at ERROR (never raised here: :meth:`join` first to get it). Idempotent."""
        self._closed = True
        pending = self._pending
        self._stop_thread()  # after the write in flight, which it runs first
        self._pending = None
        if pending is not None:
            _log_uncollected(pending, "closed")

    def __del__(self) -> None:
        jobs = getattr(self, "_jobs", None)
        if jobs is not None and getattr(self, "_thread", None) is not None:
            jobs.put(None)  # the writer thread ends after what is queued
        pending = getattr(self, "_pending", None)
        if pending is not None:
            if not pending.done:
                log.error(
                    "the write slot of role %r was dropped while %s was still being written; "
                    "its outcome will not be reported (join the slot before dropping it)",
                    self.role,
                    pending.describe(),
                )
                return
            _log_uncollected(pending, "garbage collected")


def _log_uncollected(pending: PendingSave, how: str) -> None:
    error = pending._undelivered()
    if error is None:
        return
    pending._delivered = True
    try:
        log.error(
            "the background write of %s failed and was never joined (the slot was %s): "
            "%s: %s; the previous checkpoint is intact",
            pending.describe(),
            how,
            type(error).__name__,
            error,
            exc_info=(type(error), error, error.__traceback__),
        )
    except Exception:  # logging torn down at interpreter exit
        pass


class WriteSlots:
    """The write slots of every trainer role, created on first use."""

    def __init__(self) -> None:
        self._slots: dict[str, WriteSlot] = {}

    def __repr__(self) -> str:
        return f"WriteSlots({sorted(self._slots)})"

    def slot(self, role: str = "trainer") -> WriteSlot:
        """The slot of ``role`` (created on first use)."""
        held = self._slots.get(role)
        if held is None:
            held = self._slots[role] = WriteSlot(role)
        return held

    def join_all(self) -> list[PendingSave]:
        """Join every role's slot; return the writes joined.

        Raises:
            BaseException: the first error met, after every slot was joined (the others'
                errors are logged at ERROR, each delivered once).
        """
        joined: list[PendingSave] = []
        first: BaseException | None = None
        for role in sorted(self._slots):
            try:
                pending = self._slots[role].join()
            except BaseException as exc:
                if first is None:
                    first = exc
                else:
                    log.error("background write of role %r also failed: %s", role, exc)
                continue
            if pending is not None:
                joined.append(pending)
        if first is not None:
            raise first
        return joined

    def close(self) -> None:
        """Close every slot (see :meth:`WriteSlot.close`)."""
        for role in sorted(self._slots):
            self._slots[role].close()
