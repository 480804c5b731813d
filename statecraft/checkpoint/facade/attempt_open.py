"""Opening this launch's attempt: resolve ``<RUN_TS>`` (rank 0 decides, every rank learns) and
take the attempt's writer lease, under the job's launch lock on the real filesystem so two
launches started at once cannot each mint an attempt and both train
(:mod:`statecraft.checkpoint.fencing.lease`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from statecraft.checkpoint.archive.open import (
    check_upload_knobs,
    open_bucket,
    upload_destination,
    upload_retry,
)
from statecraft.checkpoint.config import CheckpointConfig
from statecraft.checkpoint.facade.run_context import OpenAttempt, RunContext
from statecraft.checkpoint.facade.run_state import RunState
from statecraft.checkpoint.fencing.lease import WriterLease, acquire_lease, launch_lock
from statecraft.checkpoint.kernel.artifact_catalog import open_artifacts
from statecraft.checkpoint.kernel.layout import RunAttempt, RunIdentity, resolve_run_attempt
from statecraft.errors import ConfigError, ConfigIssue, CredentialsError, TrackingError
from statecraft.parallel.collectives import Collective
from statecraft.parallel.rank0 import on_rank_zero
from statecraft.storage.base import Store
from statecraft.storage.filesystem import Filesystem, OsFilesystem
from statecraft.storage.local import LocalStore

__all__ = [
    "artifacts_store",
    "checked_output_root",
    "ensure_attempt",
    "open_attempt",
    "release_at_exit",
    "resume_artifacts",
]


def checked_output_root(output_root: object) -> str:
    """``Checkpointer(output_root=...)`` as an absolute path.

    Raises:
        ConfigError: not a ``str`` / ``os.PathLike`` path (``bytes`` included), or empty, or
            holding a NUL byte.
    """
    if isinstance(output_root, bytes) or not isinstance(output_root, str | os.PathLike):
        raise ConfigError(
            [ConfigIssue("output_root", output_root, "a directory path (str or os.PathLike)")],
            source="Checkpointer(output_root=...)",
        )
    root = os.fspath(output_root)
    if not isinstance(root, str) or not root.strip() or "\0" in root:
        raise ConfigError(
            [ConfigIssue("output_root", root, "a non-empty directory path without NUL bytes")],
            source="Checkpointer(output_root=...)",
        )
    return os.path.abspath(root)


def open_attempt(
    config: CheckpointConfig,
    run: RunIdentity,
    output_root: str,
    *,
    collective: Collective,
    filesystem: Filesystem | None,
    overlap_lease: bool = False,
) -> tuple[RunAttempt, Store, WriterLease | None]:
    """The attempt, its checkpoints store, and rank 0's writer lease (``None`` elsewhere).
    ``overlap_lease``: on the real filesystem, the lease record is published on a thread
    (:meth:`WriterLease.publish_in_background`); the caller waits for it
    (:meth:`WriterLease.publish`) before anything it writes.

    Raises:
        WriterLeaseError: (on every rank) another live process owns the attempt.
        ConfigError / StoreError: the attempt cannot be resolved or created.
    """
    serialize = collective.rank == 0 and isinstance(filesystem or OsFilesystem(), OsFilesystem)
    job_dir = str(run.job_dir(Path(output_root)))
    if serialize:  # the lock file lives in the job directory: create it durably first
        LocalStore("/", fs=filesystem).make_dirs(job_dir.lstrip("/"))
    with launch_lock(job_dir) if serialize else contextlib.nullcontext():
        attempt = resolve_run_attempt(
            output_root,
            run,
            resume=config.resume,
            run_ts=config.run_ts,
            collective=collective,
            filesystem=filesystem,
        )
        run_store = LocalStore(str(attempt.run_dir), fs=filesystem)
        leases: list[WriterLease] = []

        def take_lease() -> None:
            # One writer per attempt (<run>/.statecraft-writer.lease): taken at startup,
            # refused (on every rank) when another live process owns the attempt.
            lease = acquire_lease(run_store)
            leases.append(lease)
            if overlap_lease and serialize:  # its fsyncs overlap the caller's reads
                lease.publish_in_background()
            else:
                lease.publish()  # so a second launch can name this owner

        on_rank_zero(collective, take_lease)
    store = LocalStore(str(attempt.checkpoints_dir), fs=filesystem)
    return attempt, store, leases[0] if leases else None


def release_at_exit(
    lease: WriterLease | None, filesystem: Filesystem | None
) -> Callable[[], None] | None:
    """Release ``lease`` when the interpreter exits normally, so the next launch of the job
    finds no stale lease to take over (and prints no takeover warning). A killed process
    skips it, and the next launch takes its lease over with a warning, as it should. Only on
    the real filesystem (a simulated one has no process exit).

    Returns:
        the registered callable (``atexit.unregister`` it after an explicit release), or
        ``None`` when nothing was registered (no lease on this rank, a simulated filesystem).
    """
    if lease is None or not isinstance(filesystem or OsFilesystem(), OsFilesystem):
        return None

    def release() -> None:
        try:
            lease.release()
        except Exception:  # nothing can be done at exit; the next launch takes it over
            pass

    atexit.register(release)
    return release


def ensure_attempt(
    context: RunContext, state: RunState, *, overlap_lease: bool = False
) -> OpenAttempt:
    """The run's open attempt, resolving it and taking the writer lease at the first call
    (``state.opened`` is set then and fixed afterwards); ``overlap_lease``: as
    :func:`open_attempt`'s.

    Raises:
        TrackingError: the run was closed.
        WriterLeaseError: another live process writes the attempt.
        ConfigError / CredentialsError / ObjectRequestError: the archive bucket (``upload.*``)
            cannot be opened (nothing local created or touched).
    """
    if state.closed:
        raise TrackingError(
            "this Checkpointer was closed (its writer lease released); create a new one"
        )
    if state.opened is None:
        # The archive bucket is opened (and proven) before the attempt is resolved: wrong
        # credentials, an unknown bucket or an endpoint that is down fail here, with nothing
        # local created or touched.
        bucket = open_archive_bucket(context)
        attempt, store, lease = open_attempt(
            context.config,
            context.identity,
            context.output_root,
            collective=context.collective,
            filesystem=context.filesystem,
            overlap_lease=overlap_lease,
        )
        state.opened = OpenAttempt(
            attempt, store, lease, exit_release=release_at_exit(lease, context.filesystem)
        )
        if bucket is not None and context.rank_zero:
            destination = upload_destination(
                context.config, context.identity, attempt.run_ts, bucket=bucket
            )
            state.opened = attrs.evolve(state.opened, destination=destination)
    return state.opened


def open_archive_bucket(context: RunContext) -> Any:
    """Rank 0's archive bucket when ``upload.enabled`` (opened and checked once; ``None``
    elsewhere and when upload is off). Every rank raises rank 0's error.

    Raises:
        ConfigError: ``upload.bucket`` / ``upload.credentials`` is empty.
        CredentialsError / ObjectRequestError: as
            :func:`~statecraft.checkpoint.archive.open.open_bucket`.
    """
    upload = context.config.upload
    if not upload.enabled:
        return None
    opened: list[Any] = []

    def here() -> None:
        check_upload_knobs(context.config)
        try:
            opened.append(
                open_bucket(upload.credentials, upload.bucket, retry=upload_retry(upload))
            )
        except CredentialsError as exc:
            raise CredentialsError(
                f"upload.credentials: {exc}", path=exc.fields.get("path"),
                problem=exc.fields.get("problem"),
            ) from None  # fmt: skip

    on_rank_zero(context.collective, here)
    return opened[0] if opened else None


def artifacts_store(
    attempt: RunAttempt | None, filesystem: Filesystem | None, *, create: bool = False
) -> Store | None:
    """The attempt's ``checkpoint_artifacts`` root store, or ``None`` when the directory does
    not exist and ``create`` is false (a ``LocalStore`` creates its root, so readers look
    first and never create it), or when there is no attempt."""
    if attempt is None:
        return None
    if not create:
        return open_artifacts(attempt.run_dir, filesystem=filesystem)
    return LocalStore(str(attempt.artifacts_dir), fs=filesystem)


def resume_artifacts(context: RunContext, opened: OpenAttempt | None) -> Store | None:
    """The artifacts the resume rules weigh: those of the attempt this run continues in. That
    is the adopted attempt (``resume=auto``); for an explicit source (no attempt is opened
    before it loads) the pinned ``run_ts`` attempt, when pinned. An explicit resume otherwise
    continues in a newly minted sibling, which holds none, as does a minted attempt. Nothing
    is created."""
    fs = context.filesystem
    if opened is not None:
        attempt = opened.attempt
        return None if attempt.minted else open_artifacts(attempt.run_dir, filesystem=fs)
    if not context.config.run_ts:
        return None
    return open_artifacts(context.job_dir / context.config.run_ts, filesystem=fs)
