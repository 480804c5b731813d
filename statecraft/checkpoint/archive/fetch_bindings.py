"""The effect bindings of the ``fetch`` machine (``machines/fetch.toml``). The entry point
that runs it, :func:`~statecraft.checkpoint.archive.fetch.fetch_archive` (``statecraft archive
fetch`` calls it), and the records the effects share
(:mod:`statecraft.checkpoint.archive.fetch_context`) are re-exported here; the remote commit
records are read by :mod:`statecraft.checkpoint.archive.fetch_remote`.

A fetch copies one archived iteration, ``s3://<bucket>/<...>/iter_N``, to ``dst/<name>``:

- **commit record first**: the remote ``.posttrain-checkpoint-artifact.json`` (an artifact; its
  archive declaration ``.posttrain-archive.json`` then names every payload's size and sha256) or
  ``.posttrain-manifest.json`` (a full checkpoint; the manifest's own sizes and digests, plus
  the sha256 each object's metadata carries for files the manifest does not list). A prefix
  without a commit record is refused: its upload never finished.
- **staged**: every payload is downloaded (each file atomically and durably) under a fresh
  sibling directory ``dst/.<name>.fetch-<pid>-<n>/iter_N/``; staging leftovers of ``<name>``
  are swept first, never used.
- **proven**: every staged file has its declared size and sha256 (artifact) and the staged
  copy verifies at ``level="digest"`` (:func:`verify_checkpoint` / :func:`verify_artifact`).
- **placed**: one durable directory rename (:meth:`LocalStore.rename_dir`) to ``dst/<name>``.
  ``dst/<name>`` is never overwritten: a fetch that finds it refuses with
  :class:`~statecraft.errors.FetchDestinationExistsError`.

See ``specs/fetch.toml``.
"""

from __future__ import annotations

import logging
import os
import posixpath
import sys

from statecraft.checkpoint.archive.fetch import fetch_archive
from statecraft.checkpoint.archive.fetch_context import (
    FetchContext,
    FetchReport,
    staging_name_pattern,
)
from statecraft.checkpoint.archive.fetch_remote import (
    describe_artifact,
    describe_checkpoint,
    get_record,
)
from statecraft.checkpoint.archive.inventory import sha256_of
from statecraft.checkpoint.kernel.artifact_verify import verify_artifact
from statecraft.checkpoint.kernel.layout import (
    ARTIFACT_MANIFEST_NAME,
    MANIFEST_NAME,
)
from statecraft.checkpoint.kernel.verify import verify_checkpoint
from statecraft.engine import Bindings
from statecraft.engine.tagging import Role, collect_bindings, effect, observer
from statecraft.errors import (
    ArchiveError,
    CheckpointCorruptError,
    FetchDestinationExistsError,
    StoreConflictError,
)
from statecraft.storage.local import LocalStore

__all__ = [
    "FetchContext",
    "FetchReport",
    "fetch_archive",
    "fetch_bindings",
    "staging_name_pattern",
]

log = logging.getLogger("statecraft.fetch")


# ----------------------------------------------------------------------------- observe
@observer()
def observe_fetch(ctx: FetchContext) -> str:
    """``placed`` when ``dst/<name>`` exists (whatever it holds), else ``absent``. Reads only."""
    return "absent" if ctx.dst.stat(ctx.name) is None else "placed"


# ----------------------------------------------------------------------------- effects
@effect(role=Role.COORDINATOR)
def read_remote_manifest(ctx: FetchContext) -> None:
    """Read the commit record (and an artifact's declaration); fix the inventory. Only
    reads the bucket.

    Raises:
        ArchiveError: not an ``iter_N`` prefix; no commit record; two of them; a record or a
            declaration that does not parse; a file the manifest names is missing.
    """
    ctx.iteration  # noqa: B018 - validates the prefix
    artifact = get_record(ctx, ARTIFACT_MANIFEST_NAME)
    checkpoint = get_record(ctx, MANIFEST_NAME)
    if artifact is not None and checkpoint is not None:
        raise ArchiveError(
            ctx.source(), "holds both an artifact manifest and a checkpoint manifest"
        )
    if artifact is None and checkpoint is None:
        raise ArchiveError(
            ctx.source(),
            f"holds no commit record ({ARTIFACT_MANIFEST_NAME} or {MANIFEST_NAME}): nothing "
            "was archived there, or its upload never finished",
            "Check the URI (statecraft objects list is not needed: the commit record is "
            "written last), or upload the iteration again.",
        )
    if artifact is not None:
        ctx.manifest_bytes = artifact
        describe_artifact(ctx, artifact)
    elif checkpoint is not None:
        ctx.manifest_bytes = checkpoint
        describe_checkpoint(ctx, checkpoint)
    log.info(
        "fetching %s %s (%d files) into %s", ctx.kind, ctx.source(), len(ctx.entries), ctx.target
    )


def _sweep_staging(ctx: FetchContext) -> None:
    pattern = staging_name_pattern(ctx.name)
    for leftover in sorted(n for n in ctx.dst.list("") if pattern.match(n)):
        log.info("removing the staging leftovers %s/%s of an earlier fetch", ctx.dst.root, leftover)
        ctx.dst.delete_tree(leftover)


@effect(role=Role.COORDINATOR)
def prepare_staging(ctx: FetchContext) -> None:
    """Sweep staging leftovers of ``<name>``, then create this fetch's staging directory
    (``dst/.<name>.fetch-<pid>-<n>/iter_N``) durably."""
    ctx.dst.make_durable("")
    _sweep_staging(ctx)
    ctx.staging = f".{ctx.name}.fetch-{os.getpid()}-{ctx.dst.next_token()}"
    ctx.dst.make_dirs(ctx.staged())


@effect(role=Role.COORDINATOR)
def download_payloads(ctx: FetchContext) -> None:
    """Download every payload into the staging copy (each file atomic and durable), then
    write the commit record from the bytes read first."""
    for entry in ctx.entries:
        parent = posixpath.dirname(entry.path)
        if parent:
            ctx.dst.make_dirs(ctx.staged(parent))
        ctx.bucket.download_into(ctx.key(entry.path), ctx.dst, ctx.staged(entry.path))
        ctx.bytes_fetched += entry.size
        if ctx.progress is not None:
            ctx.progress(entry.path, entry.size)
    ctx.dst.write_atomic(ctx.staged(ctx.manifest_name), ctx.manifest_bytes)
    ctx.bytes_fetched += len(ctx.manifest_bytes)


@effect(role=Role.COORDINATOR)
def verify_staged(ctx: FetchContext) -> None:
    """Prove the staged copy: every payload's size, its sha256 where the inventory states
    one, then the commit record's own digests (``level="digest"``). Reads only.

    Raises:
        ArchiveError: a staged payload differs from the inventory or the manifest.
    """
    for entry in ctx.entries:
        stat = ctx.dst.stat(ctx.staged(entry.path))
        found = "missing" if stat is None else f"{stat.size} bytes"
        if stat is None or stat.size != entry.size:
            raise ArchiveError(
                ctx.source(entry.path),
                f"fetched as {found}, expected {entry.size} bytes; nothing was placed",
                "The remote object changed or is damaged; fetch again or re-upload it.",
            )
        if entry.sha256 is not None:
            got = sha256_of(ctx.dst, ctx.staged(entry.path))
            if got != entry.sha256:
                raise ArchiveError(
                    ctx.source(entry.path),
                    f"fetched bytes have sha256 {got}, the archive records {entry.sha256}: the "
                    "remote object was altered; nothing was placed",
                    "Re-publish or re-upload the iteration from a good local copy.",
                )
    staged = LocalStore(ctx.dst.abspath(ctx.staging), fs=ctx.dst.fs)
    try:
        if ctx.kind == "artifact":
            verify_artifact(staged, ctx.iteration, level="digest")
        else:
            verify_checkpoint(staged, ctx.iteration, level="digest", keep_payloads=False)
    except CheckpointCorruptError as exc:
        raise ArchiveError(
            ctx.source(),
            f"the fetched copy does not verify ({exc.problem}); nothing was placed",
            "The archive is damaged; re-upload it from a good local copy.",
        ) from None


@effect(role=Role.COORDINATOR)
def place_fetched(ctx: FetchContext) -> None:
    """Move the proven staging copy to ``dst/<name>`` by one durable rename, then remove the
    (empty) staging directory.

    Raises:
        FetchDestinationExistsError: ``dst/<name>`` appeared meanwhile (never overwritten).
    """
    try:
        ctx.moved = ctx.dst.stat(ctx.name) is None
        ctx.dst.rename_dir(ctx.staged(), ctx.name)
    except StoreConflictError:
        ctx.moved = False
        raise FetchDestinationExistsError(
            ctx.target,
            "appeared while the fetch ran; it was not overwritten",
            "Move it aside or pick another --dst, then fetch again.",
        ) from None
    try:
        ctx.dst.delete_tree(ctx.staging)
    except OSError as exc:  # the placed copy is complete; a leftover is swept next time
        log.warning("could not remove the empty staging directory %s: %s", ctx.staging, exc)
    log.info("placed %s at %s", ctx.source(), ctx.target)


@effect(role=Role.COORDINATOR)
def refuse_existing(ctx: FetchContext) -> None:
    """``dst/<name>`` exists: remove only staging leftovers of ``<name>``, make what is
    there durable (fsyncs only: a killed fetch may have left its rename in the page cache),
    and refuse. No name under ``dst/<name>`` changes.

    Raises:
        FetchDestinationExistsError: always.
    """
    problem = (
        "exists; a fetch never overwrites or merges into a local directory and nothing there "
        "was changed"
    )
    fix = "Move it aside or pick another --dst, then fetch again."
    try:
        _sweep_staging(ctx)
        stat = ctx.dst.stat(ctx.name)
        is_dir = stat is not None and stat.is_dir and not stat.link
        ctx.dst.make_durable(ctx.name if is_dir else "")
    except OSError as exc:
        problem += f" (making it durable failed too: {exc}; a power loss may still take it)"
    raise FetchDestinationExistsError(ctx.target, problem, fix)


@effect(role=Role.COORDINATOR)
def discard_staging(ctx: FetchContext) -> None:
    """After a failure: remove this fetch's staging directory, and ``dst/<name>`` only when
    this fetch moved it there and the move's fsync failed (it was never durable; a
    ``dst/<name>`` that existed before is never touched)."""
    if ctx.moved and ctx.dst.stat(ctx.name) is not None:
        log.warning("the move to %s was not made durable; taking it back out", ctx.target)
        ctx.dst.delete_tree(ctx.name)
    if ctx.staging and ctx.dst.stat(ctx.staging) is not None:
        ctx.dst.delete_tree(ctx.staging)


def fetch_bindings() -> Bindings:
    """The bindings of this module's table, collected from the tags above."""
    return collect_bindings(sys.modules[__name__])
