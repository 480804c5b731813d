"""Crash scenarios of the ``roles_boundary`` machine, run by ``tests/roles/`` and ``statecraft
crashcheck --machine roles_boundary``.

Each scenario runs the production machine with its production bindings over the production
``LocalStore`` on a :class:`~statecraft.storage.SimWorld` disk. The setup commits boundary 1
(policy counter 0, critic counter 1); the run saves boundary 2 during critic warm-up (the
policy's counter stands still at 0, the critic's advances to 2):

- ``next``: the restarted process reads (the production :func:`pick_boundary`), then saves
  boundary 2 again with the same bytes (a bit-exact replay) unless it adopted it;
- ``other``: the replay was not bit-exact: the retry's bytes differ, so it must complete
  where nothing was committed and refuse where a role was (never rewrite it);
- ``doctored``: beside the run, a boundary 3 whose ``_SUCCESS`` records a wrong critic
  counter (every role unit intact) must be passed over by the reader.

The checks are in :mod:`statecraft.proofs.roles.checks` (``specs/roles_boundary.toml``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import attrs

from statecraft.checkpoint.kernel.machines import shipped_machine
from statecraft.checkpoint.roles.bindings import BoundaryContext, StagedRole
from statecraft.checkpoint.roles.layout import MARKER_NAME, ROLE_MANIFEST_NAME
from statecraft.checkpoint.roles.reading import pick_boundary, settle_boundary
from statecraft.checkpoint.roles.records import MARKER_SCHEMA, BoundaryMarker
from statecraft.engine import CrashPlan, Machine, RunResult
from statecraft.storage.base import Store
from statecraft.storage.local import is_temporary_name
from statecraft.storage.sim import SimWorld

__all__ = [
    "ROLES",
    "ROLES_ROOT",
    "Reader",
    "RolesRecovery",
    "RolesScenario",
    "production_reader",
    "role_bytes",
    "roles_boundary_scenarios",
    "staged",
]

ROLES_ROOT = "/out/run/role_checkpoints"
ROLES = ("policy", "critic")
#: (iteration, content label) -> each role's counter
COUNTERS = {
    1: {"policy": 0, "critic": 1},
    2: {"policy": 0, "critic": 2},
    3: {"policy": 1, "critic": 3},
}

#: reads the roles store: role -> the iteration its state is loaded from (``None``: fresh)
Reader = Callable[[Store], dict[str, int] | None]


def role_bytes(iteration: int, role: str, label: str = "") -> dict[str, bytes]:
    """The files of one role unit of ``iteration`` (``label``: another replay's bytes)."""
    tag = f"{role} of boundary {iteration}{label}"
    return {
        "model.pt": (f"weights of {tag};" * 30).encode(),
        "optim.pt": (f"moments of {tag};" * 20).encode(),
        "role.pt": f"clocks and scheduler of {tag}".encode(),
    }


def staged(iteration: int, label: str = "") -> tuple[StagedRole, ...]:
    return tuple(
        StagedRole(r, COUNTERS[iteration][r], role_bytes(iteration, r, label)) for r in ROLES
    )


def production_reader(store: Store) -> dict[str, int] | None:
    """The production pick: every role from the newest committed boundary, made durable
    before it is loaded (as ``RoleRun.resume`` does)."""
    chosen, _ = pick_boundary(store)
    if chosen is None:
        return None
    settle_boundary(store, chosen)
    return dict.fromkeys(ROLES, chosen.iteration)


@attrs.frozen
class RolesRecovery:
    """What the restarted process saw and did.

    Attributes:
        adopted: role -> the iteration the reader loaded it from (``None``: nothing).
        adopted_files: role -> its files as the reader found them.
        committed_before: every committed role unit's files (path -> bytes) at restart,
            before the retry ran.
        retried: the retry ran (it was not adopted already).
        outcome: the retry's error, when it refused.
    """

    adopted: dict[str, int] | None
    adopted_files: dict[str, dict[str, bytes]]
    committed_before: dict[str, bytes]
    retried: bool = False
    outcome: BaseException | None = None


def committed_role_files(tree: Mapping[str, bytes]) -> dict[str, bytes]:
    """Every file of every role unit holding a role manifest (paths relative to the root)."""
    units = {p.rsplit("/", 1)[0] for p in tree if p.endswith("/" + ROLE_MANIFEST_NAME)}
    return {
        p: d
        for p, d in tree.items()
        if p.rsplit("/", 1)[0] in units and not is_temporary_name(p.rsplit("/", 1)[-1])
    }


@attrs.define
class RolesScenario:
    """One boundary save after boundary 1 (see the module docstring).

    Attributes:
        kind: ``next``, ``other`` or ``doctored``.
        machine_factory: the machine under test (broken variants swap it).
        reader: what the restarted process reads with (broken variants swap it).
    """

    name: str
    kind: str
    machine: str = "roles_boundary"
    machine_factory: Callable[[], Machine] = attrs.field(
        default=lambda: shipped_machine("roles_boundary")
    )
    reader: Reader = production_reader
    inject_faults: bool = True
    recovery_may_fail: bool = False

    def store(self, world: SimWorld) -> Store:
        return world.local_store(ROLES_ROOT)

    def setup(self, world: SimWorld) -> None:
        world.fs.makedirs(ROLES_ROOT)
        store = self.store(world)
        shipped_machine("roles_boundary").recover(
            BoundaryContext(store, 1, staged(1), {"critic_warmup_iterations": 2})
        ).raise_for_failure()
        if self.kind == "doctored":
            shipped_machine("roles_boundary").recover(
                BoundaryContext(store, 3, staged(3))
            ).raise_for_failure()
            wrong = BoundaryMarker(
                MARKER_SCHEMA, 3, list(ROLES), {"policy": 1, "critic": 7}, {}
            )  # the critic committed 3: a doctored (or stale) marker
            store.delete(f"iter_000000003/{MARKER_NAME}")
            store.create_exclusive(f"iter_000000003/{MARKER_NAME}", wrong.encode())

    def run(self, world: SimWorld, *, crash: CrashPlan | None) -> RunResult:
        ctx = BoundaryContext(self.store(world), 2, staged(2), {"critic_warmup_iterations": 2})
        return self.machine_factory().recover(ctx, crash=crash, gate=world.gate)

    @property
    def retry_label(self) -> str:
        return " (another replay)" if self.kind == "other" else ""

    def recover(self, world: SimWorld) -> RolesRecovery:
        """The restarted process: read, then save boundary 2 again unless it was adopted."""
        store = self.store(world)
        tree = world.fs.tree(ROLES_ROOT)
        adopted = self.reader(store)
        files = {
            role: {
                name: tree.get(f"iter_{iteration:09d}/{role}/{name}", b"")
                for name in role_bytes(iteration, role)
            }
            for role, iteration in (adopted or {}).items()
        }
        before = committed_role_files(tree)
        if adopted is not None and set(adopted.values()) == {2}:
            return RolesRecovery(adopted, files, before)
        ctx = BoundaryContext(
            store, 2, staged(2, self.retry_label), {"critic_warmup_iterations": 2}
        )
        result = self.machine_factory().recover(ctx)
        outcome = result.error if result.failed else None
        return RolesRecovery(adopted, files, before, retried=True, outcome=outcome)


def roles_boundary_scenarios() -> list[RolesScenario]:
    """The scenarios ``statecraft crashcheck`` runs for the ``roles_boundary`` machine."""
    return [
        RolesScenario("warmup-boundary-beside-a-committed-one", "next"),
        RolesScenario("retry-after-a-replay-that-was-not-bit-exact", "other", inject_faults=False),
        RolesScenario("doctored-counters-passed-over", "doctored", inject_faults=False),
    ]
