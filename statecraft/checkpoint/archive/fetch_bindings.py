"""The effect bindings of the ``fetch`` machine (``machines/fetch.toml``), and
:func:`fetch_archive`, the one entry point (``statecraft archive fetch`` calls it).

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

import hashlib
import logging
import os
import posixpath
import re
import sys
import time
from typing import Any

import attrs

from statecraft.checkpoint.archive.declaration import DECLARATION_NAME, read_declaration
from statecraft.checkpoint.archive.inventory import ArchiveEntry, sha256_of
from statecraft.checkpoint.kernel.artifact_manifest import decode_artifact_manifest
from statecraft.checkpoint.kernel.artifact_verify import verify_artifact
from statecraft.checkpoint.kernel.layout import (
    ARTIFACT_MANIFEST_NAME,
    MANIFEST_NAME,
    iter_dirname,
    parse_iter_dirname,
)
from statecraft.checkpoint.kernel.machines import shipped_machine
from statecraft.checkpoint.kernel.manifest import decode_manifest
from statecraft.checkpoint.kernel.verify import verify_checkpoint
from statecraft.engine import Bindings
from statecraft.engine.tagging import Role, collect_bindings, effect, observer
from statecraft.errors import (
    ArchiveError,
    CheckpointCorruptError,
    FetchDestinationExistsError,
    StoreConflictError,
)
from statecraft.storage.base import Store
from statecraft.storage.local import LocalStore
from statecraft.storage.objects import ArchiveBucket

__all__ = [
    "FetchContext",
    "FetchReport",
    "fetch_archive",
    "fetch_bindings",
    "staging_name_pattern",
]

log = logging.getLogger("statecraft.fetch")

_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")


def staging_name_pattern(name: str) -> re.Pattern[str]:
    """The names of ``<name>``'s staging directories (``.<name>.fetch-<pid>-<n>``)."""
    return re.compile(rf"^\.{re.escape(name)}\.fetch-\d+-\d+$")


@attrs.frozen
class FetchReport:
    """What a fetch placed.

    Attributes:
        kind: ``"artifact"`` or ``"checkpoint"``.
        files: files placed (the commit record included).
        bytes_fetched: bytes downloaded.
        seconds: wall time of the fetch.
        path: the placed directory (``dst/<name>``).
    """

    kind: str
    files: int
    bytes_fetched: int
    seconds: float
    path: str


@attrs.define
class FetchContext:
    """One fetch.

    Attributes:
        bucket: the source bucket.
        remote_prefix: ``<...>/iter_N`` (no ``s3://bucket/``, no trailing ``/``).
        dst: the local directory that receives ``<name>``.
        name: the directory to create under ``dst`` (one path component).
        kind: ``artifact`` / ``checkpoint`` once the commit record was read.
        manifest_name / manifest_bytes: the commit record as read (placed from these bytes).
        entries: every payload to fetch (path relative to ``iter_N``, size, sha256 when the
            inventory states one).
        staging: the staging directory of this fetch (``""`` before ``prepare_staging``).
        bytes_fetched: bytes downloaded so far.
        moved: this fetch renamed its staging copy to ``dst/<name>`` (its fsyncs may still
            have failed: then the discard takes it back out).
        progress: called with ``(path, size)`` after each payload lands (the command's bar).
    """

    bucket: ArchiveBucket
    remote_prefix: str = attrs.field(converter=lambda p: str(p).strip("/"))
    dst: LocalStore
    name: str
    kind: str = ""
    manifest_name: str = ""
    manifest_bytes: bytes = b""
    entries: list[ArchiveEntry] = attrs.field(factory=list)
    staging: str = ""
    bytes_fetched: int = 0
    moved: bool = False
    progress: Any = None

    @property
    def iteration(self) -> int:
        found = parse_iter_dirname(posixpath.basename(self.remote_prefix))
        if found is None:
            raise ArchiveError(
                self.source(),
                "is not an archived iteration (the URI must end in iter_<9 digits>)",
                "Name the iteration directory, e.g. s3://bucket/.../checkpoints/iter_000000100.",
            )
        return found

    @property
    def iter_dir(self) -> str:
        return iter_dirname(self.iteration)

    def key(self, relative: str) -> str:
        return f"{self.remote_prefix}/{relative}"

    def source(self, relative: str = "") -> str:
        bucket = self.bucket.identity().bucket
        tail = f"/{relative}" if relative else ""
        return f"s3://{bucket}/{self.remote_prefix}{tail}"

    @property
    def target(self) -> str:
        return f"{self.dst.root}/{self.name}"

    def staged(self, relative: str = "") -> str:
        """Store path of ``relative`` in the staging copy of ``iter_N``."""
        base = f"{self.staging}/{self.iter_dir}"
        return f"{base}/{relative}" if relative else base


# ------------------------------------------------------------------ the remote records
def _get(ctx: FetchContext, relative: str) -> bytes | None:
    if ctx.bucket.stat(ctx.key(relative)) is None:
        return None
    try:
        return ctx.bucket.get(ctx.key(relative))
    except FileNotFoundError:
        return None


def _describe_artifact(ctx: FetchContext, manifest: bytes) -> None:
    source = ctx.source(ARTIFACT_MANIFEST_NAME)
    try:
        decode_artifact_manifest(manifest, source=source)
    except CheckpointCorruptError as exc:
        raise ArchiveError(source, f"is not a valid artifact manifest ({exc.problem})") from None
    where = ctx.source(DECLARATION_NAME)
    try:
        declaration = read_declaration(ctx.bucket, ctx.key(DECLARATION_NAME), source=where)
    except FileNotFoundError:
        raise ArchiveError(
            where,
            "is missing: the artifact manifest has no archive declaration, so no payload "
            "digest can be proven",
            "Publish the artifact again (statecraft archive publish).",
        ) from None
    except CheckpointCorruptError as exc:
        raise ArchiveError(where, f"is not a valid archive declaration ({exc.problem})") from None
    if declaration.iteration != ctx.iteration:
        raise ArchiveError(
            where, f"declares iteration {declaration.iteration}, not {ctx.iteration}"
        )
    commit = declaration.entry(ARTIFACT_MANIFEST_NAME)
    if commit is None or commit.size != len(manifest) or commit.sha256 != _sha256(manifest):
        raise ArchiveError(
            source,
            "does not match the size and sha256 the archive declaration records for it",
            "The remote commit record was altered; publish the artifact again.",
        )
    ctx.kind = "artifact"
    ctx.manifest_name = ARTIFACT_MANIFEST_NAME
    ctx.entries = list(declaration.payloads)


def _describe_checkpoint(ctx: FetchContext, manifest_bytes: bytes) -> None:
    source = ctx.source(MANIFEST_NAME)
    try:
        manifest = decode_manifest(manifest_bytes, source=source)
    except CheckpointCorruptError as exc:
        raise ArchiveError(source, f"is not a valid checkpoint manifest ({exc.problem})") from None
    entries: list[ArchiveEntry] = []
    listed = {k[len(ctx.remote_prefix) + 1 :] for k in ctx.bucket.list(ctx.remote_prefix + "/")}
    for relative in sorted(listed - {MANIFEST_NAME}):
        there = ctx.bucket.stat(ctx.key(relative))
        if there is None:
            continue
        recorded = manifest.files.get(relative)
        if recorded is None and not there.sha256:
            raise ArchiveError(
                ctx.source(relative),
                "is not named by the manifest and carries no sha256 metadata, so it cannot "
                "be proven",
                "Remove the stray object or upload the checkpoint again.",
            )
        size = recorded.size if recorded is not None else there.size
        entries.append(ArchiveEntry(relative, size, there.sha256 if recorded is None else None))
    missing = sorted(set(manifest.files) - listed)
    if missing:
        raise ArchiveError(
            ctx.source(),
            f"lacks {missing}, which its manifest names",
            "The archive is incomplete; upload the checkpoint again.",
        )
    ctx.kind = "checkpoint"
    ctx.manifest_name = MANIFEST_NAME
    ctx.entries = entries


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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
    artifact = _get(ctx, ARTIFACT_MANIFEST_NAME)
    checkpoint = _get(ctx, MANIFEST_NAME)
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
        _describe_artifact(ctx, artifact)
    elif checkpoint is not None:
        ctx.manifest_bytes = checkpoint
        _describe_checkpoint(ctx, checkpoint)
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


def fetch_archive(
    bucket: ArchiveBucket,
    remote_prefix: str,
    dst: Store,
    name: str,
    *,
    progress: Any = None,
) -> FetchReport:
    """Fetch the archived iteration at ``remote_prefix`` of ``bucket`` to ``dst/<name>``.

    Args:
        remote_prefix: ``<...>/iter_N`` of an artifact or a full checkpoint.
        dst: a :class:`LocalStore` (the directory that receives ``<name>``).
        name: one path component (``iter_000000100``).
        progress: optional ``(path, size)`` callback after each payload.

    Returns:
        what was placed.

    Raises:
        FetchDestinationExistsError: ``dst/<name>`` exists (untouched).
        ArchiveError: no commit record, a malformed record, a payload that does not prove;
            nothing was placed.
        ObjectRequestError: the bucket failed after its retries; nothing was placed.
    """
    if not isinstance(dst, LocalStore):
        raise ArchiveError(
            dst.describe(), "is not a local directory", "Fetch into a local --dst directory."
        )
    if not _NAME_RE.match(name) or name in (".", ".."):
        raise ArchiveError(
            f"{dst.root}/{name}",
            "is not a plain directory name to fetch into",
            "Use one path component such as iter_000000100.",
        )
    started = time.monotonic()
    ctx = FetchContext(bucket=bucket, remote_prefix=remote_prefix, dst=dst, name=name)
    ctx.progress = progress
    shipped_machine("fetch").recover(ctx).raise_for_failure()
    return FetchReport(
        kind=ctx.kind,
        files=len(ctx.entries) + 1,
        bytes_fetched=ctx.bytes_fetched,
        seconds=time.monotonic() - started,
        path=ctx.target,
    )
