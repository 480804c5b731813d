"""Two writers of one attempt, interleaved at every I/O point (issue 8, item 1).

Writer A (holding the writer lease, :mod:`statecraft.checkpoint.fencing.lease`) saves ``iter_4``
over
a committed ``iter_2``. At A's I/O operation number ``k`` — for every ``k`` of A's save — a
second process B starts on the same simulated disk:

- ``live``: A is alive, so B's lease acquisition must refuse (``WriterLeaseError``) without
  touching anything; A's save then completes.
- ``stolen``: B wrongly believes A dead (the record-only liveness model the simulated
  filesystem has: no ``flock``), takes the lease over and saves ``iter_6`` to completion;
  then A continues. A's fence (the lease re-read at each publication) must stop it.

After each run the save contract's own checks judge the disk: SAVE-IMMUTABLE
(:func:`~statecraft.proofs.save.checks.committed_iterations_never_rewritten`) and
SAVE-LATEST-MONOTONIC
(:func:`~statecraft.proofs.save.checks.latest_never_absent_or_older`), both from the state
before A's save and from the state B left (so B's commit is protected too).
``broken=True`` runs A without its lease (the save as it was before fencing): the harness
must catch it.

This is a separate explorer, not a ``specs/save.toml`` scenario: the crash explorer replays one
process and crashes it, while this one runs two processes to completion, interleaved.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from statecraft.checkpoint.fencing.lease import WriterLease, acquire_lease
from statecraft.engine.crash import Fault, IoGate
from statecraft.engine.runner import RunResult
from statecraft.errors import GuaranteeViolation, WriterLeaseError
from statecraft.proofs.oracle import CHECKPOINTS_ROOT
from statecraft.proofs.save.checks import (
    committed_iterations_never_rewritten,
    latest_never_absent_or_older,
)
from statecraft.proofs.save.scenarios import SaveScenario, save_context, shipped_machine
from statecraft.proofs.scenario import CheckContext
from statecraft.proofs.training import SALT_RETRY, SALT_RUN, SALT_SETUP
from statecraft.storage.sim import SimWorld

__all__ = ["RUN_ROOT", "TwinOutcome", "TwinReport", "explore_twin_writers"]

RUN_ROOT = CHECKPOINTS_ROOT.rsplit("/", 1)[0]  # the attempt's run directory (the lease's)
_SCENARIO = SaveScenario("twin-writers", target=4, previous=(2,), with_data=False)
_CHECKS = (committed_iterations_never_rewritten, latest_never_absent_or_older)


@attrs.frozen
class TwinOutcome:
    """One interleaving: B started before A's I/O op ``point`` (``op`` on ``target``)."""

    mode: str
    point: int
    op: str
    a_error: str | None  # how A's save ended (None: it committed)
    b_error: str | None  # how B's start / save ended
    violations: tuple[str, ...]


@attrs.frozen
class TwinReport:
    """Every interleaving of one mode and variant."""

    broken: bool
    outcomes: tuple[TwinOutcome, ...]

    @property
    def violations(self) -> list[TwinOutcome]:
        return [o for o in self.outcomes if o.violations]


class _InterleaveGate(IoGate):
    """An I/O gate that runs ``action`` (the second writer) once, just before op ``at``."""

    def __init__(self, at: int, action: Callable[[], None]) -> None:
        super().__init__()
        self.at = at
        self.action: Callable[[], None] | None = action
        self.op = ""

    def before_io(self, op: str, target: str) -> Fault | None:
        if self.action is not None and self.count == self.at:
            action, self.action = self.action, None
            self.op = f"{op} {target}"
            action()
        return super().before_io(op, target)


def _alive_if(owner: str) -> Callable[[object], bool]:
    return lambda record: getattr(record, "owner", None) == owner


def _setup() -> tuple[SimWorld, WriterLease]:
    world = SimWorld()
    lease = acquire_lease(world.local_store(RUN_ROOT), pid=1, host="node-a")
    lease.publish()
    ctx = save_context(world.local_store(CHECKPOINTS_ROOT), 2, with_data=False, salt=SALT_SETUP)
    ctx.lease = lease
    shipped_machine("save").recover(ctx).raise_for_failure()
    world.settle()
    return world, lease


def _save_a(world: SimWorld, lease: WriterLease | None, gate: IoGate) -> RunResult:
    world.rearm(gate)
    ctx = save_context(world.local_store(CHECKPOINTS_ROOT), 4, with_data=False, salt=SALT_RUN)
    ctx.lease = lease
    return shipped_machine("save").recover(ctx)


def _judge(before: SimWorld, world: SimWorld) -> list[str]:
    found = []
    for check in _CHECKS:
        ctx = CheckContext(_SCENARIO, "crashed", "process_kill", world, before, False)
        try:
            check(ctx)
        except GuaranteeViolation as exc:
            found.append(f"{check.__name__}: {exc}")
    return found


def _one(mode: str, point: int, *, broken: bool) -> TwinOutcome:
    world, lease_a = _setup()
    before = world.copy()
    held_by_a = lease_a.record.owner
    b_error: list[str] = []
    after_b: list[SimWorld] = []

    def second_writer() -> None:
        run_store = world.local_store(RUN_ROOT)
        try:
            if mode == "live":
                acquire_lease(run_store, alive=_alive_if(held_by_a), pid=2, host="node-a")
                b_error.append("B started while A was alive")
                return
            lease_b = acquire_lease(run_store, alive=lambda record: False, pid=2, host="node-a")
            lease_b.publish()
            ctx = save_context(
                world.local_store(CHECKPOINTS_ROOT), 6, with_data=False, salt=SALT_RETRY
            )
            ctx.lease = lease_b
            result = shipped_machine("save").recover(ctx)
            if result.failed:
                b_error.append(f"B's save failed: {result.error!r}")
            after_b.append(world.copy())
        except WriterLeaseError as exc:
            b_error.append(f"refused: {type(exc).__name__}")

    gate = _InterleaveGate(point, second_writer)
    result = _save_a(world, None if broken else lease_a, gate)
    violations = _judge(before, world)
    if after_b:
        violations += [f"after B: {v}" for v in _judge(after_b[0], world)]
    if mode == "live" and b_error != ["refused: WriterLeaseError"]:
        violations.append(f"B was not refused at startup: {b_error}")
    if mode == "live" and result.failed:
        violations.append(f"A's save failed although B was refused: {result.error!r}")
    return TwinOutcome(
        mode,
        point,
        gate.op,
        None if not result.failed else type(result.error).__name__,
        b_error[0] if b_error else None,
        tuple(violations),
    )


def explore_twin_writers(*, mode: str = "stolen", broken: bool = False) -> TwinReport:
    """Run every interleaving of writer B into writer A's save (see the module doc).

    Args:
        mode: ``"live"`` (B must be refused) or ``"stolen"`` (B takes the lease over).
        broken: run A without its lease (no lease check at any write or commit).

    Returns:
        one :class:`TwinOutcome` per I/O point of A's uninterleaved save.
    """
    if mode not in ("live", "stolen"):
        raise ValueError(f"mode must be 'live' or 'stolen', got {mode!r}")
    world, lease = _setup()
    gate = IoGate()
    _save_a(world, None if broken else lease, gate).raise_for_failure()
    outcomes = tuple(_one(mode, k, broken=broken) for k in range(gate.count))
    return TwinReport(broken, outcomes)
