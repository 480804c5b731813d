"""``statecraft archive publish | fetch | prune-verified | list`` (``prune``, remote retention,
is :mod:`statecraft.cli.archive_prune`).

- ``publish --artifact-dir D --upload-prefix P [--bucket B] [--credentials F]``: archive the
  artifact ``D`` (``.../checkpoint_artifacts/iter_N``) under the checkpoints-root prefix ``P``
  (``s3://bucket/prefix``, or a bare prefix with ``--bucket``); the artifact goes to
  ``P/checkpoint_artifacts/iter_N``, under ``P`` exactly as given, whatever ``P`` ends in (the
  publish transaction).
- ``fetch --artifact-uri s3://.../iter_N --dst D``: an artifact or a full checkpoint, placed at
  ``D/iter_N`` only once every payload is proven (the fetch transaction).
- ``prune-verified --paths D1,D2``: release each artifact's payloads only once its archive is
  proven; the others are kept, each with its reason (exit 1 when any was kept).
- ``list s3://bucket/prefix``: every archived iteration under the prefix and its
  ``checkpoint_artifacts/``, with its size and state, ``complete`` / ``partial`` / ``corrupt``
  (read-only; exit 1 when any is corrupt).

Credentials: ``--credentials F``, else ``$STATECRAFT_S3_CREDENTIALS``. Exit codes: 0 done, 1 a
refusal or an error (the envelope's ``errors`` say which), 2 bad usage (argparse).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from statecraft.cli.envelope import emit
from statecraft.cli.progress import Progress
from statecraft.errors import ArchiveError, CredentialsError, StatecraftError

__all__ = [
    "CREDENTIALS_ENV",
    "open_s3_bucket",
    "run_archive_fetch",
    "run_archive_list",
    "run_archive_prune",
    "run_archive_publish",
]

CREDENTIALS_ENV = "STATECRAFT_S3_CREDENTIALS"


def credentials_setting(args: argparse.Namespace) -> str:
    """``--credentials``, else ``$STATECRAFT_S3_CREDENTIALS``, else ``""``: boto3's default
    credential chain (environment, ``AWS_PROFILE`` and ``~/.aws``, instance and container
    roles). A setting is a JSON file, ``profile:NAME`` or ``default``
    (:func:`~statecraft.storage.s3_credentials.open_credentials`)."""
    return str(getattr(args, "credentials", None) or os.environ.get(CREDENTIALS_ENV) or "")


def open_s3_bucket(args: argparse.Namespace, bucket: str) -> Any:
    """The S3 bucket ``bucket`` with the invocation's credentials, proven reachable; each
    request retries a failing endpoint for ``--retry-wait-s`` seconds (default 90).

    Raises:
        CredentialsError: no credentials anywhere, an unknown profile, or a malformed file.
        ObjectRequestError: unknown bucket, wrong keys, or the endpoint is down.
    """
    from statecraft.checkpoint.archive.open import open_bucket
    from statecraft.storage.s3_retry import RetryPolicy

    setting = credentials_setting(args)
    retry = RetryPolicy(max_wait_s=getattr(args, "retry_wait_s", 90.0), knob="--retry-wait-s")
    try:
        return open_bucket(setting, bucket, retry=retry)
    except CredentialsError as exc:
        if setting:
            raise
        raise CredentialsError(
            f"no object-store credentials: pass --credentials FILE (or profile:NAME), set "
            f"${CREDENTIALS_ENV}, or configure boto3's default chain ({exc})",
            path=None,
            problem="missing",
        ) from None


def _scrubbed(args: argparse.Namespace, exc: StatecraftError) -> str:
    """The error's message without the secret (belt and braces: messages never hold it)."""
    message = str(exc)
    try:
        from statecraft.storage.s3_credentials import open_credentials

        return open_credentials(credentials_setting(args)).scrub(message)
    except (StatecraftError, OSError):
        return message


def fail(command: str, args: argparse.Namespace, exc: StatecraftError, data: Any = None) -> int:
    """The error envelope of ``exc`` (exit 1)."""
    return emit(
        command,
        as_json=args.json,
        data=data,
        exit_code=1,
        errors=[(exc.code, _scrubbed(args, exc))],
    )


def _progress(args: argparse.Namespace, label: str) -> Progress:
    return Progress(label, enabled=None if not (args.json or args.quiet) else False)


# ------------------------------------------------------------------------------ publish
def run_archive_publish(args: argparse.Namespace) -> int:
    """``statecraft archive publish``."""
    from statecraft.checkpoint.archive.destination import ArchiveDestination, parse_s3_uri
    from statecraft.checkpoint.kernel.layout import ARTIFACTS_DIR, parse_iter_dirname
    from statecraft.storage.local import LocalStore

    command = "archive publish"
    try:
        artifact_dir = Path(args.artifact_dir).absolute()
        iteration = parse_iter_dirname(artifact_dir.name)
        if iteration is None or artifact_dir.parent.name != ARTIFACTS_DIR:
            raise ArchiveError(
                str(artifact_dir),
                f"is not an artifact directory ({ARTIFACTS_DIR}/iter_<9 digits>)",
                "Pass --artifact-dir <run>/<RUN_TS>/checkpoint_artifacts/iter_N.",
            )
        if not artifact_dir.is_dir():
            raise ArchiveError(str(artifact_dir), "does not exist", "Check --artifact-dir.")
        if args.upload_prefix.startswith("s3://"):
            bucket_name, prefix = parse_s3_uri(args.upload_prefix, what="--upload-prefix")
            if args.bucket and args.bucket != bucket_name:
                raise ArchiveError(
                    args.upload_prefix,
                    f"names bucket {bucket_name!r} but --bucket is {args.bucket!r}",
                )
        elif args.bucket:
            bucket_name, prefix = args.bucket, args.upload_prefix.strip("/")
        else:
            raise ArchiveError(
                args.upload_prefix,
                "is a bare prefix without a bucket",
                "Pass --upload-prefix s3://<bucket>/<prefix>, or add --bucket <bucket>.",
            )
        bucket = open_s3_bucket(args, bucket_name)
        from statecraft.checkpoint.archive.publish_bindings import publish_artifact

        report = publish_artifact(
            LocalStore(str(artifact_dir.parent)),
            iteration,
            ArchiveDestination.under(bucket, prefix),
        )
    except StatecraftError as exc:
        return fail(command, args, exc)
    data = {
        "iteration": report.iteration,
        "files": report.files,
        "uploaded": report.uploaded,
        "skipped": report.skipped,
        "bytes_uploaded": report.bytes_uploaded,
        "seconds": round(report.seconds, 3),
        "remote_prefix": report.remote_prefix,
        "uri": f"s3://{bucket_name}/{report.remote_prefix}",
    }
    text = (
        f"published {artifact_dir} to {data['uri']}: {report.uploaded} uploaded, "
        f"{report.skipped} already there, {report.bytes_uploaded} bytes"
    )
    return emit(command, as_json=args.json, data=data, text=text)


# -------------------------------------------------------------------------------- fetch
def run_archive_fetch(args: argparse.Namespace) -> int:
    """``statecraft archive fetch``."""
    import posixpath

    from statecraft.checkpoint.archive.destination import parse_s3_uri
    from statecraft.checkpoint.archive.fetch_bindings import fetch_archive
    from statecraft.storage.local import LocalStore

    command = "archive fetch"
    progress = _progress(args, "fetch")
    try:
        bucket_name, prefix = parse_s3_uri(args.artifact_uri, what="--artifact-uri")
        name = posixpath.basename(prefix)
        dst = Path(args.dst).absolute()
        if dst.exists() and not dst.is_dir():
            raise ArchiveError(str(dst), "is not a directory", "Pass a directory as --dst.")
        bucket = open_s3_bucket(args, bucket_name)
        report = fetch_archive(bucket, prefix, LocalStore(str(dst)), name, progress=progress)
    except StatecraftError as exc:
        progress.close()
        return fail(command, args, exc)
    progress.close()
    data = {
        "kind": report.kind,
        "files": report.files,
        "bytes_fetched": report.bytes_fetched,
        "seconds": round(report.seconds, 3),
        "path": report.path,
        "source": args.artifact_uri.rstrip("/"),
    }
    text = (
        f"fetched {report.kind} {data['source']} to {report.path}: {report.files} files, "
        f"{report.bytes_fetched} bytes, every payload verified"
    )
    return emit(command, as_json=args.json, data=data, text=text)


# ------------------------------------------------------------------------ prune-verified
def run_archive_prune(args: argparse.Namespace) -> int:
    """``statecraft archive prune-verified``: exit 0 when every path was released (or had
    been), 1 when any was kept (each with its reason)."""
    from statecraft.checkpoint.archive.prune import PruneDecision, archived_marker, prune_verified

    command = "archive prune-verified"
    paths = [Path(p).absolute() for p in args.paths.split(",") if p.strip()]
    if not paths:
        return fail(command, args, ArchiveError("--paths", "names no directory"))
    decisions: list[PruneDecision] = []
    buckets: dict[str, Any] = {}
    try:
        for path in paths:
            marker = archived_marker(path)
            if isinstance(marker, PruneDecision):  # kept before any bucket is needed
                decisions.append(marker)
                continue
            name = marker.destination.bucket
            if name not in buckets:
                buckets[name] = open_s3_bucket(args, name)
            decisions.append(prune_verified(path, buckets[name]))
    except StatecraftError as exc:
        return fail(command, args, exc, data=_prune_data(decisions))
    kept = [d for d in decisions if not d.pruned]
    errors = [("archive_kept", f"{d.path}: kept: {d.reason}") for d in kept]
    lines = [
        f"{'released' if d.pruned else 'kept'} {d.path}: {d.reason}"
        + (f" ({d.freed_bytes} bytes freed)" if d.pruned else "")
        for d in decisions
    ]
    return emit(
        command,
        as_json=args.json,
        data=_prune_data(decisions),
        errors=errors,
        exit_code=1 if kept else 0,
        text="\n".join(line for line, d in zip(lines, decisions, strict=True) if d.pruned),
    )


def _prune_data(decisions: list[Any]) -> dict[str, Any]:
    return {
        "decisions": [
            {"path": d.path, "pruned": d.pruned, "reason": d.reason, "freed_bytes": d.freed_bytes}
            for d in decisions
        ],
        "freed_bytes": sum(d.freed_bytes for d in decisions),
    }


# ---------------------------------------------------------------------------------- list
def run_archive_list(args: argparse.Namespace) -> int:
    """``statecraft archive list s3://bucket/prefix``: every archived iteration under the
    prefix (and its ``checkpoint_artifacts/``) with its size and state (complete / partial /
    corrupt); read-only. Exit 0 when nothing is corrupt, 1 otherwise or on an error."""
    from statecraft.checkpoint.archive.destination import parse_s3_uri
    from statecraft.checkpoint.archive.listing import list_archive
    from statecraft.cli.inspect.remote import ReadOnlyBucket
    from statecraft.cli.inspect.remote_archive import archive_lines

    command = "archive list"
    try:
        bucket_name, prefix = parse_s3_uri(args.prefix, what="PREFIX")
        bucket = open_s3_bucket(args, bucket_name)
        listing = list_archive(ReadOnlyBucket(bucket), prefix)
    except StatecraftError as exc:
        return fail(command, args, exc, data={"root": args.prefix})
    data = listing.to_dict()
    corrupt = [it for it in listing.iterations if it.state == "corrupt"]
    errors = [("archive_corrupt", f"{listing.uri}/{it.name}: {it.reason}") for it in corrupt]
    text = "\n".join(archive_lines(data))
    if not listing.iterations:
        text = f"{listing.uri}: no archived iteration there"
    return emit(
        command,
        as_json=args.json,
        data=data,
        errors=errors,
        exit_code=1 if corrupt else 0,
        text=text,
    )
