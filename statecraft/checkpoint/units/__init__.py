"""Committed units: checkpoint directories a framework writes, made crash-consistent.

A unit is committed by ``<unit>/.statecraft-commit.json`` (written last, after every file it
names is durable) and removed by invalidating it first. The ``unit_seal`` and ``unit_prune``
machines are the transactions; this package is their front, used by the Lightning and Hugging
Face integrations (:mod:`statecraft.integrations`).

The records (:mod:`.manifest`) and the verification (:mod:`.verify`) load eagerly; the fronts
of the machines (:mod:`.seal`, :mod:`.prune`, :mod:`.generations`) load on first use, because
the machines' bindings (``statecraft.checkpoint.transactions.unit_*``) import the records.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from statecraft.checkpoint.units.adopt import newest_committed, settle_unit
from statecraft.checkpoint.units.manifest import (
    UNIT_MANIFEST_NAME,
    UNIT_MANIFEST_SCHEMA,
    UnitManifest,
    decode_unit_manifest,
)
from statecraft.checkpoint.units.verify import (
    UnitVerdict,
    require_committed,
    unit_files,
    verify_unit,
)

if TYPE_CHECKING:
    from statecraft.checkpoint.units.generations import (
        generation_name,
        generation_units,
        newest_generation,
        next_generation,
        prune_slot,
        seal_generation,
    )
    from statecraft.checkpoint.units.prune import prune_unit
    from statecraft.checkpoint.units.seal import UnitReport, seal_unit
    from statecraft.checkpoint.units.seal_bindings import Payload

__all__ = [
    "UNIT_MANIFEST_NAME",
    "UNIT_MANIFEST_SCHEMA",
    "Payload",
    "UnitManifest",
    "UnitReport",
    "UnitVerdict",
    "decode_unit_manifest",
    "generation_name",
    "generation_units",
    "newest_committed",
    "newest_generation",
    "next_generation",
    "prune_slot",
    "prune_unit",
    "require_committed",
    "seal_generation",
    "seal_unit",
    "settle_unit",
    "unit_files",
    "verify_unit",
]

_LAZY = {
    "Payload": "statecraft.checkpoint.units.seal_bindings",
    "UnitReport": "statecraft.checkpoint.units.seal",
    "seal_unit": "statecraft.checkpoint.units.seal",
    "prune_unit": "statecraft.checkpoint.units.prune",
    **dict.fromkeys(
        (
            "generation_name",
            "generation_units",
            "newest_generation",
            "next_generation",
            "prune_slot",
            "seal_generation",
        ),
        "statecraft.checkpoint.units.generations",
    ),
}


def __getattr__(name: str) -> Any:
    """The machine fronts, imported on first use (see the module docstring)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
