"""The effect bindings of the ``archive_prune`` machine (``machines/archive_prune.toml``):
the removal of one iteration ``<prefix>/iter_N/`` from a bucket.

Unpublish first, then delete: the commit record ``iter_N/.posttrain-manifest.json`` goes
before any object it names, so no crash leaves a published iteration with a missing object
(one that ``archive fetch``, ``inspect`` or a direct resume would take for committed). What a
crash leaves is the iteration whole, an unpublished remainder (``partial`` in ``archive
list``; the next prune collects it), or nothing. Only keys under ``<prefix>/iter_N/`` (with
the slash) are ever deleted. See ``specs/archive_prune.toml``, proven by ``statecraft
crashcheck --machine archive_prune``.

::

    prune_remote_iteration(bucket, "runs/a/checkpoints/iter_000000004")
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

import attrs

from statecraft.checkpoint.kernel.layout import MANIFEST_NAME, parse_iter_dirname
from statecraft.engine import Bindings
from statecraft.engine.tagging import Role, collect_bindings, effect, observer
from statecraft.errors import ArchiveError
from statecraft.storage.objects import ArchiveBucket

__all__ = ["RemotePruneContext", "archive_prune_bindings", "prune_remote_iteration"]

log = logging.getLogger("statecraft.archive")


@attrs.define
class RemotePruneContext:
    """One removal of ``<key_prefix>/`` from ``bucket``.

    Attributes:
        bucket: the bucket (an :class:`~statecraft.storage.s3.S3Bucket`, or the harness's
            :class:`~statecraft.storage.objects.SimBucket`).
        key_prefix: ``<prefix>/iter_N`` (no trailing ``/``); its last part must be an
            ``iter_<9 digits>`` name.
        fence: called before the commit record is deleted (the direct primary's writer lease
            check: a stale writer deletes nothing); ``None``: no fence (the archive).
        deleted / freed_bytes: objects and bytes this run deleted.

    Raises:
        ArchiveError: ``key_prefix`` does not end in an ``iter_N`` name.
    """

    bucket: ArchiveBucket
    key_prefix: str = attrs.field(converter=lambda p: str(p).strip("/"))
    fence: Callable[[], Any] | None = None
    deleted: int = 0
    freed_bytes: int = 0

    def __attrs_post_init__(self) -> None:
        if parse_iter_dirname(self.key_prefix.rpartition("/")[2]) is None:
            raise ArchiveError(
                self.uri(),
                "is not an iteration prefix (<prefix>/iter_<9 digits>)",
                "Name one iteration of an archive or direct root.",
            )

    @property
    def manifest_key(self) -> str:
        return f"{self.key_prefix}/{MANIFEST_NAME}"

    def uri(self, key: str = "") -> str:
        return f"s3://{self.bucket.identity().bucket}/{key or self.key_prefix}"

    def object_keys(self) -> list[str]:
        """Every key under ``<key_prefix>/`` (the slash keeps ``iter_1`` from matching
        ``iter_10``-like siblings and other trees)."""
        return sorted(self.bucket.list(f"{self.key_prefix}/"))


def prune_remote_iteration(
    bucket: ArchiveBucket,
    key_prefix: str,
    *,
    fence: Callable[[], Any] | None = None,
    machine: Any = None,
) -> RemotePruneContext:
    """Remove ``<key_prefix>/`` from ``bucket``: its commit record first, then every other
    object. An absent iteration is fine; a rerun after a crash finishes the removal.

    Args:
        fence: checked before the commit record is deleted (raise to refuse).
        machine: the ``archive_prune`` machine to run (tests pass deliberately broken ones;
            default: the shipped table).

    Returns:
        the context (``deleted``, ``freed_bytes``).

    Raises:
        ObjectRequestError: a request failed; the iteration is published and whole, or
            unpublished (never resumed); the next prune finishes it.
        WriterLeaseError (from ``fence``): another writer holds the root; nothing deleted.
    """
    from statecraft.checkpoint.kernel.machines import shipped_machine

    ctx = RemotePruneContext(bucket, key_prefix, fence=fence)
    (machine or shipped_machine("archive_prune")).recover(ctx).raise_for_failure()
    return ctx


@observer()
def observe_archive_prune(ctx: RemotePruneContext) -> str:
    """``absent``, ``published`` (the commit record is there, whatever it holds) or
    ``unpublished``. Reads only (one listing)."""
    keys = ctx.object_keys()
    if not keys:
        return "absent"
    return "published" if ctx.manifest_key in keys else "unpublished"


def _delete(ctx: RemotePruneContext, key: str) -> None:
    there = ctx.bucket.stat(key)
    ctx.bucket.delete(key)
    ctx.deleted += 1
    ctx.freed_bytes += there.size if there is not None else 0


@effect(role=Role.COORDINATOR)
def unpublish(ctx: RemotePruneContext) -> None:
    """Check the fence, then delete the commit record: from here on the iteration is
    partial (never resumed, fetched or counted as archived)."""
    if ctx.fence is not None:
        ctx.fence()
    _delete(ctx, ctx.manifest_key)


@effect(role=Role.COORDINATOR)
def delete_objects(ctx: RemotePruneContext) -> None:
    """Delete every object left under ``<key_prefix>/`` (after the commit record).

    Raises:
        ArchiveError: a commit record is there again (another writer re-published the
            iteration meanwhile): nothing more is deleted.
    """
    keys = ctx.object_keys()
    if ctx.manifest_key in keys:
        raise ArchiveError(
            ctx.uri(ctx.manifest_key),
            "appeared again while its iteration was being pruned (another writer published it)",
            "Stop the other writer, then run the prune again.",
        )
    for key in keys:
        _delete(ctx, key)
    log.info("pruned %s: %d objects, %d bytes (unpublished first)", ctx.uri(), ctx.deleted,
             ctx.freed_bytes)  # fmt: skip


def archive_prune_bindings() -> Bindings:
    """The bindings of this module's table, collected from the tags above."""
    return collect_bindings(sys.modules[__name__])
