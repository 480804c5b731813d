"""The remote records a fetch reads first (the ``read_remote_manifest`` effect of
:mod:`.fetch_bindings`): the commit record of an archived iteration and, for an artifact, its
archive declaration, turned into the inventory of payloads to fetch (``ctx.entries``).

Every function raises :class:`~statecraft.errors.ArchiveError` naming the ``s3://`` URI of a
record that does not parse, does not match, or is missing; nothing is written.
"""

from __future__ import annotations

import hashlib

from statecraft.checkpoint.archive.declaration import DECLARATION_NAME, read_declaration
from statecraft.checkpoint.archive.fetch_context import FetchContext
from statecraft.checkpoint.archive.inventory import ArchiveEntry
from statecraft.checkpoint.kernel.artifact_manifest import decode_artifact_manifest
from statecraft.checkpoint.kernel.layout import ARTIFACT_MANIFEST_NAME, MANIFEST_NAME
from statecraft.checkpoint.kernel.manifest import decode_manifest
from statecraft.errors import ArchiveError, CheckpointCorruptError

__all__ = ["describe_artifact", "describe_checkpoint", "get_record"]


def get_record(ctx: FetchContext, relative: str) -> bytes | None:
    if ctx.bucket.stat(ctx.key(relative)) is None:
        return None
    try:
        return ctx.bucket.get(ctx.key(relative))
    except FileNotFoundError:
        return None


def describe_artifact(ctx: FetchContext, manifest: bytes) -> None:
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


def describe_checkpoint(ctx: FetchContext, manifest_bytes: bytes) -> None:
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
