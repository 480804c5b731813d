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
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import boto3
from botocore.config import Config

from statecraft.errors import ObjectRequestError, PreconditionFailed
from statecraft.storage.base import Store
from statecraft.storage.objects import ObjectInfo, RemoteObject
from statecraft.storage.s3_credentials import S3Credentials, S3Identity
from statecraft.storage.s3_retry import (
    Failure,
    RetryPolicy,
    TransferSettings,
    classify,
    request_error,
)

__all__ = ["SHA256_METADATA", "RemoteObject", "RetryPolicy", "S3Bucket", "TransferSettings"]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: the user-metadata key holding the sha256 of the object's bytes (``x-amz-meta-sha256``)
SHA256_METADATA = "sha256"


class S3Bucket:
    """One bucket at an S3 endpoint, with the :class:`BucketClient` operations and streaming
    transfers of large files.

    Args:
        credentials: endpoint, region and keys (:func:`load_credentials`).
        bucket: the bucket name (DNS-style).
        retry: attempts and backoff for every request.
        transfer: multipart part size and concurrency.
        connect_timeout_s, read_timeout_s: per-request socket timeouts.
        list_page_size: keys asked for per LIST page (S3's maximum is 1000).
    """

    def __init__(
        self,
        credentials: S3Credentials,
        bucket: str,
        *,
        retry: RetryPolicy | None = None,
        transfer: TransferSettings | None = None,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 60.0,
        list_page_size: int = 1000,
    ) -> None:
        self.credentials = credentials
        self.bucket = bucket
        self.retry = retry or RetryPolicy()
        self.transfer = transfer or TransferSettings()
        self.list_page_size = list_page_size
        config = Config(
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            s3={"addressing_style": "path"},
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=connect_timeout_s,
            read_timeout=read_timeout_s,
            max_pool_connections=max(10, 2 * self.transfer.concurrency),
        )
        session = boto3.session.Session(
            aws_access_key_id=credentials.aws_access_key_id,
            aws_secret_access_key=credentials.aws_secret_access_key,
            region_name=credentials.region,
        )
        self.client: Any = session.client(
            "s3", endpoint_url=credentials.endpoint_url, config=config
        )

    def __repr__(self) -> str:
        return f"S3Bucket({self.identity()})"

    def identity(self) -> S3Identity:
        """Endpoint authority, bucket and key id: what logs and markers name."""
        return self.credentials.redacted(self.bucket)

    def describe(self) -> str:
        return f"s3://{self.bucket} at {self.credentials.endpoint_authority}"

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
            from statecraft.storage.s3_transfer import upload_bytes

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

    def stat(self, key: str) -> RemoteObject | None:
        """Size, etag and stored sha256 of ``key``; ``None`` when absent."""

        def send() -> RemoteObject:
            response = self.client.head_object(Bucket=self.bucket, Key=key)
            meta = response.get("Metadata") or {}
            return RemoteObject(
                int(response["ContentLength"]),
                str(response["ETag"]),
                str(meta.get(SHA256_METADATA, "")),
            )

        try:
            return self.call("head", key, send)
        except FileNotFoundError:
            return None

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
        """Prove the bucket exists and these keys may use it (one HEAD of the bucket).

        Raises:
            ObjectRequestError: unknown bucket, access denied, or the endpoint is down.
        """
        try:
            self.call("head-bucket", "", lambda: self.client.head_bucket(Bucket=self.bucket))
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
        from statecraft.storage.s3_transfer import upload_file

        return upload_file(self, key, Path(path), if_none_match=if_none_match, sha256=sha256)

    def download(self, key: str, path: str | os.PathLike[str]) -> RemoteObject:
        """Stream ``key`` into ``path`` (a sibling temporary, fsynced, then renamed), resuming
        a dropped body by ranged GETs of the same etag; returns what was fetched.

        Raises:
            FileNotFoundError: no such key.
            ObjectRequestError: the request failed, or the object changed mid-download.
        """
        from statecraft.storage.s3_transfer import download_file

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

    # -- the retry loop ----------------------------------------------------------------------

    def conditional(
        self,
        op: str,
        key: str,
        send: Callable[[], str],
        size: int,
        sha256: str,
        if_none_match: bool,
        if_match: str | None,
    ) -> str:
        """Run a (possibly conditional) write; a 412 met after an earlier attempt failed is
        resolved by comparing the object there with ``size`` and ``sha256``."""
        state = {"failed": 0}

        def on_failure(_: Failure) -> None:
            state["failed"] += 1

        try:
            return self.call(op, key, send, on_failure=on_failure)
        except PreconditionFailed:
            if state["failed"]:
                there = self.stat(key)
                if there is not None and there.size == size and there.sha256 == sha256:
                    log.info(
                        "s3 %s %r at %s: an earlier attempt was applied (same size and "
                        "sha256 there); done",
                        op,
                        key,
                        self.identity(),
                    )
                    return there.etag
            if if_none_match:
                raise PreconditionFailed(
                    f"If-None-Match: * refused: {key!r} exists in {self.describe()}"
                ) from None
            raise PreconditionFailed(
                f"If-Match: {if_match} refused for {key!r} in {self.describe()}"
            ) from None

    def call(
        self,
        op: str,
        key: str,
        send: Callable[[], T],
        *,
        on_failure: Callable[[Failure], None] | None = None,
    ) -> T:
        """``send()`` with bounded retries.

        Raises:
            PreconditionFailed: a 412 (never retried).
            FileNotFoundError: a 404 of the key.
            ObjectRequestError: a failure that is not retried, or the last attempt's failure.
        """
        attempts = self.retry.attempts
        for attempt in range(1, attempts + 1):
            try:
                return send()
            except Exception as error:
                failure = classify(error)
                if failure is None:
                    raise
                if failure.precondition:
                    raise PreconditionFailed(f"{op} {key!r}: precondition failed") from None
                if failure.not_found and op != "head-bucket":
                    raise FileNotFoundError(f"no object {key!r} in {self.describe()}") from None
                if failure.not_found:
                    raise FileNotFoundError(self.bucket) from None
                if not failure.retryable or attempt == attempts:
                    raise self.failed(op, key, failure, attempt) from None
                if on_failure is not None:
                    on_failure(failure)
                pause = self.retry.delay(attempt)
                log.warning(
                    "s3 %s %r at %s: attempt %d/%d failed (%s); retrying in %.2f s",
                    op,
                    key,
                    self.identity(),
                    attempt,
                    attempts,
                    self.credentials.scrub(f"{failure.code} {failure.status}".strip()),
                    pause,
                )
                time.sleep(pause)
        raise AssertionError("unreachable")  # pragma: no cover

    def failed(self, op: str, key: str, failure: Failure, attempts: int) -> ObjectRequestError:
        """The :class:`ObjectRequestError` for ``failure``, with the fix for its kind."""
        source = self.credentials.source or "the credentials"
        if failure.access_denied:
            fix = (
                f"Access denied to {self.describe()}: check aws_access_key_id and "
                f"aws_secret_access_key in {source} and the key's permissions on the bucket"
            )
        elif failure.code == "NoSuchBucket":
            fix = f"Bucket {self.bucket!r} does not exist: create it or fix the bucket name"
        elif failure.status == 0:
            fix = (
                f"Check endpoint_url in {source} and that the service at "
                f"{self.credentials.endpoint_authority} is running and reachable"
            )
        elif failure.retryable:
            fix = "The service kept failing; try again later"
        else:
            fix = "The request was refused and not applied"
        error = request_error(self.describe(), op, key, failure, attempts, fix)
        scrubbed = self.credentials.scrub(str(error))
        if scrubbed != str(error):
            error.args = (scrubbed,)
        return error


def _condition(if_none_match: bool, if_match: str | None) -> dict[str, str]:
    if if_none_match and if_match is not None:
        raise ValueError("put: give if_none_match or if_match, not both")
    if if_none_match:
        return {"IfNoneMatch": "*"}
    if if_match is not None:
        return {"IfMatch": if_match}
    return {}
