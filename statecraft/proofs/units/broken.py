"""The deliberately wrong unit transactions ``specs/unit_seal.toml`` and
``specs/unit_prune.toml`` declare (``[[broken]]``): each returns the scenarios that run one
wrong variant (a swapped table, a skipped fsync, a skipped check), and ``statecraft crashcheck
--broken`` fails unless exploring them violates the guarantees the spec says it must. A
guarantee whose check no wrong variant makes fail was never shown able to fail.
"""

from __future__ import annotations

import posixpath
import tomllib
from collections.abc import Callable
from typing import Any, cast

import attrs

from statecraft.checkpoint.kernel.machines import machine_bindings
from statecraft.checkpoint.units import prune_unit, seal_unit, unit_files
from statecraft.checkpoint.units.prune_bindings import UnitPruneContext
from statecraft.checkpoint.units.seal_bindings import UnitSealContext
from statecraft.engine import Bindings, Machine, parse_table
from statecraft.proofs.units.scenarios import (
    FOLDER_OLD,
    UnitScenario,
    framework_files,
    unit_prune_scenarios,
    unit_seal_scenarios,
    write_like_a_framework,
)
from statecraft.resources import machine_path
from statecraft.storage.base import Store
from statecraft.storage.sim import SimWorld

__all__ = [
    "adopt_without_fsync",
    "delete_before_invalidate",
    "delete_by_name_prefix",
    "delete_without_fsync",
    "failed_commit_left_standing",
    "manifest_before_durable",
    "manifest_not_fsynced",
    "rerun_takes_uncommitted_for_done",
    "retire_before_commit",
    "seal_over_a_committed_unit",
    "unit_table",
]


def unit_table(name: str, swap: tuple[str, str] | None = None) -> dict[str, Any]:
    """The shipped table ``name`` as data, with the effects ``swap`` exchanged."""
    data = tomllib.loads(machine_path(name).read_text())
    if swap is not None:
        a, b = swap
        for t in data["transitions"]:
            if t["do"] == a:
                t["do"] = b
            elif t["do"] == b:
                t["do"] = a
    return data


def _machine(name: str, data: dict[str, Any], **effects: Callable[[Any], None]) -> Machine:
    bindings = machine_bindings(name)
    if effects:
        bindings = bindings.merged(Bindings(effects=effects))
    return Machine(parse_table(data, source=f"broken {name} table"), bindings)


def _seal(name: str, factory: Callable[[], Machine]) -> list[UnitScenario]:
    (found,) = [s for s in unit_seal_scenarios() if s.name == name]
    return [attrs.evolve(found, name=f"broken-{found.name}", machine_factory=factory)]


def _prune(factory: Callable[[], Machine]) -> list[UnitScenario]:
    return [
        attrs.evolve(s, name=f"broken-{s.name}", machine_factory=factory)
        for s in unit_prune_scenarios()
    ]


SLOT_SCENARIO = "slot-second-generation-retires-the-first"
FOLDER_SCENARIO = "framework-folder-adopted-beside-an-older-one"
REFUSED_SCENARIO = "seal-over-a-committed-unit-is-refused"


# ----------------------------------------------------------------------------- unit_seal
def manifest_before_durable_machine() -> Machine:
    """The wrong seal: the commit manifest is created before the files are made durable."""
    return _machine("unit_seal", unit_table("unit_seal", ("make_files_durable", "commit_manifest")))


def manifest_before_durable() -> list[UnitScenario]:
    """The commit manifest before the files are fsynced: a power loss after it leaves it
    naming a framework's torn or empty files. (Payloads statecraft writes itself are each
    published durably by their atomic write, so the framework folder is the case.)"""
    return _seal(FOLDER_SCENARIO, manifest_before_durable_machine)


def adopt_without_fsync_machine() -> Machine:
    """The wrong seal: a framework's files are trusted durable (the step that fsyncs them does
    nothing), what a commit marker written beside unsynced files amounts to."""
    return _machine("unit_seal", unit_table("unit_seal"), make_files_durable=lambda ctx: None)


def adopt_without_fsync() -> list[UnitScenario]:
    """The Trainer writes without fsync; the seal commits over its files without fsyncing
    them."""
    return _seal(FOLDER_SCENARIO, adopt_without_fsync_machine)


def _trusting_retire(ctx: UnitSealContext) -> None:
    """Broken: retires without checking that the unit is committed."""
    for other in ctx.retire:
        prune_unit(ctx.store, other)


def retire_before_commit_machine() -> Machine:
    """The wrong seal: the replaced generation is pruned before the new one is written."""
    data = unit_table("unit_seal", ("write_payloads", "retire_units"))
    return _machine(
        "unit_seal",
        data,
        retire_units=_trusting_retire,
        write_payloads=machine_bindings("unit_seal").effects["write_payloads"],
    )


def retire_before_commit() -> list[UnitScenario]:
    """The slot's older generation retired before the new one is written and committed: a
    crash in between leaves no committed generation."""
    return _seal(SLOT_SCENARIO, retire_before_commit_machine)


def _observe_without_commit_check(ctx: UnitSealContext) -> str:
    """Broken: the unit's state from its directory alone; its commit manifest is not looked
    for, so a committed unit reads as an uncommitted leftover."""
    stat = ctx.store.stat(ctx.unit)
    return "absent" if stat is None else "uncommitted"


def _committed_taken_for_uncommitted() -> Machine:
    bindings = machine_bindings("unit_seal").merged(
        Bindings(observers={"observe_unit": _observe_without_commit_check})
    )
    return Machine(parse_table(unit_table("unit_seal"), source="broken unit_seal"), bindings)


def seal_over_a_committed_unit() -> list[UnitScenario]:
    """The committed check skipped: a unit found committed is sealed again like an
    uncommitted leftover (cleared, rewritten, committed anew) instead of refused."""
    return _seal(REFUSED_SCENARIO, _committed_taken_for_uncommitted)


def _manifest_without_fsync(ctx: UnitSealContext) -> None:
    """Broken: the manifest is created by exclusive create but never fsynced (nor its
    directory), as a plain ``open(path, "x").write(...)`` does."""
    durable = ctx.store
    ctx.store = cast(Store, _StoreWithoutFsync(durable))
    try:
        machine_bindings("unit_seal").effects["commit_manifest"](ctx)
    finally:
        ctx.store = durable


@attrs.define
class _StoreWithoutFsync:
    """The store, but its exclusive create skips every fsync."""

    raw: Any

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)

    def create_exclusive(self, path: str, data: bytes) -> None:
        fs = self.raw.fs
        handle = fs.open_write(self.raw.abspath(path), exclusive=True)
        fs.write(handle, data)
        fs.close(handle)


def manifest_not_fsynced_machine() -> Machine:
    return _machine("unit_seal", unit_table("unit_seal"), commit_manifest=_manifest_without_fsync)


def manifest_not_fsynced() -> list[UnitScenario]:
    """The commit manifest created without fsync of the file or its directory: the seal
    returns, retires the replaced unit, and a power loss takes the commit back."""
    return [
        *_seal(SLOT_SCENARIO, manifest_not_fsynced_machine),
        *_seal(FOLDER_SCENARIO, manifest_not_fsynced_machine),
    ]


def _keep_own_manifest(ctx: UnitSealContext) -> None:
    """Broken: after a failed commit the manifest this seal created is left in place."""


def failed_commit_left_standing() -> list[UnitScenario]:
    """A commit whose fsync failed leaves its manifest (not discarded): the retry finds the
    unit committed while a power loss may still take the manifest back."""
    factory = lambda: _machine(  # noqa: E731
        "unit_seal", unit_table("unit_seal"), discard_own_manifest=_keep_own_manifest
    )
    return _seal(FOLDER_SCENARIO, factory)


# ----------------------------------------------------------------------------- unit_prune
def _rmtree_files_first(ctx: UnitPruneContext) -> None:
    """Broken: deletes the unit's files (what shutil.rmtree does, in listing order) while the
    commit manifest is still there."""
    for name in unit_files(ctx.store, ctx.unit):
        ctx.store.delete(f"{ctx.unit}/{name}")
    ctx.store.delete_tree(ctx.unit)


def delete_before_invalidate_machine() -> Machine:
    """The wrong prune: files go first, the manifest last."""
    return _machine(
        "unit_prune", unit_table("unit_prune", ("invalidate", "delete_files")),
        delete_files=_rmtree_files_first,
    )  # fmt: skip


def delete_before_invalidate() -> list[UnitScenario]:
    """The prune deletes the files while the commit manifest still names them."""
    return _prune(delete_before_invalidate_machine)


def _rmtree_without_fsync(ctx: UnitPruneContext) -> None:
    """Broken: the unit's files and directories unlinked as ``shutil.rmtree`` does, no
    directory fsynced: the removal sits in the page cache when the prune returns."""
    store: Any = ctx.store
    fs = store.fs

    def remove(path: str) -> None:
        stat = fs.stat(path)
        if stat is None:
            return
        if not stat.is_dir or stat.link:
            fs.unlink(path)
            return
        for name in fs.listdir(path):
            remove(f"{path}/{name}")
        fs.rmdir(path)

    remove(store.abspath(ctx.unit))


def delete_without_fsync() -> list[UnitScenario]:
    """The files deleted without fsyncing their directories: the prune returns and a power
    loss brings the unit's files back."""
    factory = lambda: _machine(  # noqa: E731
        "unit_prune", unit_table("unit_prune"), delete_files=_rmtree_without_fsync
    )
    return _prune(factory)


def _rerun_stops_at_uncommitted() -> Machine:
    data = unit_table("unit_prune")
    data["recover"]["uncommitted"] = "deleted"
    return _machine("unit_prune", data)


def rerun_takes_uncommitted_for_done() -> list[UnitScenario]:
    """A rerun that finds the manifest gone takes the prune for finished: the files a crashed
    prune left behind after its invalidation stay forever."""
    return _prune(_rerun_stops_at_uncommitted)


#: a Trainer folder whose name extends the pruned one's (checkpoint-2, checkpoint-20)
PREFIX_SIBLING = f"{FOLDER_OLD}0"


@attrs.define
class PrefixSiblingScenario(UnitScenario):
    """The prune scenario with one more committed folder whose name starts with the pruned
    one's (``checkpoint-20`` beside ``checkpoint-2``), as a Trainer's folders do."""

    def setup(self, world: SimWorld) -> None:
        super().setup(world)
        write_like_a_framework(world, PREFIX_SIBLING, framework_files(20))
        seal_unit(self.store(world), PREFIX_SIBLING, framework="hf-trainer", step=20)


def _delete_by_prefix(ctx: UnitPruneContext) -> None:
    """Broken: the unit removed by name pattern (``rm -rf checkpoint-2*``), which takes every
    sibling whose name starts with the unit's."""
    parent, name = posixpath.split(ctx.unit)
    for entry in ctx.store.list(parent):
        if entry.startswith(name):
            ctx.store.delete_tree(posixpath.join(parent, entry))


def delete_by_name_prefix() -> list[UnitScenario]:
    """The prune removes by name prefix: a committed sibling ``checkpoint-20`` goes with
    ``checkpoint-2``."""
    factory = lambda: _machine(  # noqa: E731
        "unit_prune", unit_table("unit_prune"), delete_files=_delete_by_prefix
    )
    return [
        PrefixSiblingScenario(
            f"broken-{s.name}-and-{PREFIX_SIBLING}", s.machine, s.kind, machine_factory=factory
        )
        for s in unit_prune_scenarios()
    ]
