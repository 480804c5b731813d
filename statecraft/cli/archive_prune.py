"""``statecraft archive prune s3://bucket/prefix --keep-last N [--dry-run | --apply]``: remote
retention of an archive prefix (or a direct root) by hand.

A dry run by default: it prints what it would keep and delete, and why, and deletes nothing;
``--apply`` deletes. The rules are :mod:`~statecraft.checkpoint.archive.remote_retention`'s
(never the newest published iteration, never the one ``latest_checkpoint.txt`` names, never a
corrupt one; artifacts under ``checkpoint_artifacts/`` are never touched) and each removal runs
the ``archive_prune`` machine (the commit record first, then the objects). Exit 0 done, 1 an
error (the envelope's ``errors`` say which), 2 bad usage.
"""

from __future__ import annotations

import argparse

from statecraft.cli.archive import fail, open_s3_bucket
from statecraft.cli.envelope import emit
from statecraft.errors import StatecraftError

__all__ = ["run_archive_prune_remote"]


def run_archive_prune_remote(args: argparse.Namespace) -> int:
    """``statecraft archive prune``."""
    from statecraft.checkpoint.archive.destination import parse_s3_uri
    from statecraft.checkpoint.archive.remote_retention import prune_remote, remote_latest

    command = "archive prune"
    dry_run = not args.apply
    try:
        bucket_name, prefix = parse_s3_uri(args.prefix, what="PREFIX")
        bucket = open_s3_bucket(args, bucket_name)
        report = prune_remote(
            bucket,
            prefix,
            args.keep_last,
            protected=remote_latest(bucket, prefix),
            dry_run=dry_run,
            verify=True,
        )
    except StatecraftError as exc:
        return fail(command, args, exc, data={"root": args.prefix})
    verb = "would delete" if dry_run else "deleted"
    lines = [
        f"{row.key_prefix}: {'keep' if row.action == 'keep' else verb} ({row.state}; {row.reason})"
        for row in report.rows
    ]
    doomed = [r for r in report.rows if r.action == "delete"]
    if dry_run:
        lines.append(
            f"dry run: {len(doomed)} iteration(s) would be deleted from {report.root} "
            "(nothing was deleted; pass --apply to delete)"
        )
    else:
        lines.append(
            f"deleted {len(report.deleted)} iteration(s) from {report.root} "
            f"({report.freed_bytes} bytes)"
        )
    if not report.rows:
        lines = [f"{report.root}: no archived iteration there"]
    return emit(command, as_json=args.json, data=report.to_dict(), text="\n".join(lines))
