"""Sealing a unit: the front of the ``unit_seal`` machine."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from statecraft.checkpoint.kernel.machines import shipped_machine
from statecraft.checkpoint.units.manifest import MetaValue, UnitManifest
from statecraft.checkpoint.units.seal_bindings import Payload, UnitSealContext
from statecraft.errors import UnitError
from statecraft.storage.base import Store

__all__ = ["UnitReport", "seal_unit"]


@attrs.frozen
class UnitReport:
    """One committed seal.

    Attributes:
        unit: the unit committed.
        manifest: its commit manifest.
        seconds: wall time of the seal (writes or digests, fsyncs, commit, retirement).
        retired: the replaced units removed after the commit.
    """

    unit: str
    manifest: UnitManifest
    seconds: float
    retired: tuple[str, ...] = ()

    @property
    def bytes(self) -> int:
        return self.manifest.size


def seal_unit(
    store: Store,
    unit: str,
    *,
    framework: str,
    step: int | None = None,
    meta: Mapping[str, MetaValue] | None = None,
    payloads: Mapping[str, Payload] | None = None,
    expect: Sequence[str] = (),
    retire: Sequence[str] = (),
    machine: Any = None,
) -> UnitReport:
    """Commit ``unit`` (a directory relative to ``store``'s root) through the ``unit_seal``
    machine: write ``payloads`` (or adopt the files a framework wrote there when ``None``),
    make everything durable, create the commit manifest last, then retire ``retire``.

    Args:
        framework / step / meta: recorded in the manifest.
        payloads: file name -> writer of its bytes (``lambda f: torch.save(state, f)``).
            Uncommitted leftovers in the unit are cleared first.
        expect: names that must be among adopted files.
        retire: units removed (invalidate, then delete) only after this one is committed.
        machine: the machine to run (tests pass broken ones; default: the shipped table).

    Returns:
        the report of the committed seal.

    Raises:
        UnitCommittedError: the unit is committed already; nothing was touched.
        UnitDamagedError: the unit holds a manifest that does not decode; nothing touched.
        UnitError / StoreError / OSError / the payload's own error: the seal failed before
            its commit (no manifest exists), or a retirement failed after it (the unit is
            committed; the replaced unit is left whole or invalidated).
    """
    started = time.perf_counter()
    ctx = UnitSealContext(
        store,
        unit,
        framework,
        step,
        dict(meta or {}),
        payloads,
        tuple(expect),
        tuple(retire),
    )
    result = (machine or shipped_machine("unit_seal")).recover(ctx)
    result.raise_for_failure()
    if ctx.manifest is None or result.final_state != "committed":  # pragma: no cover
        raise UnitError(f"{ctx.where}: the seal ended in {result.final_state!r}", path=ctx.where)
    return UnitReport(unit, ctx.manifest, time.perf_counter() - started, tuple(ctx.retired))
