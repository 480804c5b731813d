"""The direct object-store primary's root: ``s3://<bucket>/<prefix>`` where the checkpoints
of one attempt live (``checkpoint_store.backend=object_store``).

:func:`open_direct_root` turns the ``checkpoint_store.*`` knobs and the attempt into a
:class:`DirectRoot` (an :class:`~statecraft.storage.objects.ObjectStore` rooted at the
checkpoints prefix), proving first that the credentials file parses and that the bucket
answers to its keys (one HEAD of the bucket), so wrong credentials, an unknown bucket or an
endpoint that is down fail before anything is written. An empty ``checkpoint_store.prefix``
mirrors the local layout, ``<project>/<group>/<name>/<RUN_TS>/checkpoints``
(:func:`~statecraft.checkpoint.archive.destination.default_prefix`).

:func:`parse_direct_uri` reads ``s3://bucket/prefix`` or ``s3://bucket/prefix/iter_N`` (an
explicit ``resume=``).

Example::

    root = open_direct_root(config.checkpoint_store, attempt, run=run)
    lease = acquire_object_lease(root.store, ttl_s=config.checkpoint_store.lease_ttl_s,
                                 takeover=config.checkpoint_store.lease_takeover)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs

from statecraft.checkpoint.archive.destination import default_prefix, parse_s3_uri
from statecraft.checkpoint.config.schema import CheckpointStoreConfig
from statecraft.checkpoint.kernel.layout import (
    RunAttempt,
    RunIdentity,
    iter_dirname,
    parse_iter_dirname,
)
from statecraft.errors import ConfigError, ConfigIssue, CredentialsError, ObjectRequestError
from statecraft.storage.objects import ArchiveBucket, ObjectStore
from statecraft.storage.s3 import S3Bucket
from statecraft.storage.s3_credentials import open_credentials
from statecraft.storage.s3_retry import RetryPolicy

__all__ = ["DirectRoot", "check_root_prefix", "open_direct_root", "parse_direct_uri"]


@attrs.frozen
class DirectRoot:
    """A direct checkpoints root.

    Attributes:
        store: the :class:`ObjectStore` rooted at the checkpoints prefix (``iter_N/...`` and
            ``latest_checkpoint.txt`` are paths of it).
        uri: ``s3://<bucket>/<prefix>`` (for messages, ``statecraft inspect``, ``resume=``).
        bucket: the bucket client (:class:`~statecraft.storage.s3.S3Bucket`, or a
            :class:`~statecraft.storage.objects.SimBucket` under the crash harness).
        keep_last: each save's retention (``checkpoint_store.keep_last``; ``0`` keeps all;
            :mod:`~statecraft.checkpoint.direct.retention`).
    """

    store: ObjectStore
    uri: str
    bucket: ArchiveBucket
    keep_last: int = 0

    @property
    def prefix(self) -> str:
        """The checkpoints prefix (no leading or trailing ``/``)."""
        return self.store.prefix

    def iteration_uri(self, iteration: int) -> str:
        """``s3://<bucket>/<prefix>/iter_N``."""
        return f"{self.uri.rstrip('/')}/{iter_dirname(iteration)}"

    @classmethod
    def of(cls, bucket: ArchiveBucket, prefix: str, *, keep_last: int = 0) -> DirectRoot:
        """The root at ``prefix`` of an already opened ``bucket`` (``keep_last``: the
        retention each save applies, ``checkpoint_store.keep_last``; ``0`` keeps all).

        Raises:
            ConfigError: ``prefix`` is not a clean key prefix (:func:`check_root_prefix`).
        """
        prefix = check_root_prefix(prefix)
        name = bucket.identity().bucket
        uri = f"s3://{name}/{prefix}" if prefix else f"s3://{name}"
        return cls(ObjectStore(bucket, prefix=prefix, name=name), uri, bucket, keep_last)


def check_root_prefix(prefix: str, *, knob: str = "checkpoint_store.prefix") -> str:
    """``prefix`` without surrounding ``/``, refused when a segment is empty, ``.``, ``..`` or
    holds a NUL or a backslash (a key prefix that would not read back as the same root).

    Raises:
        ConfigError: naming ``knob``.
    """
    clean = str(prefix).strip("/")
    if clean:
        bad = [s for s in clean.split("/") if s in ("", ".", "..") or "\0" in s or "\\" in s]
        if bad:
            raise ConfigError(
                [
                    ConfigIssue(
                        knob,
                        prefix,
                        "a key prefix of plain segments separated by single '/' (no empty, "
                        "'.' or '..' segment, no backslash)",
                    )
                ],
                source="checkpoint_store",
            )
    return clean


def parse_direct_uri(uri: str) -> tuple[str, str, int | None]:
    """``s3://bucket/prefix[/iter_N]`` as ``(bucket, root_prefix, iteration or None)``.

    The last segment names an iteration when it is ``iter_<9 digits>``; the root is then the
    prefix above it.

    Examples:
        >>> parse_direct_uri("s3://ckpt/p/run/checkpoints/iter_000000100/")
        ('ckpt', 'p/run/checkpoints', 100)
        >>> parse_direct_uri("s3://ckpt/p/run/checkpoints")
        ('ckpt', 'p/run/checkpoints', None)

    Raises:
        ConfigError: not an ``s3://`` URI, a bad bucket name, an unclean prefix, or a last
            segment that looks like ``iter_...`` without 9 digits.
    """
    bucket, key = parse_s3_uri(uri, what="resume")
    key = check_root_prefix(key, knob="resume")
    head, _, last = key.rpartition("/")
    if last.startswith("iter_"):
        iteration = parse_iter_dirname(last)
        if iteration is None:
            raise ConfigError(
                [ConfigIssue("resume", uri, "an iteration written iter_<9 digits>")],
                source="direct checkpoint URI",
            )
        return bucket, head, iteration
    return bucket, key, None


def _run_from_attempt(attempt: RunAttempt) -> RunIdentity:
    """The ``<project>/<group>/<name>`` of an attempt's directory
    (``<root>/<project>/<group>/<name>/<RUN_TS>``, or ``.../<name>`` for a legacy one)."""
    job = Path(attempt.run_dir) if attempt.legacy else Path(attempt.run_dir).parent
    parts = job.parts
    if len(parts) < 3:
        raise ConfigError(
            [ConfigIssue("checkpoint_store.prefix", "", "a prefix (the run identity is unknown)")],
            source=f"attempt {attempt.run_dir}",
        )
    return RunIdentity(parts[-3], parts[-2], parts[-1])


def open_direct_root(
    config: CheckpointStoreConfig,
    attempt: RunAttempt,
    *,
    run: RunIdentity | None = None,
    bucket: ArchiveBucket | None = None,
    credentials_base: str | os.PathLike[str] | None = None,
    **settings: Any,
) -> DirectRoot:
    """The direct root of this attempt, with the bucket proven usable. Writes nothing.

    Args:
        config: the ``checkpoint_store.*`` knobs (``bucket`` required; an empty
            ``credentials`` is boto3's default credential chain).
        attempt: the resolved attempt (its RUN_TS names the default prefix).
        run: the job's identity (default: read from the attempt's directory).
        bucket: an already opened bucket (tests, the crash harness): no credentials read.
        credentials_base: what a relative ``checkpoint_store.credentials`` is resolved
            against (default: the current working directory).
        settings: passed to :class:`~statecraft.storage.s3.S3Bucket` (retry, transfer,
            timeouts).

    Raises:
        ConfigError: ``checkpoint_store.bucket`` is empty, the bucket name is not DNS-style,
            or the prefix is unclean (naming the knob).
        CredentialsError: the credentials file is missing, unreadable or malformed, or no
            credentials were found (named, never the secret).
        ObjectRequestError: the bucket does not exist, the keys are refused, or the endpoint
            does not answer; the message names the bucket, the endpoint and the credentials
            file (never the secret) and says nothing was written.
    """
    issues = []
    if not config.bucket.strip():
        issues.append(ConfigIssue("checkpoint_store.bucket", config.bucket, "the bucket's name"))
    if issues:
        raise ConfigError(issues, source="checkpoint_store (backend=object_store)")
    parse_s3_uri(f"s3://{config.bucket}", what="checkpoint_store.bucket")  # DNS-style name
    prefix = check_root_prefix(config.prefix) or default_prefix(
        run if run is not None else _run_from_attempt(attempt), attempt.run_ts
    )
    if bucket is None:
        bucket = _open_bucket(config, credentials_base, **settings)
    return DirectRoot.of(bucket, prefix, keep_last=config.keep_last)


def _open_bucket(
    config: CheckpointStoreConfig, base: str | os.PathLike[str] | None, **settings: Any
) -> S3Bucket:
    try:
        credentials = open_credentials(config.credentials, base=base)
        settings.setdefault(
            "retry",
            RetryPolicy(max_wait_s=config.retry_wait_s, knob="checkpoint_store.retry_wait_s"),
        )
        opened = S3Bucket(credentials, config.bucket, **settings)
    except CredentialsError as exc:
        raise CredentialsError(
            f"checkpoint_store.credentials: {exc}",
            path=exc.fields.get("path"),
            problem=exc.fields.get("problem"),
        ) from None
    credentials = opened.credentials
    try:
        opened.check()
    except ObjectRequestError as exc:
        text = credentials.scrub(str(exc))
        raise ObjectRequestError(
            f"direct checkpoint bucket s3://{config.bucket} at "
            f"{credentials.endpoint_authority} cannot be used with the keys of "
            f"{credentials.source}: {text}. Check checkpoint_store.bucket, the endpoint and the "
            "keys (checkpoint_store.credentials); nothing was written"
        ) from None
    return opened
