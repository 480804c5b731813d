"""What the crash explorer needs from a scenario, and what a guarantee check receives."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import attrs

from statecraft.engine.crash import CrashPlan, IoRecord
from statecraft.engine.runner import RunResult
from statecraft.errors import GuaranteeViolation
from statecraft.storage.sim import SimWorld

__all__ = ["CheckContext", "GuaranteeViolation", "Scenario"]


class Scenario(Protocol):
    """One transaction run the explorer crashes at every point.

    Contract (the explorer calls, in order, each on a fresh copy of the world):
        1. :meth:`setup` once, on a blank world: the durable state before the transaction
           (previous checkpoints...). The explorer then makes it all durable.
        2. :meth:`run` for the reference run and again for every crash point; it must be
           deterministic (same I/O operations in the same order on the same world) and must
           let ``SimulatedCrash`` propagate.
        3. :meth:`recover` on the world a restarted process finds: what production does at
           restart (observe, continue the machine, resume...). Its return value is handed to
           the checks as ``ctx.recovery``. It may raise; that is a violation unless the
           scenario sets ``recovery_may_fail``. It must read nothing but the world and the
           scenario's fixed fields (a restarted process has nothing else): the explorer runs
           it once per distinct world and hands its outcome to every state that finds it.

    Optional attribute: ``inject_faults`` (default true): ``False`` explores crash points
    only, no injected I/O error (for a scenario whose effects another scenario of the same
    machine already proves under a fault at every operation).
    """

    name: str
    machine: str
    recovery_may_fail: bool

    def setup(self, world: SimWorld) -> None: ...

    def run(self, world: SimWorld, *, crash: CrashPlan | None) -> RunResult: ...

    def recover(self, world: SimWorld) -> Any: ...


@attrs.frozen
class CheckContext:
    """Everything a guarantee check may look at.

    Attributes:
        scenario: the scenario (checks read its expectations, e.g. the bytes it meant to write).
        phase: ``"crashed"`` (the world right after the crash) or ``"recovered"`` (after
            :meth:`Scenario.recover`).
        kind: the crash kind (``process_kill``, ``power_loss``, ``node_loss``).
        world: the world to check; checks must only read it.
        before: the world as the scenario's setup left it (the last state known durable).
        acknowledged: the transaction returned successfully before the crash (so its effects
            were promised to the caller).
        recovery: what :meth:`Scenario.recover` returned (``None`` in the crashed phase).
        point: the crash point, described.
        choice: the loss choice (power loss) or the kind's name.
        io_log: the store operations the crashed run performed before the crash (gated ops:
            every one changes bytes or names; reads are not gated).

    A check calls :meth:`exercised` when it actually asserted something in this state (not
    when it returned early because its premise did not hold), so the explorer can report how
    often each guarantee was judged substantively; raising a violation counts as exercised.
    """

    scenario: Any
    phase: str
    kind: str
    world: SimWorld
    before: SimWorld
    acknowledged: bool
    recovery: Any = None
    point: str = ""
    choice: str = ""
    io_log: tuple[IoRecord, ...] = ()
    _marks: list[int] = attrs.field(factory=lambda: [0], eq=False, repr=False, alias="marks")
    _memo: dict[str, Any] = attrs.field(factory=dict, eq=False, repr=False, alias="memo")

    def memo(self, key: str, compute: Callable[[], Any]) -> Any:
        """``compute()``, once per context: checks of one state share what they derive from
        it (the worlds are not changed while checks run)."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def exercised(self) -> None:
        """Record that the calling check asserted something substantive in this state."""
        self._marks[0] += 1

    @property
    def exercised_count(self) -> int:
        """How many times checks called :meth:`exercised` on this context."""
        return self._marks[0]
