"""The deliberately wrong boundary transactions ``specs/roles_boundary.toml`` declares
(``[[broken]]``): each returns the scenarios that run one wrong variant (an effect done out
of order, a skipped check, a wrong reader), and ``statecraft crashcheck --broken`` fails unless
exploring them violates the guarantees the spec says it must.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from statecraft.checkpoint.kernel.machines import machine_bindings, shipped_machine
from statecraft.checkpoint.roles import bindings as real
from statecraft.checkpoint.roles.layout import MARKER_NAME, ROLE_MANIFEST_NAME
from statecraft.checkpoint.roles.reading import boundary_iterations, pick_boundary
from statecraft.checkpoint.roles.records import BoundaryMarker, RoleManifest
from statecraft.engine import Bindings, Machine
from statecraft.proofs.roles.scenarios import ROLES, RolesScenario, roles_boundary_scenarios
from statecraft.storage.base import Store

__all__ = [
    "first_role_counter_only",
    "marker_before_last_role",
    "marker_not_durable",
    "newest_unit_per_role",
    "partial_taken_for_committed",
    "rewrite_committed_roles",
]


def _scenario(kind: str, **changes: Any) -> list[RolesScenario]:
    (found,) = [s for s in roles_boundary_scenarios() if s.kind == kind]
    return [attrs.evolve(found, name=f"broken-{found.name}", **changes)]


def _machine(**effects: Any) -> Machine:
    base = shipped_machine("roles_boundary")
    bindings = machine_bindings("roles_boundary").merged(Bindings(**effects))
    return Machine(base.table, bindings)


# -------------------------------------------------------------- marker before the last role
def _all_but_last(ctx: real.BoundaryContext) -> None:
    for role in ctx.roles[:-1]:
        ctx.manifests[role.name] = real.write_role_unit(ctx, role)


def _marker_then_last(ctx: real.BoundaryContext) -> None:
    """Broken: ``_SUCCESS`` created while the last role is not yet written."""
    last = ctx.roles[-1]
    done = [r.name for r in ctx.roles[:-1]]
    marker = BoundaryMarker(
        "statecraft.roles-success.v1", ctx.iteration, [r.name for r in ctx.roles],
        {**{n: ctx.manifests[n].optimizer_step for n in done}, last.name: last.optimizer_step},
        dict(ctx.loop_state),
    )  # fmt: skip
    ctx.store.create_exclusive(ctx.path(MARKER_NAME), marker.encode())
    ctx.manifests[last.name] = real.write_role_unit(ctx, last)


def marker_before_last_role() -> list[RolesScenario]:
    """The marker created before the last role's unit is written and durable: a crash in
    between leaves a ``_SUCCESS`` naming a role that is not committed."""
    machine = _machine(effects={"write_roles": _all_but_last, "create_marker": _marker_then_last})
    return _scenario("next", machine_factory=lambda: machine)


# ------------------------------------------------------------ restore checks the first role
def _first_role_only(marker: BoundaryMarker, manifests: Mapping[str, RoleManifest]) -> list[str]:
    """Broken: only the first role's counter is compared with the marker's."""
    first = marker.roles[0]
    if marker.counters is not None and marker.counters[first] != manifests[first].optimizer_step:
        return [f"{first} counter differs"]
    return []


def _first_role_reader(store: Store) -> dict[str, int] | None:
    chosen, _ = pick_boundary(store, counter_check=_first_role_only)
    return None if chosen is None else dict.fromkeys(ROLES, chosen.iteration)


def first_role_counter_only() -> list[RolesScenario]:
    """A restore that checks only the first role's counter adopts the boundary whose marker
    records a wrong critic counter."""
    return _scenario("doctored", reader=_first_role_reader)


# ------------------------------------------------------------------- a reader that mixes
def _newest_per_role(store: Store) -> dict[str, int] | None:
    """Broken: each role from the newest iteration holding its committed unit, marker or
    not."""
    found: dict[str, int] = {}
    for iteration in boundary_iterations(store):
        for role in ROLES:
            unit = f"iter_{iteration:09d}/{role}/{ROLE_MANIFEST_NAME}"
            if role not in found and store.stat(unit) is not None:
                found[role] = iteration
    return found or None


def newest_unit_per_role() -> list[RolesScenario]:
    """A reader that loads each role's newest committed unit without the marker: a crash
    after the policy's unit of boundary 2 loads it beside boundary 1's critic."""
    return _scenario("next", reader=_newest_per_role)


# ----------------------------------------------------------- a retry that rewrites a role
def _clear_every_role(ctx: real.BoundaryContext) -> None:
    """Broken: the retry clears the whole boundary, committed role units included."""
    if ctx.store.stat(ctx.iter_dir) is not None:
        ctx.store.delete_tree(ctx.iter_dir)
    ctx.store.make_dirs(ctx.iter_dir)


def rewrite_committed_roles() -> list[RolesScenario]:
    """A retry whose replay was not bit-exact clears the role units a crashed save committed
    and writes them anew."""
    machine = _machine(effects={"prepare_boundary": _clear_every_role})
    return _scenario("other", machine_factory=lambda: machine)


# ------------------------------------------------------- a partial taken for a committed one
def _marker_not_looked_for(ctx: real.BoundaryContext) -> str:
    """Broken: a boundary directory is taken as committed without looking for ``_SUCCESS``."""
    return "absent" if ctx.store.stat(ctx.iter_dir) is None else "committed"


def partial_taken_for_committed() -> list[RolesScenario]:
    """The retry takes a partial boundary for a committed one and refuses: boundary 2 is
    never completed."""
    machine = _machine(observers={"observe_boundary": _marker_not_looked_for})
    return _scenario("next", machine_factory=lambda: machine)


# -------------------------------------------------------------- a marker that is not durable
def _marker_without_fsync(ctx: real.BoundaryContext) -> None:
    """Broken: ``_SUCCESS`` published but left to a later settle that never comes."""
    marker = BoundaryMarker(
        "statecraft.roles-success.v1", ctx.iteration, [r.name for r in ctx.roles],
        {r.name: ctx.manifests[r.name].optimizer_step for r in ctx.roles}, dict(ctx.loop_state),
    )  # fmt: skip
    with ctx.store.open_atomic(ctx.path(MARKER_NAME), defer_sync=True) as writer:
        writer.write(marker.encode())


def marker_not_durable() -> list[RolesScenario]:
    """The marker written without fsync: the save returns and a power loss takes it back."""
    machine = _machine(effects={"create_marker": _marker_without_fsync})
    return _scenario("next", machine_factory=lambda: machine)
