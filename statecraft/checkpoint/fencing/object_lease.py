"""Single-writer fencing on an object store: the lease of a direct checkpoints root.

A bucket has no locks and no process liveness, only per-key compare-and-swap
(``If-None-Match: *`` and ``If-Match: <etag>``). The lease is one small object,
``<root>/.statecraft-lease.json`` (:mod:`statecraft.checkpoint.fencing.object_lease_record`,
``statecraft.object-lease.v1``), and every write to it is conditional:

- **acquire** (:func:`acquire_object_lease`): create with ``If-None-Match``. When a lease is
  there: an unexpired, unreleased one of another live owner refuses with
  :class:`~statecraft.errors.WriterLeaseError` naming it (host, PID, since, expiry) and the
  fix; an expired (or released) one, or one whose owner ran on this host and whose PID is
  gone (:func:`owner_alive`), is taken over by ``If-Match`` on the etag just read, with
  ``generation + 1`` (logged at WARNING unless it was released); ``takeover=True``
  (``checkpoint_store.lease_takeover``, or ``statecraft lease takeover``) takes an unexpired
  one over the same way, deliberately (only after making sure its owner is dead).
- **renew** (:meth:`ObjectStoreLease.renew_if_due`): when more than half the ttl has passed
  since the last renewal, replace the record with ``If-Match`` on the etag this owner last
  wrote (at each save and ``step_end``). A 412 means someone took the lease over.
- **check** (:meth:`ObjectStoreLease.check`): before each commit point (the manifest create,
  the ``latest`` write), the lease object's etag must still be the one this owner wrote;
  otherwise the commit is refused, naming the new owner. A lease past its expiry is renewed
  first (the renewal's ``If-Match`` proves it is still ours).
- **pointers** (:func:`write_pointer_fenced`): ``latest_checkpoint.txt`` is written with
  ``If-Match`` on the etag this writer last saw (observed when the lease was taken, then the
  one it wrote), or ``If-None-Match`` when absent. So a stale writer that lost its lease
  between its check and its write can still never move ``latest``: its ``If-Match`` fails.

Time comes from an injected ``clock`` (unix seconds; default :func:`time.time`); expiry is
judged by the clock of the process that looks, so hosts' clocks must agree to well within
the ttl (NTP). Nothing here sleeps.

Example::

    lease = acquire_object_lease(root.store, ttl_s=600, takeover=False)
    lease.renew_if_due()                       # at each save and step_end
    lease.check()                              # before the manifest create
    write_pointer_fenced(root.store, lease, "latest_checkpoint.txt", format_latest(6))
    lease.release()                            # at finalize/close
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable

import attrs

from statecraft.checkpoint.fencing.object_lease_record import (
    OBJECT_LEASE_NAME,
    OBJECT_LEASE_SCHEMA,
    ObjectLeaseRecord,
    decode_object_lease,
    iso_utc,
    parse_iso_utc,
)
from statecraft.checkpoint.kernel.layout import LATEST_POINTER
from statecraft.errors import ObjectRequestError, PreconditionFailed, WriterLeaseError
from statecraft.storage.objects import ObjectStore

__all__ = [
    "OBJECT_LEASE_NAME",
    "ObjectStoreLease",
    "acquire_object_lease",
    "owner_alive",
    "read_object_lease",
    "take_over_seen_lease",
    "write_pointer_fenced",
]

log = logging.getLogger("statecraft.lease")

Clock = Callable[[], float]
_RACE_ATTEMPTS = 3  # how often acquisition re-reads a lease that changed under it


def read_object_lease(store: ObjectStore) -> tuple[ObjectLeaseRecord, str] | None:
    """The lease of the root ``store`` and the etag of that version; ``None`` when absent.

    The etag is read first (HEAD), then the body (GET): the body is that version or a newer
    one, so a decision on the body guarded by ``If-Match`` on the etag is never applied to a
    version it did not see.

    Raises:
        WriterLeaseError: the object is not a valid ``statecraft.object-lease.v1`` record.
        ObjectRequestError: the bucket did not answer.
    """
    etag = store.stat_etag(OBJECT_LEASE_NAME)
    if etag is None:
        return None
    try:
        data = store.read_bytes(OBJECT_LEASE_NAME)
    except FileNotFoundError:
        return None
    return decode_object_lease(data, _where(store)), etag


def _where(store: ObjectStore) -> str:
    return f"{store.describe().rstrip('/')}/{OBJECT_LEASE_NAME}"


def _root(store: ObjectStore) -> str:
    return store.describe().rstrip("/")


def _taken_by(store: ObjectStore, mine: ObjectLeaseRecord, what: str) -> WriterLeaseError:
    """The refusal of a commit (or renewal) whose lease is no longer ours."""
    where = _where(store)
    try:
        found = read_object_lease(store)
    except WriterLeaseError as exc:
        return WriterLeaseError(
            f"{where}: {what} refused: the lease of {mine.describe()} was replaced by an "
            f"object that does not parse ({exc}). Nothing committed was touched: stop this "
            "job; find out who writes under this root before restarting",
            path=where,
        )
    if found is None:
        return WriterLeaseError(
            f"{where}: {what} refused: the lease of this writer ({mine.owner}, generation "
            f"{mine.generation}) is gone; another process may be writing under "
            f"{_root(store)}. Nothing committed was touched: stop this job and make sure only "
            "one job writes under this root before restarting (it takes the lease again)",
            path=where,
        )
    current, _ = found
    return WriterLeaseError(
        f"{where}: {what} refused: the lease was taken over by {current.describe()}; this "
        f"writer held generation {mine.generation} as {mine.owner}. Nothing committed was "
        "touched and latest was not moved: stop this job (the other one writes this root "
        "now), or stop the other one and restart this one",
        path=where,
        **current.fields(),
    )


@attrs.define
class ObjectStoreLease:
    """This process's lease on one direct checkpoints root (see the module doc).

    Attributes:
        store: the root (an :class:`~statecraft.storage.objects.ObjectStore` at its prefix).
        record: the version of the lease this owner last wrote.
        etag: that version's etag (what :meth:`check` and every ``If-Match`` compare with).
        clock: unix seconds.
        previous: the record it took over (``None``: the root had no lease).
        pointers: per pointer path, the etag this writer last saw (``None``: absent).
        released: :meth:`release` ran; every later check refuses.
    """

    store: ObjectStore
    record: ObjectLeaseRecord
    etag: str
    clock: Clock = time.time
    previous: ObjectLeaseRecord | None = None
    pointers: dict[str, str | None] = attrs.field(factory=dict)
    released: bool = False

    @property
    def where(self) -> str:
        """``s3://bucket/prefix/.statecraft-lease.json`` (for messages)."""
        return _where(self.store)

    @property
    def generation(self) -> int:
        return self.record.generation

    @property
    def owner(self) -> str:
        return self.record.owner

    def _replace(self, record: ObjectLeaseRecord, what: str) -> None:
        """Write ``record`` with ``If-Match`` on our etag; adopt it on success.

        Raises:
            WriterLeaseError: the lease is no longer ours (412), naming the current owner.
            ObjectRequestError: the bucket did not answer and the outcome could not be read.
        """
        data = record.encode()
        try:
            etag = self.store.put_if(
                OBJECT_LEASE_NAME, data, if_match=self.etag, if_none_match=False
            )
        except PreconditionFailed:
            raise _taken_by(self.store, self.record, what) from None
        except ObjectRequestError:
            landed = _landed(self.store, OBJECT_LEASE_NAME, data)
            if landed is None:
                raise
            etag = landed
        self.record = record
        self.etag = etag

    def renew(self) -> None:
        """Extend the lease to ``now + ttl_s`` (``If-Match`` on our etag).

        Raises:
            WriterLeaseError: the lease was taken over or released (named); this writer must
                stop committing.
            ObjectRequestError: the bucket did not answer.
        """
        self._refuse_if_released("renewing the lease")
        now = self.clock()
        renewed = attrs.evolve(
            self.record, renewed=iso_utc(now), expires=iso_utc(now + self.record.ttl_s)
        )
        self._replace(renewed, "renewing the lease")
        log.debug("%s: renewed by %s until %s", self.where, self.owner, renewed.expires)

    def renew_if_due(self) -> bool:
        """Renew when more than half the ttl has passed since the last renewal; returns
        whether it renewed. Raises as :meth:`renew`."""
        self._refuse_if_released("renewing the lease")
        elapsed = self.clock() - parse_iso_utc(self.record.renewed)
        if elapsed < self.record.ttl_s / 2:
            return False
        self.renew()
        return True

    def check(self) -> None:
        """Confirm the lease is still ours (one HEAD: the lease object's etag must be the one
        this owner wrote). A lease past its expiry is renewed instead (its ``If-Match``
        proves it). Called before every commit point.

        Raises:
            WriterLeaseError: the lease was taken over, deleted or released (naming the new
                owner and the fix); nothing must be committed.
            ObjectRequestError: the bucket did not answer (fail closed: do not commit).
        """
        self._refuse_if_released("this commit")
        if self.record.expired(self.clock()):
            log.warning(
                "%s: the lease of %s expired at %s before this commit; renewing it",
                self.where,
                self.owner,
                self.record.expires,
            )
            self._replace(self._renewed_now(), "this commit")
            return
        if self.store.stat_etag(OBJECT_LEASE_NAME) != self.etag:
            raise _taken_by(self.store, self.record, "this commit")

    def _renewed_now(self) -> ObjectLeaseRecord:
        now = self.clock()
        return attrs.evolve(
            self.record, renewed=iso_utc(now), expires=iso_utc(now + self.record.ttl_s)
        )

    def _refuse_if_released(self, what: str) -> None:
        if self.released:
            raise WriterLeaseError(
                f"{self.where}: {what} refused: this writer ({self.owner}) released its lease "
                "already; a released lease never commits again (a bug in the caller)",
                path=self.where,
            )

    def observe(self, path: str) -> str | None:
        """Remember the current etag of the pointer ``path`` (``None``: absent) as the one
        :func:`write_pointer_fenced` must find there; returns it."""
        etag = self.store.stat_etag(path)
        self.pointers[path] = etag
        return etag

    def release(self) -> None:
        """Give the lease up: replace it (``If-Match``) by a released record, so the next
        writer takes it at once with ``generation + 1`` (never by a delete, which a bucket
        cannot make conditional). A lease that is no longer ours is left alone. Idempotent."""
        if self.released:
            return
        done = attrs.evolve(self._renewed_now(), expires=iso_utc(self.clock()), released=True)
        try:
            self._replace(done, "releasing the lease")
        except WriterLeaseError as exc:
            log.warning("%s: not released (it is no longer ours): %s", self.where, exc)
        except ObjectRequestError as exc:
            log.warning(
                "%s: the release did not reach the bucket (%s); the lease expires at %s",
                self.where,
                exc,
                self.record.expires,
            )
        self.released = True


def _landed(store: ObjectStore, path: str, data: bytes) -> str | None:
    """After a write whose outcome is unknown: the etag of ``path`` when it holds exactly
    ``data`` (the write was applied), else ``None``."""
    try:
        etag = store.stat_etag(path)
        if etag is not None and store.read_bytes(path) == data:
            return etag
    except (FileNotFoundError, ObjectRequestError):
        pass
    return None


def owner_alive(record: ObjectLeaseRecord) -> bool:
    """True unless ``record``'s owner is on this host and its PID no longer runs (an owner on
    another host cannot be checked: it counts as alive, so acquisition fails closed)."""
    if record.host != socket.gethostname():
        return True
    try:
        os.kill(record.pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _new_record(
    generation: int, ttl_s: float, now: float, host: str, pid: int
) -> ObjectLeaseRecord:
    stamp = iso_utc(now)
    return ObjectLeaseRecord(
        schema=OBJECT_LEASE_SCHEMA,
        owner=f"{host}:{pid}:{uuid.uuid4().hex[:12]}",
        host=host,
        pid=pid,
        generation=generation,
        acquired=stamp,
        renewed=stamp,
        expires=iso_utc(now + ttl_s),
        ttl_s=float(ttl_s),
    )


def _refuse_live(store: ObjectStore, current: ObjectLeaseRecord) -> WriterLeaseError:
    where = _where(store)
    root = _root(store)
    return WriterLeaseError(
        f"{where}: {root} is being written by {current.describe()}. Two jobs must not write "
        "one checkpoints root: stop the other job (or wait for it to finish), or point this "
        "one at another checkpoint_store.prefix. If that owner is dead, wait until its lease "
        f"expires ({current.expires}) or take the root over deliberately, only after making "
        f"sure it is dead: statecraft lease takeover {root} (or checkpoint_store.lease_takeover"
        "=true for one launch)",
        path=where,
        **current.fields(),
    )


def acquire_object_lease(
    store: ObjectStore,
    *,
    ttl_s: float,
    takeover: bool,
    clock: Clock = time.time,
    host: str | None = None,
    pid: int | None = None,
    pointers: tuple[str, ...] = (LATEST_POINTER,),
    alive: Callable[[ObjectLeaseRecord], bool] | None = None,
) -> ObjectStoreLease:
    """Take the writer lease of the direct checkpoints root ``store`` (before its first write).

    Args:
        ttl_s: seconds the lease protects its owner after each renewal
            (``checkpoint_store.lease_ttl_s``).
        takeover: take an unexpired lease of another owner over
            (``checkpoint_store.lease_takeover``; only when that owner is known dead).
        clock: unix seconds (tests inject one).
        host, pid: the record's identity (defaults: this process).
        pointers: pointer objects whose current etag the lease remembers now, for
            :func:`write_pointer_fenced` (default: ``latest_checkpoint.txt``).
        alive: whether the owner of an unexpired lease still runs (default
            :func:`owner_alive`: an owner on this host whose PID is gone is dead, so a
            relaunch after a SIGKILL on the same node does not wait for the expiry; an owner
            on another host counts as alive: it cannot be told, so it fails closed).

    Returns:
        the lease (written to the bucket already).

    Raises:
        ValueError: ``ttl_s`` is not a positive number.
        WriterLeaseError: another owner's lease is live (named: host, PID, since, expiry, and
            the fix), the lease object is malformed, or the lease kept changing under this
            acquisition (another process is acquiring it at the same time).
        ObjectRequestError: the bucket did not answer.
    """
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, int | float) or not ttl_s > 0:
        raise ValueError(f"acquire_object_lease: ttl_s must be a positive number, not {ttl_s!r}")
    host = socket.gethostname() if host is None else host
    pid = os.getpid() if pid is None else pid
    alive = owner_alive if alive is None else alive
    where = _where(store)
    lease: ObjectStoreLease | None = None
    for _ in range(_RACE_ATTEMPTS):
        found = read_object_lease(store)
        now = clock()
        if found is None:
            record = _new_record(1, ttl_s, now, host, pid)
            try:
                etag = store.put_if(
                    OBJECT_LEASE_NAME, record.encode(), if_match=None, if_none_match=True
                )
            except PreconditionFailed:
                continue  # another writer created it meanwhile: look at it
            except ObjectRequestError:
                landed = _landed(store, OBJECT_LEASE_NAME, record.encode())
                if landed is None:
                    raise
                etag = landed
            log.info("%s: lease taken by %s (generation 1)", where, record.owner)
            lease = ObjectStoreLease(store, record, etag, clock)
            break
        current, seen = found
        live = not current.expired(now)
        dead = live and not alive(current)
        if live and not dead and not takeover:
            raise _refuse_live(store, current)
        record = _new_record(current.generation + 1, ttl_s, now, host, pid)
        try:
            etag = store.put_if(
                OBJECT_LEASE_NAME, record.encode(), if_match=seen, if_none_match=False
            )
        except PreconditionFailed:
            continue  # it changed since we read it: look again
        except ObjectRequestError:
            landed = _landed(store, OBJECT_LEASE_NAME, record.encode())
            if landed is None:
                raise
            etag = landed
        if dead and not takeover:
            log.warning(
                "%s: took over the lease of %s: its process is gone from this host; now %s "
                "(generation %d)",
                where,
                current.describe(),
                record.owner,
                record.generation,
            )
        elif current.released:
            log.info(
                "%s: lease taken by %s (generation %d) after its release by %s",
                where,
                record.owner,
                record.generation,
                current.owner,
            )
        else:
            log.warning(
                "%s: %s the lease of %s; now %s (generation %d)",
                where,
                "DELIBERATELY TOOK OVER the live" if live else "took over the expired",
                current.describe(),
                record.owner,
                record.generation,
            )
        lease = ObjectStoreLease(store, record, etag, clock, previous=current)
        break
    if lease is None:
        raise WriterLeaseError(
            f"{where}: the lease changed {_RACE_ATTEMPTS} times while this process tried to "
            "take it: another job is acquiring this root at the same time. Make sure only one "
            "job writes under it, then restart",
            path=where,
        )
    for pointer in pointers:
        lease.observe(pointer)
    return lease


def take_over_seen_lease(
    store: ObjectStore,
    seen: tuple[ObjectLeaseRecord, str],
    *,
    ttl_s: float,
    clock: Clock = time.time,
    host: str | None = None,
    pid: int | None = None,
) -> ObjectStoreLease:
    """Take over exactly the lease version ``seen`` (a record and its etag, as
    :func:`read_object_lease` returned them), whatever its expiry: ``If-Match`` on that etag,
    generation + 1, logged at WARNING. What ``statecraft lease takeover`` runs after showing the
    owner, so a job that acquired the root in between is never taken over by mistake.

    Raises:
        WriterLeaseError: the lease changed since it was read (named); nothing was changed.
        ObjectRequestError: the bucket did not answer.
    """
    current, etag = seen
    host = socket.gethostname() if host is None else host
    pid = os.getpid() if pid is None else pid
    record = _new_record(current.generation + 1, ttl_s, clock(), host, pid)
    data = record.encode()
    try:
        new_etag = store.put_if(OBJECT_LEASE_NAME, data, if_match=etag, if_none_match=False)
    except PreconditionFailed:
        raise WriterLeaseError(
            f"{_where(store)}: the lease changed since it was read ({current.describe()} is no "
            "longer the version there); nothing was changed. Look again before taking it over",
            path=_where(store),
        ) from None
    except ObjectRequestError:
        landed = _landed(store, OBJECT_LEASE_NAME, data)
        if landed is None:
            raise
        new_etag = landed
    log.warning(
        "%s: DELIBERATELY TOOK OVER the lease of %s; now %s (generation %d)",
        _where(store),
        current.describe(),
        record.owner,
        record.generation,
    )
    return ObjectStoreLease(store, record, new_etag, clock, previous=current)


def write_pointer_fenced(
    store: ObjectStore, lease: ObjectStoreLease, path: str, data: bytes
) -> None:
    """Write the pointer object ``path`` (``latest_checkpoint.txt``) under ``lease``:
    :meth:`ObjectStoreLease.check` first, then a PUT with ``If-Match`` on the etag this
    writer last saw there (``If-None-Match`` when it was absent). On success the new etag is
    what the next write must find.

    Raises:
        WriterLeaseError: the lease is no longer ours, or the pointer was changed by someone
            else since this writer last saw it (412): the message names the lease's current
            owner; the pointer is unchanged.
        ObjectRequestError: the bucket did not answer and the outcome could not be read back
            (a retry of the same write is safe).
    """
    if lease.store is not store and lease.store.describe() != store.describe():
        raise ValueError(
            f"write_pointer_fenced: the lease is of {lease.store.describe()}, not of "
            f"{store.describe()}"
        )
    lease.check()
    seen = lease.pointers[path] if path in lease.pointers else lease.observe(path)
    try:
        etag = store.put_if(path, data, if_match=seen, if_none_match=seen is None)
    except PreconditionFailed:
        if store.stat_etag(OBJECT_LEASE_NAME) != lease.etag:
            raise _taken_by(store, lease.record, f"writing {path}") from None
        where = f"{store.describe().rstrip('/')}/{path}"
        raise WriterLeaseError(
            f"{where}: writing it refused: it was changed by another writer since this one "
            f"({lease.owner}, generation {lease.generation}) last saw it, although the lease "
            "is still this writer's. Nothing was overwritten: stop every job writing under "
            f"{_root(store)} and inspect it (statecraft inspect {_root(store)})",
            path=where,
        ) from None
    except ObjectRequestError:
        landed = _landed(store, path, data)
        if landed is None:
            raise
        etag = landed
    lease.pointers[path] = etag
