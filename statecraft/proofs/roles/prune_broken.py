"""The deliberately wrong passes ``specs/roles_prune.toml`` declares (``[[broken]]``): each
returns the scenarios that run one wrong variant, and ``statecraft crashcheck --broken`` fails
unless exploring them violates the guarantees the spec says it must.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import attrs

from statecraft.checkpoint.kernel.machines import machine_bindings, shipped_machine
from statecraft.checkpoint.roles.layout import MARKER_NAME, boundary_dir
from statecraft.checkpoint.roles.prune_bindings import RolesPruneContext, classify_boundaries
from statecraft.engine import Bindings, Machine
from statecraft.proofs.roles.prune_scenarios import RolesPruneScenario, roles_prune_scenarios

__all__ = [
    "marker_removal_not_durable",
    "newest_not_protected",
    "partial_left_standing",
    "roles_before_marker",
    "sweep_not_durable",
]


def _scenario(**changes: Any) -> list[RolesPruneScenario]:
    (found,) = roles_prune_scenarios()
    return [attrs.evolve(found, name=f"broken-{found.name}", **changes)]


def _machine(**effects: Any) -> Machine:
    base = shipped_machine("roles_prune")
    return Machine(base.table, machine_bindings("roles_prune").merged(Bindings(effects=effects)))


def _roles_then_marker(ctx: RolesPruneContext) -> None:
    """Broken: each doomed boundary's role units deleted while its ``_SUCCESS`` stands."""
    for iteration in ctx.doomed:
        here = boundary_dir(iteration)
        for entry in sorted(ctx.store.list(here)):
            if entry != MARKER_NAME:
                ctx.store.delete_tree(f"{here}/{entry}")
        ctx.store.delete(f"{here}/{MARKER_NAME}")
        ctx.invalidated.append(iteration)


def roles_before_marker() -> list[RolesPruneScenario]:
    """The roles deleted first, the marker last."""
    machine = _machine(invalidate_boundaries=_roles_then_marker)
    return _scenario(machine_factory=lambda: machine)


def _unlink_marker(ctx: RolesPruneContext) -> None:
    """Broken: ``_SUCCESS`` unlinked without fsyncing the boundary directory."""
    store: Any = ctx.store
    for iteration in ctx.doomed:
        store.fs.unlink(store.abspath(f"{boundary_dir(iteration)}/{MARKER_NAME}"))
        ctx.invalidated.append(iteration)


def marker_removal_not_durable() -> list[RolesPruneScenario]:
    """The marker's removal left unsynced: a power loss brings it back over deleted roles."""
    machine = _machine(invalidate_boundaries=_unlink_marker)
    return _scenario(machine_factory=lambda: machine)


def _policy_only(ctx: RolesPruneContext) -> None:
    """Broken: the policy alone decides; the saved and newest boundaries are not protected."""
    ctx.committed, ctx.partial, ctx.damaged = classify_boundaries(ctx.store)
    kept = set(ctx.keep(list(ctx.committed))) if ctx.keep is not None else set(ctx.committed)
    ctx.doomed = [i for i in ctx.committed if i not in kept]


def _keep_nothing(iterations: Sequence[int]) -> Collection[int]:
    return set()


def newest_not_protected() -> list[RolesPruneScenario]:
    """A policy keeping nothing, and a pass that trusts it: boundary 5 is deleted."""
    machine = _machine(decide_boundaries=_policy_only)
    return _scenario(machine_factory=lambda: machine, keep=_keep_nothing)


def _sweep_invalidated_only(ctx: RolesPruneContext) -> None:
    """Broken: only the boundaries this pass invalidated are deleted; a partial found on disk
    (a crashed save's, or one a crashed pass invalidated) is taken for someone else's."""
    for iteration in ctx.invalidated:
        ctx.store.delete_tree(boundary_dir(iteration))
        ctx.swept.append(iteration)


def partial_left_standing() -> list[RolesPruneScenario]:
    """The rerun never removes the partials a crash left."""
    machine = _machine(sweep_partials=_sweep_invalidated_only)
    return _scenario(machine_factory=lambda: machine)


def _rmtree_without_fsync(ctx: RolesPruneContext) -> None:
    """Broken: the partial boundaries unlinked as ``shutil.rmtree`` does, no directory
    fsynced: the removal sits in the page cache when the pass returns."""
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

    for iteration in sorted({*ctx.invalidated, *ctx.partial}):
        if iteration < ctx.saved_iteration:
            remove(store.abspath(boundary_dir(iteration)))
            ctx.swept.append(iteration)


def sweep_not_durable() -> list[RolesPruneScenario]:
    """The sweep without fsync: the pass returns and a power loss brings boundaries back."""
    machine = _machine(sweep_partials=_rmtree_without_fsync)
    return _scenario(machine_factory=lambda: machine)
