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

The code is split by job: :mod:`~statecraft.checkpoint.fencing.object_lease_io` (reading the
lease object, the refusals), :mod:`~statecraft.checkpoint.fencing.object_lease_handle` (the held
lease: renew, check, release), :mod:`~statecraft.checkpoint.fencing.object_lease_acquire`
(acquire, take over) and :mod:`~statecraft.checkpoint.fencing.object_lease_pointer` (the fenced
pointer write). This module gathers their public names.
"""

from __future__ import annotations

from statecraft.checkpoint.fencing.object_lease_acquire import (
    acquire_object_lease,
    owner_alive,
    take_over_seen_lease,
)
from statecraft.checkpoint.fencing.object_lease_handle import ObjectStoreLease
from statecraft.checkpoint.fencing.object_lease_io import read_object_lease
from statecraft.checkpoint.fencing.object_lease_pointer import write_pointer_fenced
from statecraft.checkpoint.fencing.object_lease_record import OBJECT_LEASE_NAME

__all__ = [
    "OBJECT_LEASE_NAME",
    "ObjectStoreLease",
    "acquire_object_lease",
    "owner_alive",
    "read_object_lease",
    "take_over_seen_lease",
    "write_pointer_fenced",
]
