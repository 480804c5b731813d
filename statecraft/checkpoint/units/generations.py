"""Slots of generations: one name a framework writes again and again, crash-consistently.

Lightning saves ``last.ckpt`` (and any checkpoint path) over and over under the same name. A
**slot** is a directory holding **generations** ``<slot>/g<8 digits>/``, each a unit sealed by
the ``unit_seal`` machine; a save seals the next generation and only then retires the older
ones, so the previous checkpoint stays loadable until the new one is committed and durable.
A reader takes the newest generation that verifies.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from statecraft.checkpoint.units.adopt import newest_committed
from statecraft.checkpoint.units.manifest import MetaValue
from statecraft.checkpoint.units.prune import prune_unit
from statecraft.checkpoint.units.seal import UnitReport, seal_unit
from statecraft.checkpoint.units.seal_bindings import Payload
from statecraft.checkpoint.units.verify import UnitVerdict
from statecraft.storage.base import Store

__all__ = [
    "generation_name",
    "generation_units",
    "newest_generation",
    "next_generation",
    "prune_slot",
    "seal_generation",
]

_GENERATION = re.compile(r"^g(\d{8})$")


def generation_name(number: int) -> str:
    """``g00000007``."""
    return f"g{number:08d}"


def _numbers(store: Store, slot: str) -> list[int]:
    stat = store.stat(slot)
    if stat is None or not stat.is_dir:
        return []
    found = (_GENERATION.match(name) for name in store.list(slot))
    return sorted((int(m.group(1)) for m in found if m), reverse=True)


def generation_units(store: Store, slot: str) -> list[str]:
    """The generations of ``slot`` (``slot/g00000002``, ...), newest first; [] when the slot
    is absent or not a directory. Reads only."""
    return [f"{slot}/{generation_name(n)}" for n in _numbers(store, slot)]


def next_generation(store: Store, slot: str) -> tuple[str, list[str]]:
    """The unit the next save of ``slot`` seals (one past the highest generation present,
    committed or not: a crashed attempt's generation is never reused) and the older
    generations it retires once committed (newest first). Reads only."""
    numbers = _numbers(store, slot)
    unit = f"{slot}/{generation_name((numbers[0] if numbers else 0) + 1)}"
    return unit, [f"{slot}/{generation_name(n)}" for n in numbers]


def seal_generation(
    store: Store,
    slot: str,
    *,
    framework: str,
    payloads: Mapping[str, Payload],
    step: int | None = None,
    meta: Mapping[str, MetaValue] | None = None,
    machine: Any = None,
) -> UnitReport:
    """Seal the next generation of ``slot`` (one past the highest present, committed or not:
    a crashed attempt's generation is never reused), then retire every older generation.

    Raises:
        as :func:`~statecraft.checkpoint.units.seal.seal_unit`; a failure before the commit
        leaves every older generation as it was.
    """
    unit, older = next_generation(store, slot)  # write_payloads creates the slot with it
    return seal_unit(
        store,
        unit,
        framework=framework,
        step=step,
        meta=meta,
        payloads=payloads,
        retire=older,
        machine=machine,
    )


def newest_generation(
    store: Store,
    slot: str,
    *,
    deep: bool = True,
    log: logging.Logger | None = None,
    settle: bool = True,
) -> tuple[UnitVerdict | None, list[UnitVerdict]]:
    """The newest generation of ``slot`` that verifies (made durable when ``settle``) and the
    newer ones passed over (see :func:`~statecraft.checkpoint.units.adopt.newest_committed`)."""
    units = generation_units(store, slot)
    return newest_committed(store, units, deep=deep, log=log, settle=settle)


def prune_slot(store: Store, slot: str, *, machine: Any = None) -> None:
    """Remove ``slot``: every generation through ``prune_unit`` (newest first: each
    invalidated before its files go), then the slot directory. A symbolic link is removed
    itself, never its target.

    Raises:
        StoreError / OSError: a removal failed; what is left is whole or uncommitted.
    """
    stat = store.stat(slot)
    if stat is None:
        return
    if stat.link or stat.kind == "symlink" or not stat.is_dir:
        store.delete_tree(slot)
        return
    for unit in generation_units(store, slot):
        prune_unit(store, unit, machine=machine)
    store.delete_tree(slot)
