"""Remote retention: keep the newest ``keep_last`` published iterations of an archive prefix or
a direct root, remove the older ones (``upload.keep_last`` after a save's upload,
``checkpoint_store.keep_last`` after a direct save, ``statecraft archive prune``).

The decision (:func:`decide_remote_retention`, pure) mirrors the local rules of
``statecraft.checkpoint.retention``: a policy only says what it keeps; these are kept whatever
it says:

- the newest published (``complete``) iteration, and the ``keep_last`` newest ones;
- every iteration in ``protected`` (the one the local or remote ``latest_checkpoint.txt``
  names, with the label saying so);
- a ``corrupt`` iteration (a commit record that does not parse, or names a missing object):
  nothing is deleted that is not understood; ``archive list`` names it;
- a ``partial`` iteration (objects, no commit record) newer than the oldest kept one: an
  upload or save may be writing it.

A ``partial`` iteration older than every kept one is collected (the remainder of a crashed
prune or of an abandoned upload). Artifacts under ``checkpoint_artifacts/`` are never touched.
Each removal runs ``machines/archive_prune.toml`` (the commit record first, then the objects).

A local ``iter_N/.uploaded`` receipt of a removed iteration is left in place: it records that
the iteration was archived and verified, so the catch-up never uploads it again (removing it
would have the next save re-upload what retention just removed, forever).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from statecraft.checkpoint.archive.listing import ArchivedIteration, is_archive, list_archive
from statecraft.checkpoint.archive.remote_prune_bindings import prune_remote_iteration
from statecraft.checkpoint.kernel.layout import (
    LATEST_POINTER,
    MANIFEST_NAME,
    iter_dirname,
    parse_iter_dirname,
    parse_latest,
)
from statecraft.errors import ArchiveError, ConfigError, ConfigIssue
from statecraft.storage.objects import ArchiveBucket

__all__ = [
    "RemotePruneReport",
    "RemoteRow",
    "decide_remote_retention",
    "prune_remote",
    "published_iterations",
    "remote_latest",
]

log = logging.getLogger("statecraft.archive")

KEEP, DELETE = "keep", "delete"


@attrs.frozen
class RemoteRow:
    """What remote retention does with one iteration.

    Attributes:
        iteration: its number; key_prefix: ``<prefix>/iter_N``; state: ``complete``,
            ``partial`` or ``corrupt`` (as ``archive list``); bytes: what it stores.
        action: ``keep`` or ``delete``; reason: why (the rule or the policy).
    """

    iteration: int
    key_prefix: str
    state: str
    bytes: int
    action: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class RemotePruneReport:
    """One remote retention pass: every row (newest first), what was deleted, and whether it
    was a dry run (nothing deleted)."""

    root: str
    keep_last: int
    rows: tuple[RemoteRow, ...]
    dry_run: bool
    deleted: tuple[int, ...] = ()
    freed_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "keep_last": self.keep_last,
            "dry_run": self.dry_run,
            "rows": [row.to_dict() for row in self.rows],
            "deleted": list(self.deleted),
            "freed_bytes": self.freed_bytes,
        }


def _check_keep_last(keep_last: object) -> int:
    if type(keep_last) is not int or keep_last < 1:
        raise ConfigError(
            [ConfigIssue("keep_last", keep_last, "an int >= 1 (0 in the config: keep all)")],
            source="remote retention",
        )
    return keep_last


def decide_remote_retention(
    iterations: list[ArchivedIteration], keep_last: int, *, protected: Mapping[int, str] = {}
) -> tuple[RemoteRow, ...]:
    """One row per checkpoint iteration (newest first): keep or delete (module doc). Pure.

    Raises:
        ConfigError: ``keep_last`` is not an int >= 1.
    """
    _check_keep_last(keep_last)
    found = sorted(
        (it for it in iterations if it.kind == "checkpoint"),
        key=lambda it: it.iteration,
        reverse=True,
    )
    complete = [it.iteration for it in found if it.state == "complete"]
    kept = set(complete[:keep_last])
    kept.update(n for n in protected if n in {it.iteration for it in found})
    oldest_kept = min(kept, default=None)
    rows = []
    for it in found:
        def row(action: str, reason: str, it: ArchivedIteration = it) -> RemoteRow:
            return RemoteRow(it.iteration, it.key_prefix, it.state, it.bytes, action, reason)

        n = it.iteration
        if n in protected:
            rows.append(row(KEEP, protected[n]))
        elif it.state == "corrupt":
            rows.append(row(KEEP, f"corrupt, never deleted by retention ({it.reason})"))
        elif it.state == "complete" and n == complete[0]:
            rows.append(row(KEEP, "newest published"))
        elif it.state == "complete" and n in kept:
            rows.append(row(KEEP, f"latest {keep_last}"))
        elif it.state == "complete":
            rows.append(row(DELETE, f"not among the latest {keep_last}"))
        elif oldest_kept is not None and n < oldest_kept:
            rows.append(row(DELETE, "unpublished remainder older than every kept iteration"))
        else:
            rows.append(row(KEEP, "unpublished and not older than a kept one (may be writing)"))
    return tuple(rows)


def remote_latest(bucket: ArchiveBucket, prefix: str) -> dict[int, str]:
    """``{N: "named by latest"}`` when ``<prefix>/latest_checkpoint.txt`` (a direct root's)
    names ``iter_N``; ``{}`` when there is none.

    Raises:
        ArchiveError: it is there but names no iteration (nothing is pruned then).
    """
    key = f"{prefix.strip('/')}/{LATEST_POINTER}".lstrip("/")
    if bucket.stat(key) is None:
        return {}
    try:
        return {parse_latest(bucket.get(key)): "named by latest"}
    except ValueError as exc:
        raise ArchiveError(
            f"s3://{bucket.identity().bucket}/{key}",
            f"names no iteration ({exc}): retention cannot tell what it protects",
            "Point it at a committed iter_N (or remove it) after inspecting the root.",
        ) from None


def published_iterations(
    bucket: ArchiveBucket, prefix: str, *, sizes: bool = False
) -> list[ArchivedIteration]:
    """The iterations under ``prefix``, cheaply: ``complete`` when the commit record is there
    (the upload sends it after every object it names; a direct save creates it by
    If-None-Match after its objects), else ``partial``. One listing, no GET; a HEAD per object
    only with ``sizes`` (else ``bytes`` is 0)."""
    prefix = prefix.strip("/")
    start = len(prefix) + 1 if prefix else 0
    groups: dict[int, dict[str, int]] = {}
    for key in bucket.list(f"{prefix}/" if prefix else ""):
        head, _, rest = key[start:].partition("/")
        number = parse_iter_dirname(head)
        if number is not None and rest:
            there = bucket.stat(key) if sizes else None
            groups.setdefault(number, {})[rest] = there.size if there is not None else 0
    found = []
    for number, held in sorted(groups.items()):
        key_prefix = f"{prefix}/{iter_dirname(number)}" if prefix else iter_dirname(number)
        state = "complete" if MANIFEST_NAME in held else "partial"
        found.append(
            ArchivedIteration(
                iter_dirname(number), number, "checkpoint", state, key_prefix, len(held),
                sum(held.values()),
            )
        )  # fmt: skip
    return found


def prune_remote(
    bucket: ArchiveBucket,
    prefix: str,
    keep_last: int,
    *,
    protected: Mapping[int, str] = {},
    dry_run: bool = False,
    verify: bool = False,
    fence: Callable[[], Any] | None = None,
) -> RemotePruneReport:
    """Apply remote retention to the archive prefix or direct root ``prefix`` of ``bucket``:
    decide (module doc), then remove each ``delete`` row with the ``archive_prune`` machine,
    oldest first (``dry_run``: decide only).

    Args:
        verify: judge each iteration as ``archive list`` does (parse each commit record, HEAD
            each object: ``corrupt`` ones are kept; a direct root, whose manifests are not an
            archive's, is judged by presence); else by the commit record's presence
            (:func:`published_iterations`: what a save's pass uses, one listing).
        protected: iteration -> why it is kept whatever the policy says (e.g. ``named by
            latest``).
        fence: checked before each commit record is deleted (the direct writer lease).

    Raises:
        ConfigError: ``keep_last`` is not an int >= 1.
        ObjectRequestError / ArchiveError: a request failed; what was removed so far is
            removed; the iteration in progress is whole or unpublished; a rerun finishes.
    """
    _check_keep_last(keep_last)
    prefix = prefix.strip("/")
    iterations = []
    if verify:
        listing = list_archive(bucket, prefix)
        iterations = list(listing.iterations) if is_archive(listing) else []
    if not iterations:  # not verifying, or a direct root (its manifests are not an archive's)
        iterations = published_iterations(bucket, prefix, sizes=dry_run or verify)
    rows = decide_remote_retention(iterations, keep_last, protected=protected)
    root = f"s3://{bucket.identity().bucket}/{prefix}"
    if dry_run:
        return RemotePruneReport(root, keep_last, rows, True)
    deleted: list[int] = []
    freed = 0
    for row in sorted((r for r in rows if r.action == DELETE), key=lambda r: r.iteration):
        ctx = prune_remote_iteration(bucket, row.key_prefix, fence=fence)
        deleted.append(row.iteration)
        freed += ctx.freed_bytes
    if deleted:
        log.info(
            "remote retention (keep_last=%d) removed %s from %s (%d bytes)",
            keep_last, ", ".join(iter_dirname(n) for n in deleted), root, freed,
        )  # fmt: skip
    return RemotePruneReport(root, keep_last, rows, False, tuple(deleted), freed)
