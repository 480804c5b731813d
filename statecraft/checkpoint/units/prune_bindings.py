"""The effect bindings of the ``unit_prune`` machine (``machines/unit_prune.toml``).

Invalidate first, then delete: the commit manifest of the unit goes durably before any file
it names, so no crash leaves a manifest naming a missing file (a half-deleted unit that a
"newest committed" scan would adopt). See ``specs/unit_prune.toml``, proven by
``statecraft crashcheck --machine unit_prune``.
"""

from __future__ import annotations

import logging
import posixpath
import sys

import attrs

from statecraft.checkpoint.units.manifest import UNIT_MANIFEST_NAME
from statecraft.engine import Bindings
from statecraft.engine.tagging import Role, collect_bindings, effect, observer
from statecraft.storage.base import Store, check_relative_path

__all__ = ["UnitPruneContext", "unit_prune_bindings"]

log = logging.getLogger("statecraft.units")


@attrs.define
class UnitPruneContext:
    """One removal of ``unit`` (relative to ``store``'s root)."""

    store: Store
    unit: str

    def __attrs_post_init__(self) -> None:
        check_relative_path(self.unit)

    @property
    def where(self) -> str:
        return f"{self.store.describe()}/{self.unit}"


@observer()
def observe_prune(ctx: UnitPruneContext) -> str:
    """``absent``, ``committed`` (the manifest is there, whatever it holds) or
    ``uncommitted``. Reads only."""
    if ctx.store.stat(ctx.unit) is None:
        return "absent"
    if ctx.store.stat(f"{ctx.unit}/{UNIT_MANIFEST_NAME}") is not None:
        return "committed"
    return "uncommitted"


@effect(role=Role.COORDINATOR)
def invalidate(ctx: UnitPruneContext) -> None:
    """Delete the commit manifest durably (file unlink, then the unit directory's fsync):
    from here on the unit is uncommitted and never loaded."""
    ctx.store.delete(f"{ctx.unit}/{UNIT_MANIFEST_NAME}")


@effect(role=Role.COORDINATOR)
def delete_files(ctx: UnitPruneContext) -> None:
    """Delete the (invalidated) unit: files first, then the emptied directories, each
    directory fsynced."""
    ctx.store.delete_tree(ctx.unit)
    log.info("removed %s (invalidated first, then deleted)", ctx.where)


@effect(role=Role.COORDINATOR)
def settle_removal(ctx: UnitPruneContext) -> None:
    """The unit is not there: fsync its parent directory (when it exists), so a removal a
    killed prune left unsynced cannot come back after a power loss."""
    parent = posixpath.dirname(ctx.unit)
    if not parent or ctx.store.stat(parent) is not None:
        ctx.store.make_durable(parent)


def unit_prune_bindings() -> Bindings:
    """The bindings of this module's table, collected from the tags above."""
    return collect_bindings(sys.modules[__name__])
