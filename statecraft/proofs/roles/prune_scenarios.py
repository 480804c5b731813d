"""Crash scenario of the ``roles_prune`` machine (the retention of multi-role boundaries), run
by ``tests/roles/`` and ``statecraft crashcheck --machine roles_prune``.

The setup commits boundaries 1, 3, 4 and 5 with the production ``roles_boundary`` machine and
leaves the partial boundary 2 a crashed save left (its policy unit committed, its critic unit
half written, no ``_SUCCESS``). The run is the pass after boundary 5 with a policy keeping the
newest two: it deletes 1 and 3 and sweeps 2; 4 and 5 stay. The restarted process reruns the
pass, then reads with the production :func:`pick_boundary`. The checks are in
:mod:`statecraft.proofs.roles.prune_checks` (``specs/roles_prune.toml``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import attrs

from statecraft.checkpoint.kernel.machines import shipped_machine
from statecraft.checkpoint.roles.bindings import BoundaryContext, StagedRole
from statecraft.checkpoint.roles.layout import MARKER_NAME, ROLE_MANIFEST_NAME
from statecraft.checkpoint.roles.prune_bindings import RolesPruneContext
from statecraft.checkpoint.roles.reading import pick_boundary
from statecraft.engine import CrashPlan, Machine, RunResult
from statecraft.proofs.roles.scenarios import ROLES, ROLES_ROOT, role_bytes
from statecraft.storage.base import Store
from statecraft.storage.sim import SimWorld

__all__ = [
    "COMMITTED",
    "KEPT",
    "PARTIAL",
    "SAVED",
    "RolesPruneRecovery",
    "RolesPruneScenario",
    "keep_newest_two",
    "roles_prune_scenarios",
]

COMMITTED = (1, 3, 4, 5)
PARTIAL = 2
SAVED = 5
#: what the pass keeps: the newest two (the saved boundary among them)
KEPT = (4, 5)


def keep_newest_two(iterations: Sequence[int]) -> Collection[int]:
    """The policy of the scenario (``keep_model_last=2``)."""
    return set(sorted(iterations, reverse=True)[:2])


def _staged(iteration: int) -> tuple[StagedRole, ...]:
    return tuple(StagedRole(r, iteration, role_bytes(iteration, r)) for r in ROLES)


@attrs.frozen
class RolesPruneRecovery:
    """What the restarted process did: the rerun pass's error (``None``: it completed) and
    the iteration the reader adopted afterwards (``None``: nothing)."""

    outcome: BaseException | None
    adopted: int | None


@attrs.define
class RolesPruneScenario:
    """The pass after boundary 5 (see the module docstring).

    Attributes:
        machine_factory: the machine under test (broken variants swap it).
        keep: the policy the pass applies.
    """

    name: str
    machine: str = "roles_prune"
    machine_factory: Callable[[], Machine] = attrs.field(
        default=lambda: shipped_machine("roles_prune")
    )
    keep: Callable[[Sequence[int]], Collection[int]] = keep_newest_two
    inject_faults: bool = True
    recovery_may_fail: bool = False

    def store(self, world: SimWorld) -> Store:
        return world.local_store(ROLES_ROOT)

    def setup(self, world: SimWorld) -> None:
        world.fs.makedirs(ROLES_ROOT)
        store = self.store(world)
        for iteration in sorted((*COMMITTED, PARTIAL)):
            shipped_machine("roles_boundary").recover(
                BoundaryContext(store, iteration, _staged(iteration))
            ).raise_for_failure()
        here = f"iter_{PARTIAL:09d}"  # a crashed save: no marker, the critic half written
        store.delete(f"{here}/{MARKER_NAME}")
        store.delete(f"{here}/critic/{ROLE_MANIFEST_NAME}")
        store.delete(f"{here}/critic/optim.pt")

    def run(self, world: SimWorld, *, crash: CrashPlan | None) -> RunResult:
        ctx = RolesPruneContext(self.store(world), SAVED, self.keep)
        return self.machine_factory().recover(ctx, crash=crash, gate=world.gate)

    def recover(self, world: SimWorld) -> RolesPruneRecovery:
        """The restarted process: the next pass after boundary 5, then the reader."""
        store = self.store(world)
        result = self.machine_factory().recover(RolesPruneContext(store, SAVED, self.keep))
        chosen, _ = pick_boundary(store)
        return RolesPruneRecovery(
            result.error if result.failed else None, None if chosen is None else chosen.iteration
        )


def roles_prune_scenarios() -> list[RolesPruneScenario]:
    """The scenarios ``statecraft crashcheck`` runs for the ``roles_prune`` machine."""
    return [RolesPruneScenario("keep-the-newest-two-and-sweep-a-crashed-save")]
