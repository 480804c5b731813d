"""``statecraft objects download s3://B/P DIR`` and ``statecraft objects copy s3://A/P s3://B/Q``.

Both are idempotent (an object already present with the same size and sha256 is skipped, so a
second run transfers nothing) and never overwrite (a different existing file or object is
refused before anything moves). ``copy`` streams every object through a local spool file: no
server-side copy. Credentials as for ``statecraft archive``; one credentials file serves both
buckets of a copy (same endpoint and keys).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from statecraft.cli.archive import fail, open_s3_bucket
from statecraft.cli.envelope import emit
from statecraft.cli.progress import Progress
from statecraft.errors import ArchiveError, StatecraftError

__all__ = ["run_objects_copy", "run_objects_download"]


def _progress(args: argparse.Namespace, label: str) -> Progress:
    return Progress(label, enabled=None if not (args.json or args.quiet) else False)


def _data(report, **extra) -> dict:
    return {
        "files": report.files,
        "transferred": report.transferred,
        "skipped": report.skipped,
        "bytes_transferred": report.bytes_transferred,
        "seconds": round(report.seconds, 3),
        **extra,
    }


def run_objects_download(args: argparse.Namespace) -> int:
    """``statecraft objects download``."""
    from statecraft.checkpoint.archive.destination import parse_s3_uri
    from statecraft.checkpoint.archive.objects import download_prefix
    from statecraft.storage.local import LocalStore

    command = "objects download"
    progress = _progress(args, "download")
    try:
        bucket_name, prefix = parse_s3_uri(args.source, what="SOURCE")
        target = Path(args.dir).absolute()
        if target.exists() and not target.is_dir():
            raise ArchiveError(str(target), "is not a directory", "Pass a directory as DIR.")
        bucket = open_s3_bucket(args, bucket_name)
        report = download_prefix(bucket, prefix, LocalStore(str(target)), progress=progress)
    except StatecraftError as exc:
        progress.close()
        return fail(command, args, exc)
    progress.close()
    data = _data(report, source=args.source, dir=str(target))
    text = (
        f"downloaded {args.source} to {target}: {report.transferred} files "
        f"({report.bytes_transferred} bytes), {report.skipped} already there"
    )
    return emit(command, as_json=args.json, data=data, text=text)


def run_objects_copy(args: argparse.Namespace) -> int:
    """``statecraft objects copy``."""
    from statecraft.checkpoint.archive.destination import parse_s3_uri
    from statecraft.checkpoint.archive.objects import copy_prefix

    command = "objects copy"
    progress = _progress(args, "copy")
    try:
        src_name, src_prefix = parse_s3_uri(args.source, what="SOURCE")
        dst_name, dst_prefix = parse_s3_uri(args.destination, what="DESTINATION")
        src = open_s3_bucket(args, src_name)
        dst = src if dst_name == src_name else open_s3_bucket(args, dst_name)
        report = copy_prefix(src, src_prefix, dst, dst_prefix, progress=progress)
    except StatecraftError as exc:
        progress.close()
        return fail(command, args, exc)
    progress.close()
    data = _data(report, source=args.source, destination=args.destination)
    text = (
        f"copied {args.source} to {args.destination}: {report.transferred} objects "
        f"({report.bytes_transferred} bytes), {report.skipped} already there"
    )
    return emit(command, as_json=args.json, data=data, text=text)
