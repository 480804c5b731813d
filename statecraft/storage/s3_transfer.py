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

Download: ranged GETs of the etag a HEAD saw (``If-Match``), ``part_size`` each and at most
``concurrency`` in flight, written with ``pwrite`` into a sibling temporary; a dropped body is
resumed from the byte reached. The file is checked against the size and the stored sha256,
fsynced and renamed into place. Nothing is placed unless every byte arrived and matched.

Hashing: an upload needs the sha256 before ``CreateMultipartUpload`` (S3 fixes an object's
metadata when the upload starts and nothing here relies on server-side copy), so a file larger
than one part whose digest the caller does not pass is read once to hash it first; a file of
one part is read once, hashed and sent from the same bytes. A download hashes while it
fetches: the calling thread waits for the ranges in file order and hashes each one from the
temporary (page cache) as soon as it has landed, then asks the kernel to start writing it
back, so neither the hashing nor most of the final ``fsync`` is left for after the last byte.
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
from statecraft.storage.bucket import RemoteObject
from statecraft.storage.filesystem import OsFilesystem
from statecraft.storage.s3_requests import SHA256_METADATA, S3Requests, log
from statecraft.storage.s3_retry import Failure

__all__ = ["download_file", "file_sha256", "upload_bytes", "upload_file"]

#: the least an abort of a failed multipart upload retries (seconds), whatever the budget
ABORT_WAIT_S = 30.0

#: starts the device writeback of ranges already hashed (a hint; durability is the fsync)
_WRITEBACK = OsFilesystem()


def file_sha256(path: Path, chunk_size: int = 1 << 20) -> str:
    """The hex sha256 of a file's bytes, read in ``chunk_size`` blocks into one buffer."""
    digest = hashlib.sha256()
    buffer = bytearray(chunk_size)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as f:
        while count := f.readinto(buffer):
            digest.update(view[:count])
    return digest.hexdigest()


def _hash_range(fd: int, digest: Any, start: int, end: int, view: memoryview) -> None:
    """Feed bytes ``[start, end)`` of ``fd`` into ``digest`` through the buffer ``view``."""
    while start < end:
        count = os.preadv(fd, [view[: min(len(view), end - start)]], start)
        if count <= 0:
            raise StoreError(f"the download temporary ended at byte {start} (expected {end})")
        digest.update(view[:count])
        start += count


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


def download_file(bucket: S3Requests, key: str, path: Path) -> RemoteObject:
    """Fetch ``key`` into ``path`` (see the module contract)."""
    there = bucket.stat(key)
    if there is None:
        raise FileNotFoundError(f"no object {key!r} in {bucket.describe()}")
    temporary = path.with_name(f".{path.name}.download-{os.getpid()}")
    part_size = bucket.transfer.part_size_for(there.size)
    ranges = [(a, min(a + part_size, there.size)) for a in range(0, there.size, part_size)]
    try:
        with open(temporary, "w+b", buffering=0) as out:
            fd = out.fileno()
            jobs = [_range_fetcher(bucket, key, there, fd, r) for r in ranges]
            digest = hashlib.sha256() if there.sha256 else None
            try:
                _fetch_in_order(bucket, fd, jobs, ranges, digest)
            except PreconditionFailed:
                raise ObjectRequestError(
                    f"{bucket.describe()}: {key!r} changed during the download (etag "
                    f"{there.etag} is gone); nothing was placed at {path}. Download again",
                    op="get",
                    key=key,
                ) from None
            os.fsync(fd)
        size = temporary.stat().st_size
        sha = digest.hexdigest() if digest is not None else ""
        _check(bucket, key, there, size, sha)
        os.replace(temporary, path)
        _fsync_dir(path.parent)
    except BaseException:
        try:
            temporary.unlink()
        except FileNotFoundError:
            pass
        raise
    return there


def _fetch_in_order(
    bucket: S3Requests,
    fd: int,
    jobs: list[Callable[[], None]],
    ranges: list[tuple[int, int]],
    digest: Any,
) -> None:
    """Run the range ``jobs`` (at most ``transfer.concurrency`` at once) while this thread
    takes the ranges in file order as they land: it hashes each into ``digest`` (read back
    from the page cache) and starts its writeback. The first error in file order wins and
    the jobs not started are cancelled."""
    view = memoryview(bytearray(bucket.transfer.chunk_size)) if digest is not None else None

    def landed(span: tuple[int, int]) -> None:
        if digest is not None and view is not None:
            _hash_range(fd, digest, span[0], span[1], view)
        _WRITEBACK.start_writeback(fd, span[0], span[1] - span[0])

    if len(jobs) <= 1:
        for job, span in zip(jobs, ranges, strict=True):
            job()
            landed(span)
        return
    with cf.ThreadPoolExecutor(bucket.transfer.concurrency) as pool:
        futures = [pool.submit(job) for job in jobs]
        try:
            for future, span in zip(futures, ranges, strict=True):
                future.result()
                landed(span)
        except BaseException:
            for future in futures:
                future.cancel()
            raise


def _range_fetcher(
    bucket: S3Requests, key: str, there: RemoteObject, fd: int, span: tuple[int, int]
) -> Callable[[], None]:
    """A job fetching bytes ``span`` of the object into ``fd``; a retry after a dropped body
    asks only for the bytes not yet written."""
    position = [span[0]]

    def send() -> None:
        response = bucket.client.get_object(
            Bucket=bucket.bucket,
            Key=key,
            Range=f"bytes={position[0]}-{span[1] - 1}",
            IfMatch=there.etag,
        )
        for block in response["Body"].iter_chunks(bucket.transfer.chunk_size):
            os.pwrite(fd, block, position[0])
            position[0] += len(block)
        if position[0] < span[1]:
            raise _short_body()

    return lambda: bucket.call("get", key, send)


def _short_body() -> Exception:
    import botocore.exceptions as bce

    error: Exception = bce.IncompleteReadError(actual_bytes=0, expected_bytes=1)
    return error


def _check(bucket: S3Requests, key: str, there: RemoteObject, size: int, sha: str) -> None:
    if size != there.size or (there.sha256 and sha != there.sha256):
        raise ObjectRequestError(
            f"{bucket.describe()}: {key!r} arrived as {size} bytes with sha256 {sha}; its "
            f"HEAD promised {there.size} bytes with sha256 {there.sha256 or '(none stored)'}. "
            "Nothing was placed; download again",
            op="get",
            key=key,
        )


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
