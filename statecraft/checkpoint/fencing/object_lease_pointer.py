"""Pointer objects written under the lease: :func:`write_pointer_fenced` moves
``latest_checkpoint.txt`` by ``If-Match`` on the etag this writer last saw, so a stale writer
can never move it (overview: :mod:`statecraft.checkpoint.fencing.object_lease`).
"""

from __future__ import annotations

from statecraft.checkpoint.fencing.object_lease_handle import ObjectStoreLease
from statecraft.checkpoint.fencing.object_lease_io import landed_etag, root_of, taken_by
from statecraft.checkpoint.fencing.object_lease_record import OBJECT_LEASE_NAME
from statecraft.errors import ObjectRequestError, PreconditionFailed, WriterLeaseError
from statecraft.storage.objects import ObjectStore

__all__ = ["write_pointer_fenced"]


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
            raise taken_by(store, lease.record, f"writing {path}") from None
        where = f"{store.describe().rstrip('/')}/{path}"
        raise WriterLeaseError(
            f"{where}: writing it refused: it was changed by another writer since this one "
            f"({lease.owner}, generation {lease.generation}) last saw it, although the lease "
            "is still this writer's. Nothing was overwritten: stop every job writing under "
            f"{root_of(store)} and inspect it (statecraft inspect {root_of(store)})",
            path=where,
        ) from None
    except ObjectRequestError:
        landed = landed_etag(store, path, data)
        if landed is None:
            raise
        etag = landed
    lease.pointers[path] = etag
