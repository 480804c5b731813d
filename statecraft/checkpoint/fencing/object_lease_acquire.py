"""Taking the lease of a direct checkpoints root: :func:`acquire_object_lease` (before the
first write of a job: create by ``If-None-Match``, or take over an expired, released or dead
owner's by ``If-Match``, or at once the live lease of an earlier incarnation of this very
scheduler job, requeued; any other live owner refuses, named) and :func:`take_over_seen_lease` (what
``statecraft lease takeover`` runs on the version it showed). Overview:
:mod:`statecraft.checkpoint.fencing.object_lease`.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping

from statecraft.checkpoint.fencing.object_lease_handle import Clock, ObjectStoreLease
from statecraft.checkpoint.fencing.object_lease_io import (
    landed_etag,
    lease_where,
    read_object_lease,
    root_of,
)
from statecraft.checkpoint.fencing.object_lease_record import (
    OBJECT_LEASE_NAME,
    OBJECT_LEASE_SCHEMA,
    ObjectLeaseRecord,
    iso_utc,
)
from statecraft.checkpoint.fencing.scheduler_job import SchedulerJob, scheduler_job
from statecraft.checkpoint.kernel.layout import LATEST_POINTER
from statecraft.errors import ObjectRequestError, PreconditionFailed, WriterLeaseError
from statecraft.storage.objects import ObjectStore

__all__ = ["acquire_object_lease", "owner_alive", "take_over_seen_lease"]

log = logging.getLogger("statecraft.lease")

_RACE_ATTEMPTS = 3  # how often acquisition re-reads a lease that changed under it


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
    generation: int,
    ttl_s: float,
    now: float,
    host: str,
    pid: int,
    job: SchedulerJob | None = None,
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
        job=None if job is None else job.key,
        restart_count=None if job is None else job.restart_count,
    )


def _refuse_live(
    store: ObjectStore, current: ObjectLeaseRecord, job: SchedulerJob | None
) -> WriterLeaseError:
    where = lease_where(store)
    root = root_of(store)
    mine = f"job {job.describe()}" if job is not None else "no scheduler job"
    theirs = f"job {current.job} restart {current.restart_count}" if current.job else "no job"
    return WriterLeaseError(
        f"{where}: {root} is being written by {current.describe()}. Two jobs must not write "
        "one checkpoints root: stop the other job (or wait for it to finish), or point this "
        "one at another checkpoint_store.prefix. If that owner is dead, wait until its lease "
        f"expires ({current.expires}) or take the root over deliberately, only after making "
        f"sure it is dead: statecraft lease takeover {root} (or checkpoint_store.lease_takeover"
        "=true for one launch). (A job its scheduler requeued takes its own lease at once: same "
        f"SLURM_JOB_ID, higher SLURM_RESTART_COUNT; this process is {mine}, the lease records "
        f"{theirs}.)",
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
    environ: Mapping[str, str] | None = None,
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
        environ: where the scheduler's variables are read (default ``os.environ``;
            :func:`~statecraft.checkpoint.fencing.scheduler_job.scheduler_job`). The lease
            records the job; a live lease whose record names the same job with a lower restart
            count (``SLURM_JOB_ID`` equal, ``SLURM_RESTART_COUNT`` higher here: the scheduler
            requeued this job, on any node) is taken over at once, logged at WARNING.

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
    job = scheduler_job(environ)
    where = lease_where(store)
    lease: ObjectStoreLease | None = None
    for _ in range(_RACE_ATTEMPTS):
        found = read_object_lease(store)
        now = clock()
        if found is None:
            record = _new_record(1, ttl_s, now, host, pid, job)
            try:
                etag = store.put_if(
                    OBJECT_LEASE_NAME, record.encode(), if_match=None, if_none_match=True
                )
            except PreconditionFailed:
                continue  # another writer created it meanwhile: look at it
            except ObjectRequestError:
                landed = landed_etag(store, OBJECT_LEASE_NAME, record.encode())
                if landed is None:
                    raise
                etag = landed
            log.info("%s: lease taken by %s (generation 1)", where, record.owner)
            lease = ObjectStoreLease(store, record, etag, clock)
            break
        current, seen = found
        live = not current.expired(now)
        dead = live and not alive(current)
        requeued = job is not None and job.requeue_of(current.job, current.restart_count)
        if live and not dead and not takeover and not requeued:
            raise _refuse_live(store, current, job)
        record = _new_record(current.generation + 1, ttl_s, now, host, pid, job)
        try:
            etag = store.put_if(
                OBJECT_LEASE_NAME, record.encode(), if_match=seen, if_none_match=False
            )
        except PreconditionFailed:
            continue  # it changed since we read it: look again
        except ObjectRequestError:
            landed = landed_etag(store, OBJECT_LEASE_NAME, record.encode())
            if landed is None:
                raise
            etag = landed
        if live and requeued and not dead and not takeover:
            log.warning(
                "%s: took over the live lease of %s at once: the scheduler requeued the same "
                "job (%s); now %s on host %s (generation %d)",
                where,
                current.describe(),
                job.describe() if job is not None else "",
                record.owner,
                host,
                record.generation,
            )
        elif dead and not takeover:
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
    environ: Mapping[str, str] | None = None,
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
    record = _new_record(current.generation + 1, ttl_s, clock(), host, pid, scheduler_job(environ))
    data = record.encode()
    try:
        new_etag = store.put_if(OBJECT_LEASE_NAME, data, if_match=etag, if_none_match=False)
    except PreconditionFailed:
        raise WriterLeaseError(
            f"{lease_where(store)}: the lease changed since it was read ({current.describe()} "
            "is no longer the version there); nothing was changed. Look again before taking it "
            "over",
            path=lease_where(store),
        ) from None
    except ObjectRequestError:
        landed = landed_etag(store, OBJECT_LEASE_NAME, data)
        if landed is None:
            raise
        new_etag = landed
    log.warning(
        "%s: DELIBERATELY TOOK OVER the lease of %s; now %s (generation %d)",
        lease_where(store),
        current.describe(),
        record.owner,
        record.generation,
    )
    return ObjectStoreLease(store, record, new_etag, clock, previous=current)
