"""Streaming transfers of large files for :class:`~statecraft.storage.s3.S3Bucket`, through
the client and retry loop of its :class:`~statecraft.storage.s3_requests.S3Requests`.

Upload: a file up to ``part_size`` is one PUT (``S3Bucket.put_file`` sends it); a larger one
is a multipart upload of
``part_size`` parts read with ``pread``, at most ``concurrency`` in flight (the memory bound),
each part retried on its own (re-sending a part number is idempotent), completed with the
same condition a PUT would carry, and aborted on failure (the abort retries for at least
:data:`ABORT_WAIT_S`, so an upload that failed because the service went down leaves no
orphaned parts once it is back within that time). A completion retried after an
attempt whose response was lost meets 412 or ``NoSuchUpload``; it then compares the object
there (size and stored sha256) with the file and succeeds when they are equal.

Downloads are :mod:`statecraft.storage.s3_download`'s.

Hashing: an upload needs the sha256 before ``CreateMultipartUpload`` (S3 fixes an object's
metadata when the upload starts and nothing here relies on server-side copy), so a file larger
than one part whose digest the caller does not pass is read once to hash it first; a file of
one part is read once, hashed and sent from the same bytes. The multipart loop stays
hand-written: s3transfer 0.19.3's upload does not take ``IfNoneMatch`` on the completion
(publish and the lease rely on it) and sends no sha256 computed in the stream.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from statecraft.errors import ObjectRequestError, PreconditionFailed, StoreError
from statecraft.storage.s3_requests import SHA256_METADATA, S3Requests, log
from statecraft.storage.s3_retry import Failure

__all__ = ["file_sha256", "upload_bytes", "upload_file"]

#: the least an abort of a failed multipart upload retries (seconds), whatever the budget
ABORT_WAIT_S = 30.0


def file_sha256(path: Path, chunk_size: int = 1 << 20) -> str:
    """The hex sha256 of a file's bytes, read in ``chunk_size`` blocks into one buffer."""
    digest = hashlib.sha256()
    buffer = bytearray(chunk_size)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as f:
        while count := f.readinto(buffer):
            digest.update(view[:count])
    return digest.hexdigest()


def upload_file(
    bucket: S3Requests, key: str, path: Path, *, if_none_match: bool, sha256: str | None
) -> str:
    """Upload ``path``, larger than one part, to ``key`` by multipart (see the module
    contract); returns the etag."""
    size = path.stat().st_size
    settings = bucket.transfer
    if if_none_match and bucket.stat(key) is not None:
        raise PreconditionFailed(f"If-None-Match: * refused: {key!r} exists in {bucket.describe()}")
    sha = sha256 or file_sha256(path, settings.chunk_size)
    client = bucket.client

    def create() -> str:
        response = client.create_multipart_upload(
            Bucket=bucket.bucket, Key=key, Metadata={SHA256_METADATA: sha}
        )
        return str(response["UploadId"])

    upload_id = bucket.call("create-multipart", key, create)
    try:
        parts = _upload_parts(bucket, key, upload_id, path, size)
        return _complete(bucket, key, upload_id, parts, size, sha, if_none_match)
    except BaseException:
        _abort(bucket, key, upload_id)
        raise


def _upload_parts(
    bucket: S3Requests, key: str, upload_id: str, path: Path, size: int
) -> list[dict[str, Any]]:
    with open(path, "rb") as f:
        fd = f.fileno()

        def read(offset: int, expected: int, number: int) -> bytes:
            data = os.pread(fd, expected, offset)
            if len(data) != expected:
                raise StoreError(
                    f"{path}: the file shrank during the upload to {key!r} (part {number} "
                    f"read {len(data)} of {expected} bytes); nothing was completed"
                )
            return data

        return _send_parts(bucket, key, upload_id, size, read)


def _send_parts(
    bucket: S3Requests,
    key: str,
    upload_id: str,
    size: int,
    read: Callable[[int, int, int], bytes],
) -> list[dict[str, Any]]:
    """Upload ``size`` bytes as parts, ``read(offset, length, part number)`` giving each, at
    most ``concurrency`` in flight; returns the parts list of the completion."""
    part_size = bucket.transfer.part_size_for(size)
    count = -(-size // part_size)
    etags: dict[int, str] = {}
    with cf.ThreadPoolExecutor(bucket.transfer.concurrency) as pool:

        def one(number: int) -> str:
            offset = (number - 1) * part_size
            data = read(offset, min(part_size, size - offset), number)

            def send() -> str:
                response = bucket.client.upload_part(
                    Bucket=bucket.bucket,
                    Key=key,
                    UploadId=upload_id,
                    PartNumber=number,
                    Body=data,
                )
                return str(response["ETag"])

            return bucket.call("upload-part", f"{key}#{number}", send)

        pending: dict[cf.Future[str], int] = {}

        def collect(futures: set[cf.Future[str]]) -> None:
            for future in futures:
                etags[pending.pop(future)] = future.result()

        try:
            for number in range(1, count + 1):
                while len(pending) >= bucket.transfer.concurrency:
                    done, _ = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
                    collect(done)
                pending[pool.submit(one, number)] = number
            collect(set(cf.wait(pending).done))
        except BaseException:
            for future in pending:
                future.cancel()
            raise
    return [{"PartNumber": n, "ETag": etags[n]} for n in range(1, count + 1)]


def upload_bytes(
    bucket: S3Requests, key: str, data: bytes, *, if_none_match: bool, sha256: str | None
) -> str:
    """Upload ``data`` held in memory to ``key`` by multipart (``part_size`` parts, at most
    ``concurrency`` in flight), with the sha256 in its metadata and the same condition and
    completion rules as :func:`upload_file`; returns the etag. For data larger than one part
    (the caller sends smaller data by one PUT)."""
    size = len(data)
    if if_none_match and bucket.stat(key) is not None:
        raise PreconditionFailed(f"If-None-Match: * refused: {key!r} exists in {bucket.describe()}")
    sha = sha256 or hashlib.sha256(data).hexdigest()
    view = memoryview(data)

    def create() -> str:
        response = bucket.client.create_multipart_upload(
            Bucket=bucket.bucket, Key=key, Metadata={SHA256_METADATA: sha}
        )
        return str(response["UploadId"])

    upload_id = bucket.call("create-multipart", key, create)
    try:
        parts = _send_parts(
            bucket, key, upload_id, size, lambda offset, n, _: bytes(view[offset : offset + n])
        )
        return _complete(bucket, key, upload_id, parts, size, sha, if_none_match)
    except BaseException:
        _abort(bucket, key, upload_id)
        raise


def _complete(
    bucket: S3Requests,
    key: str,
    upload_id: str,
    parts: list[dict[str, Any]],
    size: int,
    sha: str,
    if_none_match: bool,
) -> str:
    failed: list[Failure] = []
    condition = {"IfNoneMatch": "*"} if if_none_match else {}

    def send() -> str:
        response = bucket.client.complete_multipart_upload(
            Bucket=bucket.bucket,
            Key=key,
            UploadId=upload_id,
            MultipartUpload={"Parts": parts},
            **condition,
        )
        return str(response["ETag"])

    try:
        return bucket.call("complete-multipart", key, send, on_failure=failed.append)
    except (PreconditionFailed, FileNotFoundError) as error:
        if failed:
            there = bucket.stat(key)
            if there is not None and there.size == size and there.sha256 == sha:
                return there.etag
        if isinstance(error, PreconditionFailed):
            raise PreconditionFailed(
                f"If-None-Match: * refused: {key!r} exists in {bucket.describe()}"
            ) from None
        raise ObjectRequestError(
            f"{bucket.describe()}: multipart upload of {key!r} vanished before it completed "
            "(aborted by another client or by the service's lifecycle rules); upload again",
            op="complete-multipart",
            key=key,
        ) from None


def _abort(bucket: S3Requests, key: str, upload_id: str) -> None:
    """Abort the upload, retrying for at least :data:`ABORT_WAIT_S` within the policy's
    attempts (an upload that failed because the service went away leaves no orphaned parts
    once it is back). Best effort beyond that: a failed abort leaves parts the bucket's
    lifecycle rules reclaim."""
    patient = attrs.evolve(bucket.retry, max_wait_s=max(bucket.retry.max_wait_s, ABORT_WAIT_S))
    try:
        bucket.call(
            "abort-multipart",
            key,
            lambda: bucket.client.abort_multipart_upload(
                Bucket=bucket.bucket, Key=key, UploadId=upload_id
            ),
            retry=patient,
        )
    except FileNotFoundError:  # NoSuchUpload: already gone
        pass
    except ObjectRequestError:
        log.warning(
            "s3 abort of the multipart upload of %r at %s failed; its parts stay until the "
            "bucket's lifecycle rules reclaim them (upload id %s)",
            key,
            bucket.identity(),
            upload_id,
        )
