"""Reading a direct root's lease object, and the refusals and read-backs every conditional
write of it shares (:mod:`statecraft.checkpoint.fencing.object_lease` is the overview).

- :func:`read_object_lease`: the record and the etag of the version read (HEAD, then GET).
- :func:`taken_by`: the :class:`~statecraft.errors.WriterLeaseError` of a commit or renewal
  whose lease is no longer this writer's, naming who holds it now.
- :func:`landed_etag`: after a write whose outcome is unknown, whether it was applied.

Reads only; nothing here writes.
"""

from __future__ import annotations

from statecraft.checkpoint.fencing.object_lease_record import (
    OBJECT_LEASE_NAME,
    ObjectLeaseRecord,
    decode_object_lease,
)
from statecraft.errors import ObjectRequestError, WriterLeaseError
from statecraft.storage.objects import ObjectStore

__all__ = ["landed_etag", "lease_where", "read_object_lease", "root_of", "taken_by"]


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
    return decode_object_lease(data, lease_where(store)), etag


def lease_where(store: ObjectStore) -> str:
    """``s3://bucket/<root>/.statecraft-lease.json`` (for messages)."""
    return f"{store.describe().rstrip('/')}/{OBJECT_LEASE_NAME}"


def root_of(store: ObjectStore) -> str:
    """The root's URI without a trailing ``/`` (for messages)."""
    return store.describe().rstrip("/")


def taken_by(store: ObjectStore, mine: ObjectLeaseRecord, what: str) -> WriterLeaseError:
    """The refusal of a commit (or renewal) whose lease is no longer ours."""
    where = lease_where(store)
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
            f"{root_of(store)}. Nothing committed was touched: stop this job and make sure only "
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


def landed_etag(store: ObjectStore, path: str, data: bytes) -> str | None:
    """After a write whose outcome is unknown: the etag of ``path`` when it holds exactly
    ``data`` (the write was applied), else ``None``."""
    try:
        etag = store.stat_etag(path)
        if etag is not None and store.read_bytes(path) == data:
            return etag
    except (FileNotFoundError, ObjectRequestError):
        pass
    return None
