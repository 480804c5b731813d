"""Removing a unit: the front of the ``unit_prune`` machine (invalidate, then delete)."""

from __future__ import annotations

from typing import Any

from statecraft.checkpoint.kernel.machines import shipped_machine
from statecraft.checkpoint.units.prune_bindings import UnitPruneContext
from statecraft.storage.base import Store

__all__ = ["prune_unit"]


def prune_unit(store: Store, unit: str, *, machine: Any = None) -> None:
    """Remove ``unit`` from ``store``: its commit manifest first (durably: the unit is then
    never loaded), then its files and directories. An absent unit is fine; a rerun after a
    crash finishes what the crashed one started. A symbolic link (Lightning's
    ``save_last="link"``) is removed itself: its target is never invalidated or deleted.

    Args:
        machine: the ``unit_prune`` machine to run (tests pass deliberately broken ones;
            default: the shipped table).

    Raises:
        StoreError / OSError: a removal failed; the unit is committed and whole, or
            uncommitted (never loaded); the next prune finishes it.
    """
    stat = store.stat(unit)
    if stat is not None and (stat.link or stat.kind == "symlink"):
        store.delete_tree(unit)  # removes the link itself, never what it points to
        return
    ctx = UnitPruneContext(store, unit)
    (machine or shipped_machine("unit_prune")).recover(ctx).raise_for_failure()
