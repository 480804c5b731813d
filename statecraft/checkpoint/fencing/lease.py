"""Single-writer fencing for one attempt: the writer lease.

One process at a time writes an attempt's checkpoints. The lease has two parts:

- **the record** ``<run>/.statecraft-writer.lease`` (the attempt's directory, beside
  ``checkpoints/``) (JSON, schema
  ``statecraft.writer-lease.v1``: owner id, host, PID, generation, created time). It is
  published by exclusive create through the :class:`~statecraft.storage.base.Store` (so the
  crash harness sees every byte), replaced atomically on a takeover with the generation
  bumped, and re-read by the save at every write and commit (:meth:`WriterLease.check`): a
  save whose lease was taken over refuses instead of writing.
- **the lock** ``fcntl.flock`` on ``<run>/.statecraft-writer.lock``, held on an open
  descriptor while the process lives (the kernel drops it when the process dies, however it
  dies). The lock file's content never matters, so it is opened with ``os`` directly, and only
  when the store has a real OS path (:meth:`Store.local_path`); one descriptor per lock path
  per process, so several ``Checkpointer`` objects of one process share it. On a simulated
  filesystem (no OS path) liveness comes from the ``alive`` predicate instead (default: the
  PID is running on this host). No method was added to the ``Filesystem`` protocol.

Acquisition (:func:`acquire_lease`): a lock held by another process, or (without a lock) a
record whose owner is alive, refuses with :class:`~statecraft.errors.WriterLeaseError`
naming the owner (host, PID, since when) and the fix. A record left by a dead owner (its lock
is free, or its PID is gone) is taken over with a log line and generation + 1.

Example::

    lease = acquire_lease(store)   # before the first write of the attempt
    lease.check()                  # before each publication: raises if taken over
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol, runtime_checkable

import attrs

from statecraft.checkpoint.fencing.background import BackgroundCall
from statecraft.checkpoint.fencing.lease_record import (
    LEASE_NAME,
    LEASE_SCHEMA,
    LeaseRecord,
    pid_alive,
    read_lease,
)
from statecraft.errors import StoreConflictError, WriterLeaseError
from statecraft.storage.base import Store

__all__ = [
    "LEASE_NAME",
    "LEASE_SCHEMA",
    "LOCK_NAME",
    "Lease",
    "LeaseRecord",
    "WriterLease",
    "acquire_lease",
    "launch_lock",
    "pid_alive",
]

log = logging.getLogger("statecraft.lease")

LOCK_NAME = ".statecraft-writer.lock"
LAUNCH_LOCK_NAME = ".statecraft-launch.lock"
_LAUNCH_WAIT_S = 30.0  # how long a launch waits for another launch to finish resolving
_RECORD_WAIT_S = 3.0  # how long a refused starter waits for the owner's record, to name it

_PROCESS_LOCKS: dict[str, int] = {}  # real lock path -> the descriptor holding the flock


@runtime_checkable
class Lease(Protocol):
    """What a save needs of a writer lease: :class:`WriterLease` (an attempt on local disk)
    and :class:`~statecraft.checkpoint.fencing.object_lease.ObjectStoreLease` (a direct object-store
    root) both satisfy it."""

    @property
    def where(self) -> str:
        """The lease record's location (for messages)."""
        ...

    def check(self) -> None:
        """Confirm the lease is still this process's, before a publication or commit.

        Raises:
            WriterLeaseError: another process owns it now (named); nothing must be written.
        """
        ...

    def release(self) -> None:
        """Give the lease up (a lease that is no longer ours is left alone)."""
        ...


def _lock(store: Store) -> bool | None:
    """Take this process's flock on the store's lock file: True when held (now or already),
    False when another process holds it, None when the store has no OS path."""
    real = store.local_path(LOCK_NAME)
    if real is None:
        return None
    if real in _PROCESS_LOCKS:
        return True
    fd = os.open(real, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    _PROCESS_LOCKS[real] = fd
    return True


def _unlock(store: Store) -> None:
    real = store.local_path(LOCK_NAME)
    fd = _PROCESS_LOCKS.pop(real, None) if real is not None else None
    if fd is not None:
        os.close(fd)  # closing the only descriptor releases the flock


def _refuse_live(where: str, other: LeaseRecord | None, how: str) -> WriterLeaseError:
    unknown = "another process (its lease record is missing or unreadable)"
    who = other.describe() if other is not None else unknown
    return WriterLeaseError(
        f"{where}: this attempt is being written by {who}, whose {how}. Two processes of one "
        "run must not write one attempt: stop the other process (or wait for it to finish), "
        "or start a separate attempt with resume=off",
        path=where,
        **(other.fields() if other is not None else {}),
    )


@attrs.define
class WriterLease:
    """This process's lease on one attempt (see the module doc).

    Attributes:
        store: the attempt's checkpoints store.
        record: what this process publishes (its owner id and generation).
        previous: the record it takes over (``None`` when the attempt had none).
        published: the record is in the store (done at the first save, by :meth:`check`).
    """

    store: Store
    record: LeaseRecord
    previous: LeaseRecord | None = None
    published: bool = False
    reason: str = ""
    _publishing: BackgroundCall | None = attrs.field(default=None, init=False, eq=False, repr=False)

    @property
    def where(self) -> str:
        return f"{self.store.describe()}/{LEASE_NAME}"

    def publish_in_background(self) -> None:
        """Start :meth:`publish` on a thread and return at once, so the record's writes and
        fsyncs overlap what the caller reads meanwhile (resume verifies its candidates).

        The record's own writes are :meth:`publish`'s, in its order. :meth:`publish` (the
        wait: it returns once the record is durable, raising the thread's error),
        :meth:`check` and :meth:`release` join the thread first; every write that depends on
        the lease is preceded by one of them, so none lands before the record is durable.
        Only for a store on the real filesystem (a simulated one's I/O is stepped by its
        harness, one thread at a time).
        """
        if self.published or self._publishing is not None:
            return
        self._publishing = BackgroundCall(self._publish_now, name="statecraft-lease-publish")

    def _settle(self) -> None:
        """Join a background publication; raise its error once (a later call publishes
        afresh, which finds the same conflict or succeeds)."""
        publishing, self._publishing = self._publishing, None
        if publishing is not None:
            publishing.join()

    def publish(self) -> None:
        """Write the record (exclusive create, or the takeover's atomic replace); once. After
        :meth:`publish_in_background`, wait for that publication instead.

        Raises:
            WriterLeaseError: someone else published a lease meanwhile (named).
            StoreError: the record could not be written durably.
        """
        self._settle()
        self._publish_now()

    def _publish_now(self) -> None:
        if self.published:
            return
        current = read_lease(self.store)
        if current is None:
            try:
                self.store.create_exclusive(LEASE_NAME, self.record.encode())
            except StoreConflictError:
                current = read_lease(self.store)
                raise self._stolen(current) from None
        elif self.previous is None or current != self.previous:
            raise self._stolen(current)
        else:
            log.warning(
                "taking over the writer lease of %s: %s (now generation %d)",
                self.previous.describe(),
                self.reason,
                self.record.generation,
            )
            self.store.write_atomic(LEASE_NAME, self.record.encode())
        self.published = True

    def _stolen(self, current: LeaseRecord | None) -> WriterLeaseError:
        if current is None:
            return WriterLeaseError(
                f"{self.where}: the writer lease of {self.record.describe()} is gone; another "
                "process may be writing this attempt. This save is refused and nothing "
                "committed was touched: restart the job (it takes the lease again)",
                path=self.where,
            )
        return WriterLeaseError(
            f"{self.where}: the writer lease was taken over by {current.describe()} "
            f"(this process holds generation {self.record.generation} as "
            f"{self.record.owner}). This save is refused and nothing committed was "
            "touched: stop one of the two processes of this run",
            path=self.where,
            **current.fields(),
        )

    def check(self) -> None:
        """Confirm the lease is ours, re-read from the store (publishing it at the first call:
        the attempt's first write).

        Raises:
            WriterLeaseError: the lease file is gone, does not parse, or names another
                owner or generation (another process took the attempt over).
        """
        self._settle()
        if not self.published:
            self._publish_now()
            return
        current = read_lease(self.store)
        if current != self.record:
            raise self._stolen(current)

    def release(self) -> None:
        """Give the lease up: remove the record if it is still ours, drop the lock."""
        try:
            self._settle()
        except Exception:  # a record that failed to publish is not ours to remove
            pass
        try:
            current = read_lease(self.store)
        except WriterLeaseError:
            current = None
        if self.published and current == self.record:
            self.store.delete(LEASE_NAME)
        _unlock(self.store)


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def acquire_lease(
    store: Store,  # rooted at the attempt's run directory
    *,
    alive: Callable[[LeaseRecord], bool] = pid_alive,
    now: Callable[[], str] = _now,
    pid: int | None = None,
    host: str | None = None,
) -> WriterLease:
    """Take the writer lease of the attempt in ``store`` at startup (before its first write).

    The lock is taken now; the record is written by :meth:`WriterLease.publish` (the facade
    calls it at once, so a second launch can name this owner; otherwise the first
    :meth:`WriterLease.check` of a save does).

    Args:
        alive: whether a recorded owner still runs (used when there is no OS lock).
        now, pid, host: the record's clock and identity (defaults: this process).

    Returns:
        the lease; the save calls :meth:`WriterLease.check` before each publication.

    Raises:
        WriterLeaseError: another live process owns the attempt (named, with the fix).
    """
    pid = os.getpid() if pid is None else pid
    host = socket.gethostname() if host is None else host
    where = f"{store.describe()}/{LEASE_NAME}"
    real = store.local_path(LOCK_NAME)
    held_before = real is not None and real in _PROCESS_LOCKS
    locked = _lock(store)
    try:
        existing = read_lease(store)
    except WriterLeaseError:
        if locked is False:
            raise _refuse_live(where, None, "lock is held") from None
        raise
    if locked is False:
        # The owner may have taken the lock a moment ago and not yet written its record.
        deadline = time.monotonic() + _RECORD_WAIT_S
        while existing is None and time.monotonic() < deadline:
            time.sleep(0.05)
            existing = read_lease(store)
        raise _refuse_live(where, existing, "lock is held")
    same_process = existing is not None and existing.host == host and existing.pid == pid
    if existing is not None and same_process and (held_before or locked is None):
        # Another Checkpointer of this very process holds it: one process, one writer (the
        # lock cannot tell two objects of one process apart), so the record is shared.
        log.debug("%s: sharing this process's writer lease %s", where, existing.describe())
        return WriterLease(store, existing, existing, published=True)
    if existing is not None and locked is None and alive(existing):
        raise _refuse_live(where, existing, "process is alive")
    generation = existing.generation + 1 if existing is not None else 1
    owner = f"{host}:{pid}:{uuid.uuid4().hex[:12]}"
    mine = LeaseRecord(LEASE_SCHEMA, owner, host, pid, generation, now())
    if existing is None:
        return WriterLease(store, mine)
    reason = "its lock is free" if locked else "its process is gone"
    log.warning(
        "%s: the writer lease of %s is stale (%s); this process takes it over at its first "
        "save (generation %d)",
        where,
        existing.describe(),
        reason,
        generation,
    )
    return WriterLease(store, mine, existing, reason=reason)


@contextmanager
def launch_lock(job_dir: str, *, wait_s: float = _LAUNCH_WAIT_S) -> Iterator[None]:
    """Serialize the startup of launches of one job: attempt resolution and the lease are
    taken while holding ``<job_dir>/.statecraft-launch.lock`` (``flock``; ``job_dir`` is
    ``<output_root>/<project>/<group>/<name>``, the directory holding the attempts).

    Without it, two launches of one job started at the same instant on a fresh output root
    would each mint their own attempt (sibling RUN_TS) and both train. With it the second
    launch resolves after the first has minted its attempt and taken its lease, so under
    ``resume=auto`` it adopts that attempt and is refused by the lease, naming the owner.
    The lock is held only for the resolution (milliseconds); the lock file's content never
    matters. ``job_dir`` must exist (the facade creates it durably first).

    Raises:
        WriterLeaseError: another launch held the lock for longer than ``wait_s`` seconds.
    """
    path = os.path.join(job_dir, LAUNCH_LOCK_NAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() > deadline:
                    raise WriterLeaseError(
                        f"{path}: another launch of this job has been resolving its attempt for "
                        f"over {wait_s:.0f} s (its launch lock is held); it is stuck or very "
                        "slow: stop it, or give this run another name or output_root",
                        path=path,
                    ) from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)  # releases the flock
