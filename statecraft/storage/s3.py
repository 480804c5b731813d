"""A :class:`~statecraft.storage.objects.BucketClient` over boto3: one bucket of any
S3-compatible service.

Contract (DESIGN.md §4): a PUT is atomic per key; ``If-None-Match: *`` and ``If-Match`` are
sent as headers and a 412 is :class:`PreconditionFailed`. Every request is retried on
throttling, 5xx and dropped connections (:class:`RetryPolicy`); a retried write whose earlier
attempt may have been applied is harmless: an unconditional PUT is idempotent, and a
conditional one that meets 412 on a retry compares the object there (size and the sha256
stored in its metadata) with what it sent, succeeding when they are equal and raising
:class:`PreconditionFailed` otherwise. Large files go by multipart (``put_file``) with a bounded
part size and concurrency; nothing relies on server-side copy. The secret key never appears in
a log line or an error message (messages pass :meth:`S3Credentials.scrub` as a last guard).

The client and the retry loop live in :mod:`statecraft.storage.s3_requests`, the multipart
and ranged transfers in :mod:`statecraft.storage.s3_transfer`; this module is the bucket's
operations.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import attrs

from statecraft.errors import ObjectRequestError
from statecraft.storage.base import Store
from statecraft.storage.bucket import ObjectInfo, RemoteObject
from statecraft.storage.s3_download import download_file
from statecraft.storage.s3_requests import SHA256_METADATA, S3Requests
from statecraft.storage.s3_retry import Failure, RetryPolicy, TransferSettings
from statecraft.storage.s3_transfer import upload_bytes, upload_file

#: the longest :meth:`S3Bucket.check` retries an endpoint that does not answer (seconds)
CHECK_WAIT_S = 10.0

__all__ = [
    "CHECK_WAIT_S",
    "SHA256_METADATA",
    "RemoteObject",
    "RetryPolicy",
    "S3Bucket",
    "TransferSettings",
]


class S3Bucket(S3Requests):
    """One bucket at an S3 endpoint, with the :class:`BucketClient` operations and streaming
    transfers of large files, over the client and retry loop of
    :class:`~statecraft.storage.s3_requests.S3Requests` (whose arguments it takes).
    """

    # -- the BucketClient operations ---------------------------------------------------------

    def put(
        self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None
    ) -> str:
        """Store ``data`` under ``key``; returns the etag. See the module contract.

        Raises:
            PreconditionFailed: the condition did not hold (and no earlier attempt of this
                call wrote these very bytes); nothing changed.
            ObjectRequestError: the request failed after the bounded attempts.
        """
        return self.put_bytes(key, data, if_none_match=if_none_match, if_match=if_match)

    def put_bytes(
        self,
        key: str,
        data: bytes,
        *,
        if_none_match: bool = False,
        if_match: str | None = None,
        sha256: str | None = None,
    ) -> str:
        """:meth:`put`, with the sha256 (hex) of ``data`` when the caller already knows it
        (it is stored as given: a wrong digest makes every later download refuse the
        object). Data larger than ``transfer.part_size`` without ``if_match`` goes by
        multipart from memory (parts in parallel, as :meth:`put_file` sends a file); an
        ``If-Match`` replace is always one PUT. Raises as :meth:`put`."""
        condition = _condition(if_none_match, if_match)
        if if_match is None and len(data) > self.transfer.part_size:
            return upload_bytes(self, key, data, if_none_match=if_none_match, sha256=sha256)
        sha = sha256 or hashlib.sha256(data).hexdigest()

        def send() -> str:
            response = self.client.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=data,
                Metadata={SHA256_METADATA: sha},
                **condition,
            )
            return str(response["ETag"])

        return self.conditional("put", key, send, len(data), sha, if_none_match, if_match)

    def get(self, key: str) -> bytes:
        """The object's bytes (a dropped body is fetched again).

        Raises:
            FileNotFoundError: no such key.
            ObjectRequestError: the request failed after the bounded attempts.
        """

        def send() -> bytes:
            response = self.client.get_object(Bucket=self.bucket, Key=key)
            return bytes(response["Body"].read())

        return self.call("get", key, send)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """``length`` bytes of the object from offset ``start`` (fewer at its end).

        Raises:
            ValueError: a negative ``start`` or ``length``.
            FileNotFoundError: no such key.
            ObjectRequestError: a range past the end (416) or a failed request.
        """
        if start < 0 or length < 0:
            raise ValueError(f"get_range({key!r}, {start}, {length}): offsets must be >= 0")
        if length == 0:
            return b""

        def send() -> bytes:
            response = self.client.get_object(
                Bucket=self.bucket, Key=key, Range=f"bytes={start}-{start + length - 1}"
            )
            return bytes(response["Body"].read())

        return self.call("get", key, send)

    def head(self, key: str) -> ObjectInfo | None:
        """Size and etag of ``key``; ``None`` when absent. A HEAD answer has no body, so in a
        bucket that does not exist every key looks absent: :meth:`check` tells them apart."""
        remote = self.stat(key)
        return None if remote is None else ObjectInfo(remote.size, remote.etag)

    def list(self, prefix: str) -> list[str]:
        """Every key starting with ``prefix``, sorted (all pages)."""
        keys: list[str] = []
        token: str | None = None
        while True:
            extra: dict[str, Any] = {"MaxKeys": self.list_page_size}
            if token:
                extra["ContinuationToken"] = token

            def send(extra: dict[str, Any] = extra) -> dict[str, Any]:
                return dict(self.client.list_objects_v2(Bucket=self.bucket, Prefix=prefix, **extra))

            page = self.call("list", prefix, send)
            keys.extend(str(o["Key"]) for o in page.get("Contents", []))
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return sorted(k for k in keys if not k.endswith("/"))

    def delete(self, key: str) -> None:
        """Remove ``key``; an absent key is not an error (S3 semantics)."""
        try:
            self.call("delete", key, lambda: self.client.delete_object(Bucket=self.bucket, Key=key))
        except FileNotFoundError:
            pass

    def check(self) -> None:
        """Prove the bucket exists and these keys may use it (one HEAD of the bucket). An
        endpoint that does not answer is reported within :data:`CHECK_WAIT_S` (or the retry
        budget, when smaller), not after the whole budget of a request.

        Raises:
            ObjectRequestError: unknown bucket, access denied, or the endpoint is down.
        """
        try:
            self.call(
                "head-bucket",
                "",
                lambda: self.client.head_bucket(Bucket=self.bucket),
                retry=attrs.evolve(self.retry, max_wait_s=min(self.retry.max_wait_s, CHECK_WAIT_S)),
            )
        except FileNotFoundError:
            failure = Failure(404, "NoSuchBucket", False, "The specified bucket does not exist")
            raise self.failed("head-bucket", "", failure, 1) from None

    # -- transfers (s3_transfer.py) ----------------------------------------------------------

    def put_file(
        self,
        key: str,
        path: str | os.PathLike[str],
        *,
        if_none_match: bool = False,
        sha256: str | None = None,
    ) -> str:
        """Upload a file, by multipart above ``transfer.part_size``; returns the etag.

        ``sha256`` (hex) saves a hashing pass when the caller already knows it. Raises as
        :meth:`put`; a failed multipart upload is aborted.
        """
        file = Path(path)
        if file.stat().st_size <= self.transfer.part_size:
            return self.put_bytes(
                key, file.read_bytes(), if_none_match=if_none_match, sha256=sha256
            )
        return upload_file(self, key, file, if_none_match=if_none_match, sha256=sha256)

    def download(self, key: str, path: str | os.PathLike[str]) -> RemoteObject:
        """Stream ``key`` into ``path`` (a sibling temporary, fsynced, then renamed), resuming
        a dropped body by ranged GETs of the same etag; returns what was fetched.

        Raises:
            FileNotFoundError: no such key.
            ObjectRequestError: the request failed, or the object changed mid-download.
        """
        return download_file(self, key, Path(path))

    # -- the ArchiveBucket operations (objects.ArchiveBucket) -------------------------------

    def upload_from(
        self,
        key: str,
        store: Store,
        path: str,
        *,
        sha256: str | None = None,
        if_none_match: bool = False,
    ) -> str:
        """Upload ``path`` of ``store`` (by its real path when it has one, else its bytes);
        see :class:`~statecraft.storage.objects.ArchiveBucket`."""
        local = store.local_path(path)
        if local is not None:
            return self.put_file(key, local, if_none_match=if_none_match, sha256=sha256)
        return self.put(key, store.read_bytes(path), if_none_match=if_none_match)

    def download_into(self, key: str, store: Store, path: str) -> RemoteObject:
        """Fetch ``key`` into ``path`` of ``store``; see
        :class:`~statecraft.storage.objects.ArchiveBucket`."""
        local = store.local_path(path)
        if local is not None:
            return self.download(key, local)
        there = self.stat(key)
        if there is None:
            raise FileNotFoundError(f"no object {key!r} in {self.describe()}")
        data = self.get(key)
        if len(data) != there.size or (
            there.sha256 and hashlib.sha256(data).hexdigest() != there.sha256
        ):
            raise ObjectRequestError(
                f"get {key!r} from {self.describe()}: the bytes do not match its size or "
                "stored sha256 (it changed mid-download?); nothing placed, try again"
            )
        store.write_atomic(path, data)
        return there


def _condition(if_none_match: bool, if_match: str | None) -> dict[str, str]:
    if if_none_match and if_match is not None:
        raise ValueError("put: give if_none_match or if_match, not both")
    if if_none_match:
        return {"IfNoneMatch": "*"}
    if if_match is not None:
        return {"IfMatch": if_match}
    return {}
