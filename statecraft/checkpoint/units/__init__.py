"""Committed units: checkpoint directories a framework writes, made crash-consistent.

A unit is committed by ``<unit>/.statecraft-commit.json`` (written last, after every file it
names is durable) and removed by invalidating it first. The ``unit_seal`` and ``unit_prune``
machines are the transactions; this package is their front, used by the Lightning and Hugging
Face integrations (:mod:`statecraft.integrations`).
"""

from statecraft.checkpoint.transactions.unit_seal import Payload
from statecraft.checkpoint.units.generations import (
    generation_name,
    generation_units,
    newest_generation,
    prune_slot,
    seal_generation,
)
from statecraft.checkpoint.units.manifest import (
    UNIT_MANIFEST_NAME,
    UNIT_MANIFEST_SCHEMA,
    UnitManifest,
    decode_unit_manifest,
)
from statecraft.checkpoint.units.prune import prune_unit
from statecraft.checkpoint.units.seal import UnitReport, seal_unit
from statecraft.checkpoint.units.verify import (
    UnitVerdict,
    newest_committed,
    require_committed,
    unit_files,
    verify_unit,
)

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
    "prune_slot",
    "prune_unit",
    "require_committed",
    "seal_generation",
    "seal_unit",
    "unit_files",
    "verify_unit",
]
