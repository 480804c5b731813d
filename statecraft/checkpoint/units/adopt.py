"""Adopting a unit: the newest one that verifies, made durable before anyone relies on it.

A process killed just after it created a unit's commit manifest may leave the manifest only
in the page cache: a reader on the same node sees the unit committed, and a power loss before
the kernel writes it back would take the commit away again. So the reader that picks a unit
fsyncs it (every file and directory of the unit and its parents up to the store root) before
it returns it, as the save machine's recovery does for a full checkpoint.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Iterable

from statecraft.checkpoint.units.verify import UnitVerdict, unit_files, verify_unit
from statecraft.storage.base import Store

__all__ = ["newest_committed", "settle_unit"]


def settle_unit(store: Store, unit: str) -> None:
    """Make ``unit`` durable as it is now: every file and directory under it (deepest
    first), then every directory from its parent up to the store root.

    Raises:
        StoreError / OSError: an fsync failed (the unit must then not be relied on).
    """
    directories = {""}
    for name in unit_files(store, unit):
        parts = name.split("/")[:-1]
        directories.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    for relative in sorted(directories, key=lambda d: (-(d.count("/") + 1 if d else 0), d)):
        store.make_durable(f"{unit}/{relative}" if relative else unit)
    parent = posixpath.dirname(unit)
    while parent:
        store.make_durable(parent)
        parent = posixpath.dirname(parent)
    store.make_durable("")


def newest_committed(
    store: Store,
    units_newest_first: Iterable[str],
    *,
    deep: bool = True,
    log: logging.Logger | None = None,
    settle: bool = True,
) -> tuple[UnitVerdict | None, list[UnitVerdict]]:
    """The first unit of ``units_newest_first`` that verifies, and the verdicts of the newer
    ones passed over (each logged at WARNING on ``log``, with its reason, when given).

    Args:
        deep: verify digests too (reads every byte), not only sizes.
        settle: make the chosen unit durable before returning it (:func:`settle_unit`); the
            only store operations are fsyncs. ``False`` reads only (``inspect``-style tools).

    Returns:
        ``(verdict, passed_over)``; ``verdict`` is ``None`` when none verifies.

    Raises:
        StoreError / OSError: settling the chosen unit failed.
    """
    passed: list[UnitVerdict] = []
    for unit in units_newest_first:
        verdict = verify_unit(store, unit, deep=deep)
        if verdict.committed:
            if settle:
                settle_unit(store, unit)
            return verdict, passed
        passed.append(verdict)
        if log is not None:
            log.warning("passing over %s: %s (%s)", verdict.where, verdict.state, verdict.reason)
    return None, passed
