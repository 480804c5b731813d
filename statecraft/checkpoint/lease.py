"""Single-writer fencing for one attempt: the writer lease.

One process at a time writes an attempt's checkpoints. The lease has two parts:

- **the record** ``<checkpoints>/.statecraft-writer.lease`` (JSON, schema
  ``statecraft.writer-lease.v1``: owner id, host, PID, generation, created time). It is
  published by exclusive create through the :class:`~statecraft.storage.base.Store` (so the
  crash harness sees every byte), replaced atomically on a takeover with the generation
  bumped, and re-read by the save at every write and commit (:meth:`WriterLease.check`): a
  save whose lease was taken over refuses instead of writing.
- **the lock** ``fcntl.flock`` on ``<checkpoints>/.statecraft-writer.lock``, held on an open
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
import json
import logging
import os
import socket
import uuid
from collections.abc import Callable
from typing import BinaryIO

import attrs
import cattrs

from statecraft.errors import StoreConflictError, StoreError, WriterLeaseError
from statecraft.storage.base import AtomicWriter, FileRecord, Store
from statecraft.storage.filesystem import FileStat

__all__ = [
    "LEASE_NAME",
    "LEASE_SCHEMA",
    "LOCK_NAME",
    "FencedStore",
    "LeaseRecord",
    "WriterLease",
    "acquire_lease",
    "pid_alive",
]

log = logging.getLogger("statecraft.lease")

LEASE_NAME = ".statecraft-writer.lease"
LOCK_NAME = ".statecraft-writer.lock"
LEASE_SCHEMA = "statecraft.writer-lease.v1"
_MAX_LEASE_BYTES = 64 << 10

_converter = cattrs.Converter(forbid_extra_keys=True)
_PROCESS_LOCKS: dict[str, int] = {}  # real lock path -> the descriptor holding the flock


@attrs.frozen
class LeaseRecord:
    """Who owns the attempt: ``owner`` (unique per acquisition), ``host``, ``pid``,
    ``generation`` (1 at first, +1 at each takeover), ``created`` (ISO 8601, UTC)."""

    schema: str
    owner: str
    host: str
    pid: int
    generation: int
    created: str

    def encode(self) -> bytes:
        return (json.dumps(_converter.unstructure(self), sort_keys=True, indent=2) + "\n").encode()

    @classmethod
    def decode(cls, data: bytes, where: str) -> LeaseRecord:
        """Parse a lease file.

        Raises:
            WriterLeaseError: not JSON, another schema, or fields missing / of the wrong type.
        """
        try:
            raw = json.loads(data.decode("utf-8"))
            record = _converter.structure(raw, cls)
        except (ValueError, TypeError, KeyError, cattrs.BaseValidationError) as exc:
            raise WriterLeaseError(
                f"{where}: the writer lease does not parse ({type(exc).__name__}: {exc}); "
                "expected a statecraft.writer-lease.v1 record. Remove it only if no other "
                "process writes this attempt",
                path=where,
            ) from None
        if record.schema != LEASE_SCHEMA:
            raise WriterLeaseError(
                f"{where}: writer lease schema {record.schema!r}, expected {LEASE_SCHEMA!r}",
                path=where,
            )
        return record

    def describe(self) -> str:
        return (
            f"owner {self.owner} (host {self.host}, PID {self.pid}, generation "
            f"{self.generation}, since {self.created})"
        )

    def fields(self) -> dict[str, object]:
        return {
            "owner": self.owner,
            "host": self.host,
            "pid": self.pid,
            "generation": self.generation,
            "since": self.created,
        }


def pid_alive(record: LeaseRecord) -> bool:
    """True when ``record``'s PID runs on this host (another host's owner counts as alive:
    we cannot tell, so we fail closed)."""
    if record.host != socket.gethostname():
        return True
    try:
        os.kill(record.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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


def _read(store: Store) -> LeaseRecord | None:
    where = f"{store.describe()}/{LEASE_NAME}"
    stat = store.stat(LEASE_NAME)
    if stat is None:
        return None
    if stat.is_dir or stat.size > _MAX_LEASE_BYTES:
        raise WriterLeaseError(
            f"{where} is a directory or over {_MAX_LEASE_BYTES} bytes; expected a small "
            "statecraft.writer-lease.v1 record. Move it aside",
            path=where,
        )
    try:
        data = store.read_bytes(LEASE_NAME)
    except FileNotFoundError:
        return None
    return LeaseRecord.decode(data, where)


def _refuse_live(where: str, other: LeaseRecord | None, how: str) -> WriterLeaseError:
    who = other.describe() if other is not None else "another process (lease record unreadable)"
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
        record: what this process published (its owner id and generation).
    """

    store: Store
    record: LeaseRecord

    @property
    def where(self) -> str:
        return f"{self.store.describe()}/{LEASE_NAME}"

    def check(self) -> None:
        """Confirm the lease is still ours (re-read from the store).

        Raises:
            WriterLeaseError: the lease file is gone, does not parse, or names another
                owner or generation (another process took the attempt over).
        """
        current = _read(self.store)
        if current is None:
            raise WriterLeaseError(
                f"{self.where}: the writer lease of {self.record.describe()} is gone; another "
                "process may be writing this attempt. This save is refused and nothing "
                "committed was touched: restart the job (it takes the lease again)",
                path=self.where,
            )
        if current.owner != self.record.owner or current.generation != self.record.generation:
            raise WriterLeaseError(
                f"{self.where}: the writer lease was taken over by {current.describe()} "
                f"(this process held generation {self.record.generation} as "
                f"{self.record.owner}). This save is refused and nothing committed was "
                "touched: stop one of the two processes of this run",
                path=self.where,
                **current.fields(),
            )

    def release(self) -> None:
        """Give the lease up: remove the record if it is still ours, drop the lock."""
        try:
            current = _read(self.store)
        except WriterLeaseError:
            current = None
        if current is not None and current.owner == self.record.owner:
            self.store.delete(LEASE_NAME)
        _unlock(self.store)


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def acquire_lease(
    store: Store,
    *,
    alive: Callable[[LeaseRecord], bool] = pid_alive,
    now: Callable[[], str] = _now,
    pid: int | None = None,
    host: str | None = None,
) -> WriterLease:
    """Take the writer lease of the attempt in ``store`` before its first write.

    Args:
        alive: whether a recorded owner still runs (used when there is no OS lock).
        now, pid, host: the record's clock and identity (defaults: this process).

    Returns:
        the held lease; call :meth:`WriterLease.check` before each publication.

    Raises:
        WriterLeaseError: another live process owns the attempt (named, with the fix).
        StoreError: the lease file could not be written durably.
    """
    pid = os.getpid() if pid is None else pid
    host = socket.gethostname() if host is None else host
    where = f"{store.describe()}/{LEASE_NAME}"
    locked = _lock(store)
    try:
        existing = _read(store)
    except WriterLeaseError:
        if locked is False:
            raise _refuse_live(where, None, "lock is held") from None
        existing = None
        log.warning("%s does not parse; the lock is free, so it is replaced", where)
    if locked is False:
        raise _refuse_live(where, existing, "lock is held")

    def record(generation: int) -> LeaseRecord:
        owner = f"{host}:{pid}:{uuid.uuid4().hex[:12]}"
        return LeaseRecord(LEASE_SCHEMA, owner, host, pid, generation, now())

    if existing is None and store.stat(LEASE_NAME) is None:
        mine = record(1)
        try:
            store.create_exclusive(LEASE_NAME, mine.encode())
            return WriterLease(store, mine)
        except StoreConflictError:  # raced another starter (no OS lock): look again
            existing = _read(store)
    if existing is not None and locked is None:
        same_process = existing.host == host and existing.pid == pid
        if not same_process and alive(existing):
            raise _refuse_live(where, existing, "process is alive")
    generation = existing.generation + 1 if existing is not None else 1
    mine = record(generation)
    reason = "its lock is free" if locked else "its process is gone"
    if existing is not None and existing.host == host and existing.pid == pid:
        reason = "an earlier Checkpointer of this process"
    log.warning(
        "taking over the writer lease of %s: %s (now generation %d)",
        existing.describe() if existing is not None else "an unreadable record",
        reason,
        generation,
    )
    store.write_atomic(LEASE_NAME, mine.encode())
    return WriterLease(store, mine)


class _FencedWriter:
    """An atomic writer whose commit first passes the fence (else it aborts)."""

    def __init__(self, inner: AtomicWriter, fence: Callable[[str], None]) -> None:
        self._inner = inner
        self._fence = fence
        self.path = inner.path
        self.record: FileRecord | None = None

    def write(self, data: bytes | bytearray | memoryview) -> int:
        return self._inner.write(data)

    def flush(self) -> None:
        self._inner.flush()

    def commit(self) -> FileRecord:
        try:
            self._fence(self.path)
        except BaseException:
            self._inner.abort()
            raise
        self.record = self._inner.commit()
        return self.record

    def abort(self) -> None:
        self._inner.abort()

    def __enter__(self) -> _FencedWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()


class FencedStore:
    """A :class:`Store` whose every publication (and removal) first calls ``fence(path)``,
    which raises to refuse it; reads and everything else pass through unchanged. The save
    bindings wrap their store in one (the lease check and the no-manifest check), so the
    check runs as late as possible: after the bytes are written, before the rename."""

    def __init__(self, inner: Store, fence: Callable[[str], None]) -> None:
        self.inner = inner
        self.fence = fence

    def __repr__(self) -> str:
        return f"FencedStore({self.inner!r})"

    def __getattr__(self, name: str) -> object:  # store extras (sweep_temporaries...)
        return getattr(self.inner, name)

    def describe(self) -> str:
        return self.inner.describe()

    def open_atomic(self, path: str, *, exclusive: bool = False) -> AtomicWriter:
        return _FencedWriter(self.inner.open_atomic(path, exclusive=exclusive), self.fence)

    def write_atomic(self, path: str, data: bytes) -> FileRecord:
        with self.open_atomic(path) as writer:
            writer.write(data)
        return _committed(writer)

    def create_exclusive(self, path: str, data: bytes) -> FileRecord:
        with self.open_atomic(path, exclusive=True) as writer:
            writer.write(data)
        return _committed(writer)

    def read_bytes(self, path: str) -> bytes:
        return self.inner.read_bytes(path)

    def open_read(self, path: str) -> BinaryIO:
        return self.inner.open_read(path)

    def local_path(self, path: str) -> str | None:
        return self.inner.local_path(path)

    def stat(self, path: str) -> FileStat | None:
        return self.inner.stat(path)

    def list(self, path: str = "") -> list[str]:
        return self.inner.list(path)

    def make_dirs(self, path: str) -> None:
        self.inner.make_dirs(path)

    def make_durable(self, path: str) -> None:
        self.inner.make_durable(path)

    def delete(self, path: str) -> None:
        self.fence(path)
        self.inner.delete(path)

    def delete_tree(self, path: str) -> None:
        self.fence(path)
        self.inner.delete_tree(path)


def _committed(writer: AtomicWriter) -> FileRecord:
    if writer.record is None:  # pragma: no cover - commit always sets it
        raise StoreError(f"{writer.path}: the writer committed without a record")
    return writer.record
