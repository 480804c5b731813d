"""The held lease of a direct checkpoints root: :class:`ObjectStoreLease` renews, checks and
releases the lease object its owner wrote, each by ``If-Match`` on the etag it last wrote
(:mod:`statecraft.checkpoint.fencing.object_lease` is the overview; acquisition is
:mod:`~statecraft.checkpoint.fencing.object_lease_acquire`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import attrs

from statecraft.checkpoint.fencing.object_lease_io import landed_etag, lease_where, taken_by
from statecraft.checkpoint.fencing.object_lease_record import (
    OBJECT_LEASE_NAME,
    ObjectLeaseRecord,
    iso_utc,
    parse_iso_utc,
)
from statecraft.errors import ObjectRequestError, PreconditionFailed, WriterLeaseError
from statecraft.storage.objects import ObjectStore

__all__ = ["Clock", "ObjectStoreLease"]

log = logging.getLogger("statecraft.lease")

#: unix seconds (tests inject a fixed one)
Clock = Callable[[], float]


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
        return lease_where(self.store)

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
            raise taken_by(self.store, self.record, what) from None
        except ObjectRequestError:
            landed = landed_etag(self.store, OBJECT_LEASE_NAME, data)
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
            raise taken_by(self.store, self.record, "this commit")

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
