"""The deliberately wrong direct saves ``specs/direct_save.toml`` declares (``[[broken]]``):
each returns the scenarios that run one wrong variant (a swapped table, a skipped lease or plan
check, a swallowed error), and ``statecraft crashcheck --broken`` fails unless exploring them
violates the guarantees the spec says it must. A guarantee whose check no wrong variant makes
fail was never shown able to fail.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from typing import Any

import attrs

from statecraft.checkpoint.direct import bindings
from statecraft.checkpoint.direct.manifest import decode_direct_manifest
from statecraft.checkpoint.kernel.layout import LATEST_POINTER, format_latest
from statecraft.checkpoint.kernel.machines import load_machine, machine_bindings
from statecraft.engine import Bindings, Machine, parse_table
from statecraft.proofs.direct.scenarios import (
    DirectScenario,
    direct_save_scenarios,
    shard_objects,
)
from statecraft.resources import machine_path
from statecraft.storage.base import FileRecord
from statecraft.storage.digest import Digest

__all__ = [
    "broken_scenario",
    "commit_without_lease_check",
    "latest_before_manifest",
    "latest_error_swallowed",
    "latest_replaced_by_delete_then_put",
    "manifest_before_every_rank",
    "plan_not_compared",
    "retry_rewrites_committed",
    "retry_skips_latest",
    "swapped_machine",
    "with_bindings",
]

Effect = Callable[[Any], None]


def with_bindings(**effects: Effect) -> Machine:
    """The shipped direct-save table with ``effects`` replaced."""
    merged = machine_bindings("direct_save").merged(Bindings(effects=effects))
    return Machine(load_machine("direct_save").table, merged)


def swapped_machine(first: str, second: str) -> Machine:
    """The direct-save table with the effects of two transitions exchanged."""
    data = tomllib.loads(machine_path("direct_save").read_text())
    a = next(t for t in data["transitions"] if t["do"] == first)
    b = next(t for t in data["transitions"] if t["do"] == second)
    a["do"], b["do"] = b["do"], a["do"]
    table = parse_table(data, source="broken direct_save table")
    return Machine(table, machine_bindings("direct_save"))


def broken_scenario(name: str, machine: Callable[[], Machine]) -> DirectScenario:
    """The shipped scenario ``name`` run by ``machine``."""
    base = next(s for s in direct_save_scenarios() if s.name == name)
    return attrs.evolve(base, name=f"broken-{name}", machine_factory=machine)


def latest_before_manifest() -> list[DirectScenario]:
    """latest PUT before the manifest (the two transitions swapped): a crash in between leaves
    latest naming an uncommitted iteration."""
    machine = lambda: swapped_machine("commit_manifest", "publish_latest")  # noqa: E731
    return [broken_scenario("save-after-previous", machine)]


def _manifest_before_rank_one(ctx: Any) -> None:
    """Broken write_components: rank 0's shards and the .metadata, then the control files and
    the manifest (naming every rank's shards), and only then rank 1's shards."""
    objects = shard_objects(ctx.plan, ctx.write_shards.salt)
    late = {p: d for p, d in objects.items() if "/__1_" in p}
    records = {}
    for path, data in objects.items():
        if path not in late:
            records[path] = ctx.store.write_atomic(path, data)
    for path, data in late.items():
        records[path] = FileRecord(path, len(data), Digest.of(data))
    ctx.records = records
    bindings.write_control(ctx)
    bindings.commit_manifest(ctx)
    for path, data in late.items():
        ctx.store.write_atomic(path, data)


def manifest_before_every_rank() -> list[DirectScenario]:
    """The manifest committed before rank 1's shards are written."""
    machine = lambda: with_bindings(write_components=_manifest_before_rank_one)  # noqa: E731
    return [broken_scenario("save-after-previous", machine)]


def without_lease(effect: Effect) -> Effect:
    """A broken effect: ``effect`` run without its lease check (the fence not checked)."""

    def broken(ctx: Any) -> None:
        lease, ctx.lease = ctx.lease, None
        try:
            effect(ctx)
        finally:
            ctx.lease = lease

    return broken


def commit_without_lease_check() -> list[DirectScenario]:
    """The control write and the commit do not check the writer lease (the fence): a stale
    writer whose lease was taken over commits the iteration."""
    machine = lambda: with_bindings(  # noqa: E731
        write_control=without_lease(bindings.write_control),
        commit_manifest=without_lease(bindings.commit_manifest),
    )
    return [broken_scenario("stale-writer-lease-taken-over", machine)]


def _rewrite_committed(ctx: Any) -> None:
    """Broken validate_committed: the retry writes its control files again."""
    bindings.validate_committed(ctx)
    ctx.store.write_atomic(f"{ctx.iter_dir}/.posttrain/generations/00000001/trainer.pt", b"x")


def retry_rewrites_committed() -> list[DirectScenario]:
    """A retry that finds the iteration committed writes under it again."""
    machine = lambda: with_bindings(validate_committed=_rewrite_committed)  # noqa: E731
    return [broken_scenario("manifest-committed-latest-behind", machine)]


def _delete_then_put(ctx: Any) -> None:
    """Broken publish_latest: the lease checked, then latest replaced by a DELETE and a fresh
    PUT (not one conditional PUT): in between no latest exists."""
    if ctx.lease is not None:
        ctx.lease.check()
    ctx.store.delete(LATEST_POINTER)
    ctx.store.write_atomic(LATEST_POINTER, format_latest(ctx.iteration))
    ctx.wrote_latest = True


def latest_replaced_by_delete_then_put() -> list[DirectScenario]:
    """latest replaced by delete-then-create: a crash between them leaves no latest."""
    machine = lambda: with_bindings(publish_latest=_delete_then_put)  # noqa: E731
    return [broken_scenario("save-after-previous", machine)]


def _swallow_latest_error(ctx: Any) -> None:
    """Broken publish_latest: a failed latest PUT is logged and the save returns committed."""
    try:
        bindings.publish_latest(ctx)
    except OSError:  # a StoreError is an OSError
        pass


def latest_error_swallowed() -> list[DirectScenario]:
    """A failed latest PUT swallowed: the save returns although latest never named the
    iteration (caught under an injected request fault)."""
    machine = lambda: with_bindings(publish_latest=_swallow_latest_error)  # noqa: E731
    return [broken_scenario("save-after-previous", machine)]


def retry_skips_latest() -> list[DirectScenario]:
    """A retry that finds the manifest but latest behind only validates it and ends
    committed, without moving latest (complete_latest does what confirm_committed does)."""
    machine = lambda: with_bindings(complete_latest=bindings.confirm_committed)  # noqa: E731
    return [
        broken_scenario("save-after-previous", machine),
        broken_scenario("manifest-committed-latest-behind", machine),
    ]


def _validate_without_plan(ctx: Any) -> None:
    """Broken validate_committed: the found manifest is taken as it is, its plan never
    compared with this save's."""
    where = f"{ctx.store.describe()}/{ctx.manifest_path}"
    found = decode_direct_manifest(
        ctx.store.read_bytes(ctx.manifest_path), source=where, iteration=ctx.iteration
    )
    ctx.manifest = found
    ctx.generation = found.control_generation


def plan_not_compared() -> list[DirectScenario]:
    """The plan check skipped: an iteration committed with another plan is taken as this
    save's and latest is moved to it."""
    machine = lambda: with_bindings(validate_committed=_validate_without_plan)  # noqa: E731
    return [broken_scenario("plan-drift-refused", machine)]
