"""Open the archive bucket of a run: credentials, client, proof that the bucket answers.

:func:`open_bucket` is called once per run, on rank 0, before training starts (the
Checkpointer's ``resume()`` or first use), so wrong credentials, an unknown bucket or an
endpoint that is down fail before any step and before anything local is touched.
:func:`upload_destination` turns the ``upload.*`` knobs into an
:class:`~statecraft.checkpoint.archive.destination.ArchiveDestination`.

Example::

    destination = upload_destination(config, run, run_ts)   # None when upload is off
    report = upload_checkpoint(store, 100, destination)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from statecraft.checkpoint.archive.destination import ArchiveDestination, default_prefix
from statecraft.checkpoint.kernel.layout import RunIdentity
from statecraft.errors import ConfigError, ConfigIssue, CredentialsError, ObjectRequestError
from statecraft.storage.s3 import S3Bucket
from statecraft.storage.s3_credentials import load_credentials

__all__ = ["check_upload_knobs", "open_bucket", "resolve_credentials_path", "upload_destination"]


def resolve_credentials_path(path: str, *, base: str | os.PathLike[str] | None = None) -> str:
    """``path`` made absolute: a relative path is resolved against ``base`` (default: the
    current working directory when called)."""
    candidate = Path(path).expanduser()
    if not candidate.is_absolute():
        candidate = Path(base if base is not None else os.getcwd()) / candidate
    return str(candidate)


def open_bucket(credentials_path: str, bucket: str, **settings: Any) -> S3Bucket:
    """The bucket ``bucket`` at the endpoint of the credentials file ``credentials_path``,
    proven reachable with these keys (one HEAD of the bucket).

    Args:
        credentials_path: the JSON credentials file (relative: against the CWD).
        bucket: the bucket name.
        settings: passed to :class:`~statecraft.storage.s3.S3Bucket` (retry, transfer,
            timeouts).

    Raises:
        CredentialsError: the file is missing, unreadable or malformed (named; no secret).
        ObjectRequestError: the bucket does not exist, the keys are refused, or the endpoint
            does not answer; the message names the bucket, the endpoint and the credentials
            file, never the secret.
    """
    path = resolve_credentials_path(credentials_path)
    credentials = load_credentials(path)
    opened = S3Bucket(credentials, bucket, **settings)
    try:
        opened.check()
    except ObjectRequestError as exc:
        text = credentials.scrub(str(exc))
        raise ObjectRequestError(
            f"archive bucket s3://{bucket} at {credentials.endpoint_authority} cannot be "
            f"used with the keys of {path}: {text}. Check upload.bucket, the endpoint and the "
            "keys in the credentials file (or set upload.enabled=false); nothing was written"
        ) from None
    return opened


def check_upload_knobs(config: Any, *, credentials: bool = True) -> None:
    """With ``upload.enabled``: ``upload.bucket`` (and ``upload.credentials``) must be set.

    Raises:
        ConfigError: naming each empty knob and what it must hold.
    """
    upload = config.upload
    issues = []
    if not str(upload.bucket).strip():
        issues.append(ConfigIssue("upload.bucket", upload.bucket, "the archive bucket's name"))
    if credentials and not str(upload.credentials).strip():
        issues.append(
            ConfigIssue(
                "upload.credentials",
                upload.credentials,
                "the path of the JSON credentials file (relative paths: against the CWD)",
            )
        )
    if issues:
        raise ConfigError(issues, source="upload (upload.enabled=true)")


def upload_destination(
    config: Any, run: RunIdentity, run_ts: str, *, bucket: Any = None
) -> ArchiveDestination | None:
    """The archive destination of the ``upload.*`` knobs, or ``None`` when
    ``upload.enabled`` is false.

    ``upload.prefix`` ``""`` is :func:`default_prefix` (``<project>/<group>/<name>/<RUN_TS>/
    checkpoints``, mirroring the local layout); a prefix is the checkpoints root of the
    archive (``iter_N`` lands at ``<prefix>/iter_N/``).

    Args:
        config: a ``CheckpointConfig``.
        bucket: an already opened bucket (tests, the harness); default: :func:`open_bucket`.

    Raises:
        ConfigError: ``upload.bucket`` or ``upload.credentials`` is empty (naming the knob).
        CredentialsError / ObjectRequestError: as :func:`open_bucket`.
    """
    upload = config.upload
    if not upload.enabled:
        return None
    check_upload_knobs(config, credentials=bucket is None)
    if bucket is None:
        try:
            bucket = open_bucket(upload.credentials, upload.bucket)
        except CredentialsError as exc:
            raise CredentialsError(
                f"upload.credentials: {exc}",
                path=exc.fields.get("path"),
                problem=exc.fields.get("problem"),
            ) from None
    prefix = str(upload.prefix).strip("/") or default_prefix(run, run_ts)
    return ArchiveDestination(
        bucket,
        prefix,
        catch_up_per_save=upload.catch_up_per_save,
        pending_disk_share=upload.pending_disk_share,
    )
