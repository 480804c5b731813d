"""The S3 part of ``statecraft bench dcp``: a direct object-store save of DCP shard files
through statecraft's :class:`~statecraft.storage.objects.ObjectStore` against a plain boto3
``upload_file`` of the same files, against one S3 endpoint.

The statecraft side writes each file the way the direct save's DCP writer does
(``ObjectStore.open_atomic(path)``: the bytes streamed into the writer in DCP-sized chunks,
each hashed with xxh3 for the manifest's record, then one PUT carrying the sha256 in its
metadata on commit); the boto3 side is ``client.upload_file`` with the default
``TransferConfig`` (multipart above 8 MiB, 10 threads) and no digest. ``workers`` files go at
once on both sides (the ranks of one node writing their shards in parallel). Each of
``repeat`` rounds runs both sides in an order that alternates by round, each into a fresh
prefix; every object written is deleted at the end. Reported: median seconds, GB/s and the
ratio boto3 seconds / statecraft seconds (1.0 = as fast; the issue's target is >= 0.9).

:func:`local_s3_bucket` starts a SeaweedFS for the bench (:mod:`.s3_local`, as
``statecraft bench upload`` does) when no service is given.

Example::

    with local_s3_bucket(root) as (bucket, how):
        result = bench_direct_s3(shard_files, bucket, repeat=4)
    result["ratio"]        # boto3 seconds / statecraft seconds
"""

from __future__ import annotations

import os
import secrets
import statistics
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from statecraft.cli.bench.common import rate
from statecraft.errors import ConfigError, ConfigIssue
from statecraft.storage.objects import ObjectStore
from statecraft.storage.s3 import S3Bucket

__all__ = ["DIRECT_S3_TARGET", "bench_direct_s3", "format_direct_s3", "local_s3_bucket"]

DIRECT_S3_TARGET = 0.9  # statecraft direct save throughput vs boto3 upload_file
_CHUNK = 8 << 20  # what one write of the DCP writer hands the store at most


@contextmanager
def local_s3_bucket(
    root: str | os.PathLike[str],
    *,
    credentials: str | None = None,
    endpoint: str | None = None,
    bucket: str = "ckpt-bucket",
) -> Iterator[tuple[S3Bucket, str]]:
    """``(S3Bucket, how)``: the service of ``credentials`` (optionally at ``endpoint``), or a
    local SeaweedFS started under ``root`` and stopped at exit (``how`` says which).

    Raises:
        CredentialsError: ``endpoint`` without credentials, or an unreadable credentials file.
        StatecraftError: no ``weed`` binary, or the local server did not start.
        ObjectRequestError: the bucket does not answer to these keys.
    """
    from statecraft.cli.bench.upload import _service

    with _service(str(root), credentials, endpoint, bucket) as (loaded, how):
        opened = S3Bucket(loaded, bucket)
        opened.check()
        yield opened, how


def _names(shard_files: list[Path]) -> list[str]:
    """Each file's key below the bench prefix: its path relative to the files' common
    directory (``model/__0_0.distcp``)."""
    absolute = [Path(p).absolute() for p in shard_files]
    if len(absolute) == 1:
        return [absolute[0].name]
    common = Path(os.path.commonpath([str(p.parent) for p in absolute]))
    return [p.relative_to(common).as_posix() for p in absolute]


def _ours(store: ObjectStore, path: Path, name: str) -> None:
    with path.open("rb") as source, store.open_atomic(name) as writer:
        while chunk := source.read(_CHUNK):
            writer.write(chunk)


def _run(workers: int, jobs: list[tuple[Path, str]], one: Any) -> float:
    started = time.perf_counter()
    if workers == 1:
        for path, name in jobs:
            one(path, name)
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(lambda job: one(*job), jobs))
    return time.perf_counter() - started


def bench_direct_s3(
    shard_files: list[Path],
    bucket: S3Bucket,
    *,
    repeat: int = 4,
    workers: int = 1,
    prefix: str | None = None,
) -> dict[str, Any]:
    """Time a direct save of ``shard_files`` through statecraft's ``ObjectStore`` against
    boto3 ``upload_file`` of the same files (see the module doc). Deletes what it wrote.

    Args:
        shard_files: the files (a DCP save's ``.distcp`` shards and ``.metadata``).
        bucket: the bucket to write to (its client's endpoint and keys serve both sides).
        repeat: rounds (an even count lets each side go first equally often).
        workers: files written at once on each side.
        prefix: where the rounds write (default ``statecraft-bench-dcp/<time>-<hex>``).

    Returns:
        ``{"files", "bytes", "repeat", "workers", "destination", "seconds": {"statecraft",
        "boto3"}, "samples", "gb_per_s", "ratio", "target", "meets_target"}``.

    Raises:
        ConfigError: no files, a file that is missing, or ``repeat`` / ``workers`` < 1.
        ObjectRequestError: the service refused a request.
    """
    issues = []
    if not shard_files:
        issues.append(ConfigIssue("shard_files", shard_files, "at least one file"))
    issues += [
        ConfigIssue("shard_files", str(p), "an existing file")
        for p in shard_files
        if not Path(p).is_file()
    ]
    for knob, value in (("repeat", repeat), ("workers", workers)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            issues.append(ConfigIssue(knob, value, "a positive integer"))
    if issues:
        raise ConfigError(issues, source="bench_direct_s3")
    from statecraft.cli.bench.upload import _boto3_client

    client = _boto3_client(bucket.credentials)
    paths = [Path(p) for p in shard_files]
    jobs = list(zip(paths, _names(paths), strict=True))
    nbytes = sum(p.stat().st_size for p in paths)
    base = prefix or (
        f"statecraft-bench-dcp/{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(4)}"
    )
    samples: dict[str, list[float]] = {"statecraft": [], "boto3": []}
    written: list[str] = []
    try:
        for number in range(repeat):
            store = ObjectStore(bucket, prefix=f"{base}/statecraft-{number}", name=bucket.bucket)
            boto_prefix = f"{base}/boto3-{number}"

            def ours(path: Path, name: str, store: ObjectStore = store) -> None:
                _ours(store, path, name)

            def boto3(path: Path, name: str, where: str = boto_prefix) -> None:
                client.upload_file(str(path), bucket.bucket, f"{where}/{name}")

            sides = ["statecraft", "boto3"] if number % 2 == 0 else ["boto3", "statecraft"]
            for side in sides:
                samples[side].append(_run(workers, jobs, ours if side == "statecraft" else boto3))
            written += bucket.list(f"{store.prefix}/") + bucket.list(f"{boto_prefix}/")
    finally:
        for key in written:
            bucket.delete(key)
    seconds = {side: statistics.median(values) for side, values in samples.items()}
    ratio = seconds["boto3"] / seconds["statecraft"]
    return {
        "files": len(paths),
        "bytes": nbytes,
        "repeat": repeat,
        "workers": workers,
        "destination": str(bucket.identity()),
        "seconds": seconds,
        "samples": samples,
        "gb_per_s": {side: rate(nbytes, value) for side, value in seconds.items()},
        "ratio": ratio,
        "target": DIRECT_S3_TARGET,
        "meets_target": ratio >= DIRECT_S3_TARGET,
    }


def format_direct_s3(data: dict[str, Any]) -> str:
    """The lines of :func:`bench_direct_s3`'s result for a table."""
    s, g = data["seconds"], data["gb_per_s"]
    return "\n".join(
        [
            f"direct S3 save: {data['files']} files, {data['bytes']} B, {data['workers']} at "
            f"once, median of {data['repeat']} alternating rounds, {data['destination']}",
            f"  statecraft ObjectStore   {s['statecraft']:>9.3f} s {g['statecraft']:>8.3f} GB/s",
            f"  boto3 upload_file        {s['boto3']:>9.3f} s {g['boto3']:>8.3f} GB/s",
            f"  {data['ratio']:.2f}x boto3 (target >= {data['target']})",
        ]
    )
