"""The effect bindings of the ``roles_prune`` machine (``machines/roles_prune.toml``): the
retention of multi-role boundaries.

The table is the order: decide from disk -> every boundary to delete loses its ``_SUCCESS``
durably (it is a partial from then on: a reader passes over it) -> every partial boundary older
than the saved one is deleted, files first. A boundary is never half-deleted while its marker
stands. See ``specs/roles_prune.toml``, proven by ``statecraft crashcheck --machine
roles_prune``.

::

    ctx = RolesPruneContext(store, saved_iteration=12, keep=lambda its: set(its[:2]))
    shipped_machine("roles_prune").recover(ctx).raise_for_failure()
    ctx.deleted, ctx.swept          # [9, 8], [10]  (10: a crashed save's partial)
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Collection, Sequence

import attrs

from statecraft.checkpoint.roles.layout import MARKER_NAME, boundary_dir
from statecraft.checkpoint.roles.reading import boundary_iterations
from statecraft.checkpoint.roles.records import decode_marker
from statecraft.engine import Bindings
from statecraft.engine.tagging import Role, collect_bindings, effect, observer
from statecraft.errors import CheckpointCorruptError
from statecraft.storage.base import Store

__all__ = ["KeepBoundaries", "RolesPruneContext", "classify_boundaries", "roles_prune_bindings"]

log = logging.getLogger("statecraft.roles")

#: which of the committed boundary iterations (newest first) the run's policy keeps
KeepBoundaries = Callable[[Sequence[int]], Collection[int]]


@attrs.define
class RolesPruneContext:
    """One retention pass over the roles store ``store`` after boundary ``saved_iteration``
    is committed and durable.

    Attributes:
        keep: the run's model policy over committed boundaries (``None``: keep every one;
            only partials are swept).
        committed / partial / damaged: the boundaries as ``decide_boundaries`` found them
            (newest first); a damaged one (a ``_SUCCESS`` that does not decode, a file) is
            never touched.
        doomed: the committed boundaries this pass deletes (newest first).
        invalidated: those whose ``_SUCCESS`` this pass removed.
        swept: the partial boundaries this pass deleted (the invalidated ones included).
    """

    store: Store
    saved_iteration: int
    keep: KeepBoundaries | None = None
    committed: list[int] = attrs.field(factory=list)
    partial: list[int] = attrs.field(factory=list)
    damaged: list[int] = attrs.field(factory=list)
    doomed: list[int] = attrs.field(factory=list)
    invalidated: list[int] = attrs.field(factory=list)
    swept: list[int] = attrs.field(factory=list)

    @property
    def where(self) -> str:
        return self.store.describe()


def classify_boundaries(store: Store) -> tuple[list[int], list[int], list[int]]:
    """``(committed, partial, damaged)`` iterations of the roles store, newest first, by a
    cheap scan: a directory whose ``_SUCCESS`` decodes counts as committed (what retention
    counts and keeps; the reader verifies every file before adopting), one without it is a
    partial, and anything else is damaged. Reads only."""
    committed: list[int] = []
    partial: list[int] = []
    damaged: list[int] = []
    for iteration in boundary_iterations(store):
        here = boundary_dir(iteration)
        stat = store.stat(here)
        if stat is None or not stat.is_dir:
            damaged.append(iteration)
            continue
        try:
            data = store.read_bytes(f"{here}/{MARKER_NAME}")
        except FileNotFoundError:
            partial.append(iteration)
            continue
        try:
            marker = decode_marker(data, source=f"{store.describe()}/{here}/{MARKER_NAME}")
        except CheckpointCorruptError:
            damaged.append(iteration)
            continue
        (committed if marker.iteration == iteration else damaged).append(iteration)
    return committed, partial, damaged


@observer()
def observe_roles_prune(ctx: RolesPruneContext) -> str:
    """``unfinished`` when a partial boundary older than the saved one is there, else
    ``settled``. Reads only."""
    _, partial, _ = classify_boundaries(ctx.store)
    return "unfinished" if any(i < ctx.saved_iteration for i in partial) else "settled"


@effect(role=Role.COORDINATOR)
def decide_boundaries(ctx: RolesPruneContext) -> None:
    """Scan the store and decide (nothing written): the saved boundary and the newest
    committed one are kept whatever the policy says; only boundaries older than the saved one
    are deleted; damaged ones are never touched."""
    ctx.committed, ctx.partial, ctx.damaged = classify_boundaries(ctx.store)
    if ctx.keep is None or not ctx.committed:
        ctx.doomed = []
        return
    kept = set(ctx.keep(list(ctx.committed))) | {ctx.saved_iteration, ctx.committed[0]}
    ctx.doomed = [i for i in ctx.committed if i not in kept and i < ctx.saved_iteration]


@effect(role=Role.COORDINATOR)
def invalidate_boundaries(ctx: RolesPruneContext) -> None:
    """Each boundary to delete loses its ``_SUCCESS`` durably (unlink, then the boundary
    directory's fsync) before any of its role units is touched: from then on it is a partial
    a reader passes over."""
    for iteration in ctx.doomed:
        ctx.store.delete(f"{boundary_dir(iteration)}/{MARKER_NAME}")
        ctx.invalidated.append(iteration)


@effect(role=Role.COORDINATOR)
def sweep_partials(ctx: RolesPruneContext) -> None:
    """Delete every boundary without ``_SUCCESS`` older than the saved one (the invalidated
    ones and a crashed save's leftovers): files first, each directory fsynced, the roles
    store's directory last."""
    older = sorted({*ctx.invalidated, *ctx.partial}, reverse=True)
    for iteration in (i for i in older if i < ctx.saved_iteration):
        ctx.store.delete_tree(boundary_dir(iteration))
        ctx.swept.append(iteration)
    if ctx.swept:
        log.info(
            "retention after %s: boundaries deleted %s, partial boundaries removed %s",
            boundary_dir(ctx.saved_iteration),
            [boundary_dir(i) for i in ctx.invalidated] or "none",
            [boundary_dir(i) for i in ctx.swept if i not in ctx.invalidated] or "none",
        )


def roles_prune_bindings() -> Bindings:
    """The bindings of this module's table, collected from the tags above."""
    return collect_bindings(sys.modules[__name__])
