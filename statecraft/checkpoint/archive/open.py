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

from typing import Any

from statecraft.checkpoint.archive.destination import ArchiveDestination, default_prefix
from statecraft.checkpoint.kernel.layout import RunIdentity
from statecraft.errors import ConfigError, ConfigIssue, CredentialsError, ObjectRequestError
from statecraft.storage.s3 import S3Bucket
from statecraft.storage.s3_credentials import open_credentials
from statecraft.storage.s3_retry import RetryPolicy

__all__ = ["check_upload_knobs", "open_bucket", "upload_destination", "upload_retry"]


def open_bucket(credentials: str, bucket: str, **settings: Any) -> S3Bucket:
    """The bucket ``bucket`` reached with the credentials setting ``credentials``, proven
    reachable with these keys (one HEAD of the bucket).

    Args:
        credentials: what :func:`~statecraft.storage.s3_credentials.open_credentials` takes:
            ``""``/``"default"`` (boto3's default chain), ``"profile:NAME"``, or the path of a
            JSON credentials file (relative: against the CWD).
        bucket: the bucket name.
        settings: passed to :class:`~statecraft.storage.s3.S3Bucket` (retry, transfer,
            timeouts).

    Raises:
        CredentialsError: no credentials anywhere, an unknown profile, or a file that is
            missing, unreadable or malformed (named; no secret).
        ObjectRequestError: the bucket does not exist, the keys are refused, or the endpoint
            does not answer; the message names the bucket, the endpoint and where the keys
            came from, never the secret.
    """
    opened_credentials = open_credentials(credentials)
    opened = S3Bucket(opened_credentials, bucket, **settings)
    try:
        opened.check()
    except ObjectRequestError as exc:
        text = opened_credentials.scrub(str(exc))
        source = opened_credentials.source or "boto3's default credential chain"
        raise ObjectRequestError(
            f"archive bucket s3://{bucket} at {opened_credentials.endpoint_authority} cannot be "
            f"used with the keys of {source}: {text}. Check upload.bucket, the endpoint and "
            "upload.credentials (or set upload.enabled=false); nothing was written"
        ) from None
    return opened


def upload_retry(upload: Any) -> RetryPolicy:
    """The retries of each request to the archive bucket of the ``upload.*`` knobs: the
    outage it rides out is ``upload.retry_wait_s`` (named in the error it ends with)."""
    return RetryPolicy(max_wait_s=upload.retry_wait_s, knob="upload.retry_wait_s")


def check_upload_knobs(config: Any) -> None:
    """With ``upload.enabled``: ``upload.bucket`` must be set (an empty
    ``upload.credentials`` is boto3's default credential chain).

    Raises:
        ConfigError: naming each empty knob and what it must hold.
    """
    upload = config.upload
    issues = []
    if not str(upload.bucket).strip():
        issues.append(ConfigIssue("upload.bucket", upload.bucket, "the archive bucket's name"))
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
    check_upload_knobs(config)
    if bucket is None:
        try:
            bucket = open_bucket(upload.credentials, upload.bucket, retry=upload_retry(upload))
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
        keep_last=upload.keep_last,
    )
