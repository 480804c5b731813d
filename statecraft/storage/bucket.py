"""What statecraft needs of a bucket: the client protocols (:class:`BucketClient` for the
``Store`` adapter, :class:`ArchiveBucket` for the archive transactions) and the records a HEAD
answers with.

Semantics assumed of every implementation (DESIGN.md §4): a PUT is atomic per key and then
strongly consistent; there is no rename and no multi-key atomicity; ``If-None-Match: *`` and
``If-Match: <etag>`` are the only compare-and-swap; a request whose response never arrived may
or may not have taken effect. Implementations: :class:`~statecraft.storage.sim_bucket.SimBucket`
(the crash harness) and :class:`~statecraft.storage.s3.S3Bucket` (production).
"""

from __future__ import annotations

from typing import Protocol

import attrs

from statecraft.storage.base import Store
from statecraft.storage.s3_credentials import S3Identity

__all__ = ["ArchiveBucket", "BucketClient", "ObjectInfo", "RemoteObject"]


@attrs.frozen
class ObjectInfo:
    """What a :meth:`BucketClient.head` says of an object: its size and etag."""

    size: int
    etag: str


@attrs.frozen
class RemoteObject:
    """What a HEAD says of an object: size, etag, and the sha256 statecraft stored in its
    metadata when it wrote it (``""`` for an object written by someone else)."""

    size: int
    etag: str
    sha256: str


class BucketClient(Protocol):
    """The operations statecraft needs of one bucket."""

    def put(
        self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None
    ) -> str:
        """Store ``data`` under ``key`` atomically; returns the new etag.

        Raises:
            PreconditionFailed: the condition did not hold; nothing changed.
            ObjectRequestError: the request failed or its outcome is unknown.
        """

    def get(self, key: str) -> bytes:
        """The object's bytes; ``FileNotFoundError`` when absent."""

    def head(self, key: str) -> ObjectInfo | None: ...

    def list(self, prefix: str) -> list[str]:
        """Every key starting with ``prefix``, sorted."""

    def delete(self, key: str) -> None: ...


class ArchiveBucket(BucketClient, Protocol):
    """A bucket the archive transactions (upload, publish, fetch, prune-verified, ``objects``)
    talk to: :class:`SimBucket` under the crash harness, :class:`~statecraft.storage.s3.S3Bucket`
    in production. Every object statecraft writes carries the sha256 of its bytes in its
    metadata, so a HEAD proves size and digest without reading the body.
    """

    def identity(self) -> S3Identity:
        """Endpoint authority, bucket and key id (never the secret): what markers bind."""

    def describe(self) -> str:
        """``s3://<bucket> at <endpoint>`` for messages."""

    def stat(self, key: str) -> RemoteObject | None:
        """Size, etag and stored sha256 of ``key``; ``None`` when absent.

        Raises:
            ObjectRequestError: the request failed after the bounded retries.
        """

    def upload_from(
        self,
        key: str,
        store: Store,
        path: str,
        *,
        sha256: str | None = None,
        if_none_match: bool = False,
    ) -> str:
        """Upload the file ``path`` of ``store`` to ``key`` (streamed, multipart when large);
        returns the etag. ``sha256`` (hex), when the caller hashed the file already, is what
        the metadata records; otherwise the upload computes it.

        Raises:
            FileNotFoundError: ``path`` is not in ``store``.
            PreconditionFailed: ``if_none_match`` and another object holds ``key``.
            ObjectRequestError: the request failed after the bounded retries (its outcome may be
                unknown: look before concluding).
        """

    def download_into(self, key: str, store: Store, path: str) -> RemoteObject:
        """Write the object's bytes to ``path`` of ``store`` atomically (a temporary, fsynced,
        renamed); returns what was fetched. The bytes are checked against the size and the
        stored sha256 (when there is one) before the file is placed.

        Raises:
            FileNotFoundError: no such key.
            ObjectRequestError: the request failed, the object changed mid-download, or the
                bytes did not match its size or stored sha256 (nothing placed).
        """
