"""The request layer of an S3 bucket: one boto3 client, and the bounded-retry loop every
request of :class:`~statecraft.storage.s3.S3Bucket` and of its transfers goes through.

Contract (DESIGN.md §4): every request is retried on throttling, 5xx and dropped connections
(:class:`~statecraft.storage.s3_retry.RetryPolicy`); a 412 is :class:`PreconditionFailed` and is
never retried, a 404 of a key is ``FileNotFoundError``; any other failure that outlives the
bounded attempts is an :class:`ObjectRequestError` whose message ends with the fix for its kind.
A conditional write that meets 412 after an earlier attempt failed compares the object there
(size and the sha256 stored in its metadata, :data:`SHA256_METADATA`) with what it sent and
succeeds when they are equal. The secret key never appears in a log line or an error message
(messages pass :meth:`S3Credentials.scrub` as a last guard).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import attrs
from botocore.config import Config

from statecraft.errors import ObjectRequestError, PreconditionFailed
from statecraft.storage.bucket import RemoteObject
from statecraft.storage.s3_credentials import S3Credentials, S3Identity
from statecraft.storage.s3_retry import (
    Failure,
    RetryPolicy,
    TransferSettings,
    classify,
    request_error,
)

__all__ = ["SHA256_METADATA", "S3Requests"]

log = logging.getLogger("statecraft.storage.s3")  # the bucket's log, one name for all its parts
T = TypeVar("T")

#: the user-metadata key holding the sha256 of the object's bytes (``x-amz-meta-sha256``)
SHA256_METADATA = "sha256"


class S3Requests:
    """One bucket at an S3 endpoint: its client, the retry loop, and the HEAD that conditional
    writes and transfers look with. :class:`~statecraft.storage.s3.S3Bucket` adds the
    bucket operations on top.

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
        self.bucket = bucket
        self.retry = retry or RetryPolicy()
        self.transfer = transfer or TransferSettings()
        self.list_page_size = list_page_size
        config = Config(
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            # path-style for a named endpoint (MinIO, SeaweedFS...); AWS picks its own
            s3={"addressing_style": "path" if credentials.endpoint_url else "auto"},
            retries={"total_max_attempts": 1, "mode": "standard"},  # call() retries
            connect_timeout=connect_timeout_s,
            read_timeout=read_timeout_s,
            max_pool_connections=max(10, 2 * self.transfer.concurrency),
        )
        session, resolved = credentials.session()
        self.client: Any = session.client(
            "s3", endpoint_url=credentials.endpoint_url or None, config=config
        )
        #: the credentials as resolved (key id, secret and token to scrub, where from)
        self.credentials = attrs.evolve(
            resolved, endpoint_url=str(self.client.meta.endpoint_url or resolved.endpoint_url)
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.identity()})"

    def identity(self) -> S3Identity:
        """Endpoint authority, bucket and key id: what logs and markers name."""
        return self.credentials.redacted(self.bucket)

    def describe(self) -> str:
        return f"s3://{self.bucket} at {self.credentials.endpoint_authority}"

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
        retry: RetryPolicy | None = None,
    ) -> T:
        """``send()`` with bounded retries.

        Raises:
            PreconditionFailed: a 412 (never retried).
            FileNotFoundError: a 404 of the key.
            ObjectRequestError: a failure that is not retried, or the last attempt's failure.
        """
        retry = retry or self.retry
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
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
                elapsed = time.monotonic() - started
                pause = retry.next_pause(attempt, elapsed) if failure.retryable else None
                if pause is None:
                    budget = ""
                    if failure.retryable and attempt < retry.attempts:
                        budget = (
                            f"over {elapsed:.1f} s, the retry budget (raise it with "
                            f"{retry.knob}, now {retry.max_wait_s:g} s)"
                        )
                    raise self.failed(op, key, failure, attempt, budget) from None
                if on_failure is not None:
                    on_failure(failure)
                log.warning(
                    "s3 %s %r at %s: attempt %d failed after %.1f s (%s); retrying in %.2f s "
                    "(budget %g s)",
                    op,
                    key,
                    self.identity(),
                    attempt,
                    elapsed,
                    self.credentials.scrub(f"{failure.code} {failure.status}".strip()),
                    pause,
                    retry.max_wait_s,
                )
                time.sleep(pause)

    def failed(
        self, op: str, key: str, failure: Failure, attempts: int, budget: str = ""
    ) -> ObjectRequestError:
        """The :class:`ObjectRequestError` for ``failure``, with the fix for its kind."""
        creds = self.credentials
        source = creds.source or "the credentials"
        if failure.access_denied:
            token = " (and aws_session_token: expired?)" if creds.aws_session_token else ""
            fix = (
                f"Access denied to {self.describe()} for key id {creds.key_hint}: check "
                f"aws_access_key_id and aws_secret_access_key in {source}{token} and the "
                "key's permissions on the bucket"
            )
        elif failure.code == "NoSuchBucket":
            fix = f"Bucket {self.bucket!r} does not exist: create it or fix the bucket name"
        elif failure.code == "NoCredentialsError":
            fix = f"No credentials from {source}: set them there or give a credentials file"
        elif failure.status == 0:
            fix = (
                f"Check endpoint_url in {source} and that the service at "
                f"{creds.endpoint_authority} is running and reachable"
            )
        elif failure.retryable:
            fix = "The service kept failing; try again later"
        else:
            fix = "The request was refused and not applied"
        error = request_error(self.describe(), op, key, failure, attempts, fix, budget)
        scrubbed = creds.scrub(str(error))
        if scrubbed != str(error):
            error.args = (scrubbed,)
        return error
