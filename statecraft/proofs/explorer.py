"""The crash explorer: crash a transaction at every I/O boundary, recover, prove the spec.

For one scenario (DESIGN.md §4, after ALICE):

1. a reference run records ``n`` store operations and ``m`` effects;
2. crash points: before each operation ``i`` (``n`` points; a crash inside an effect), before
   and after each effect, and after the completed run (an acknowledged transaction);
3. injected faults (optional): each operation fails instead (``EIO``; ``ENOSPC`` for writes;
   for bucket requests also "applied but the response was lost"), the run goes on as
   production code would, and the resulting state is treated like a crash point;
4. at every point, every crash kind: process kill (one state), power loss (all unsynced lost,
   all kept, each lost alone, the last write torn as a prefix or zeros, plus ``extra_subsets``
   random subsets), node loss (one state);
5. for each crash state: check the guarantees that hold in the ``crashed`` phase, run the
   scenario's recovery, check the ``recovered`` guarantees. A recovery that raises is itself a
   violation (guarantee id ``RECOVERY``) unless the scenario allows it.

Any violation comes with a reproducer: the reference trace, the crash point, the crash kind
and the loss choice.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
import traceback
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import attrs

from statecraft.engine.crash import CrashPlan, FaultKind, IoGate, IoRecord, SimulatedCrash
from statecraft.engine.spec import Guarantee, Spec
from statecraft.engine.trace import TraceEvent
from statecraft.proofs.crash_states import loss_choices, state_key, world_key
from statecraft.proofs.explore_report import ScenarioReport, Violation
from statecraft.proofs.scenario import CheckContext, GuaranteeViolation, Scenario
from statecraft.storage.sim import CrashKind, SimWorld
from statecraft.storage.simfs import LossChoice

__all__ = [
    "CrashPoint",
    "ExploreOptions",
    "ScenarioReport",
    "Violation",
    "check_crash_state",
    "crash_points",
    "explore",
    "explore_all",
    "reference_run",
    "run_to_crash",
]


@attrs.frozen
class CrashPoint:
    """Where a run is interrupted: a crash plan, an injected fault, or after completion."""

    label: str
    plan: CrashPlan | None = None
    fault: tuple[int, FaultKind] | None = None


@attrs.frozen
class ExploreOptions:
    """How much to explore.

    Attributes:
        kinds: crash kinds to apply at every point.
        faults: also inject an I/O error at every operation.
        extra_subsets: random subsets of the unsynced operations to try at each power-loss
            point, beyond the systematic choices.
        seed: seed for those subsets (reports are reproducible).
        max_violations: keep at most this many violations per guarantee (the first found is
            the one at the earliest crash point).
        exhaustive: at every power-loss point try every subset of the unsynced operations
            (:func:`~statecraft.proofs.crash_states.loss_choices`) instead of ``extra_subsets``
            random ones.
        dedup: check each distinct crash state once (:func:`~statecraft.proofs.crash_states.
            state_key`); a repeat gets the first one's verdict, relabelled.
    """

    kinds: tuple[CrashKind, ...] = tuple(CrashKind)
    faults: bool = True
    extra_subsets: int = 2
    seed: int = 0
    max_violations: int = 3
    exhaustive: bool = False
    dedup: bool = True


@attrs.frozen
class _Reference:
    base: SimWorld
    io_log: tuple[IoRecord, ...]
    trace: tuple[TraceEvent, ...]


def reference_run(scenario: Scenario) -> _Reference:
    """Set the scenario up, make that state durable, and run the transaction once uncrashed."""
    base = SimWorld()
    scenario.setup(base)
    base.settle()
    world = base.copy()
    result = scenario.run(world, crash=None)
    return _Reference(base=base, io_log=tuple(world.gate.log), trace=result.trace)


def crash_points(reference: _Reference, *, faults: bool) -> list[CrashPoint]:
    """Every point the explorer interrupts the run at (see the module doc)."""
    points = [
        CrashPoint(f"io#{r.index} before {r.op} {r.target}", CrashPlan(at_io=r.index))
        for r in reference.io_log
    ]
    for k, event in enumerate(reference.trace):
        points.append(CrashPoint(f"before effect #{k} {event.effect}", CrashPlan(before_effect=k)))
        points.append(CrashPoint(f"after effect #{k} {event.effect}", CrashPlan(after_effect=k)))
    points.append(CrashPoint("after the completed run"))
    if faults:
        for r in reference.io_log:
            kinds = [FaultKind.IO_ERROR]
            if r.op == "write":
                kinds.append(FaultKind.NO_SPACE)
            if r.op in ("put", "delete"):
                kinds.append(FaultKind.LOST_RESPONSE)
            points.extend(
                CrashPoint(
                    f"fault {kind.value} at io#{r.index} {r.op} {r.target}", None, (r.index, kind)
                )
                for kind in kinds
            )
    return points


@attrs.frozen
class _Crashed:
    world: SimWorld
    acknowledged: bool
    trace: tuple[TraceEvent, ...]
    io_log: tuple[IoRecord, ...]


def run_to_crash(scenario: Scenario, base: SimWorld, point: CrashPoint) -> _Crashed:
    """Run the transaction on a copy of ``base`` until ``point``; return the live world."""
    world = base.copy()
    gate = IoGate(faults=dict([point.fault]) if point.fault else None)
    world.rearm(gate)
    acknowledged = False
    trace: tuple[TraceEvent, ...] = ()
    try:
        result = scenario.run(world, crash=point.plan)
        acknowledged = not result.failed
        trace = result.trace
    except SimulatedCrash as exc:
        trace = getattr(exc, "trace", ())
    except Exception as exc:  # an injected fault surfaced as an error: the process lives on
        acknowledged = False
        trace = getattr(exc, "trace", ())
    return _Crashed(world, acknowledged, trace, tuple(gate.log))


_ALL_LOST = LossChoice("all_lost", frozenset())


def check_crash_state(
    scenario: Scenario,
    guarantees: Sequence[Guarantee],
    base: SimWorld,
    crashed: _Crashed,
    kind: CrashKind,
    choice: LossChoice | None,
    point_label: str,
    state: SimWorld | None = None,
    recoveries: dict[bytes, tuple[SimWorld, Any, bool]] | None = None,
) -> tuple[list[Violation], dict[str, int], dict[str, int]]:
    """Apply one crash to the crashed run, check, recover, check. Returns the violations, the
    number of checks run per guarantee and the number of those that were substantive.
    ``state``: the world after the crash when the caller already built it. ``recoveries``:
    recovered worlds and outcomes by :func:`~statecraft.proofs.crash_states.world_key` of the
    crashed world (a recovery reads nothing else), shared by the states of one scenario."""
    if state is None:
        state = crashed.world.after_crash(kind, choice)
    violations: list[Violation] = []
    checks: dict[str, int] = {}
    substantive: dict[str, int] = {}

    def violation(g_id: str, statement: str, message: str, phase: str, label: str) -> Violation:
        return Violation(
            g_id, statement, message, scenario.name, point_label, kind.value, label, phase,
            crashed.trace, crashed.io_log,
        )  # fmt: skip

    def run_checks(phase: str, world: SimWorld, recovery: Any, label: str) -> None:
        ctx = CheckContext(
            scenario, phase, kind.value, world, base, crashed.acknowledged, recovery,
            point_label, label, crashed.io_log,
        )  # fmt: skip
        for g in guarantees:
            if phase not in g.at or kind.value not in g.kinds:
                continue
            checks[g.id] = checks.get(g.id, 0) + 1
            marks = ctx.exercised_count
            try:
                g.resolve()(ctx)
            except GuaranteeViolation as exc:
                ctx.exercised()
                violations.append(violation(g.id, g.statement, str(exc), phase, label))
            except Exception as exc:  # a check that crashes is a finding, not a pass
                message = f"check raised {exc!r}\n{traceback.format_exc(limit=4)}"
                violations.append(violation(g.id, g.statement, message, phase, label))
            if ctx.exercised_count > marks:
                substantive[g.id] = substantive.get(g.id, 0) + 1

    label = choice.name if choice is not None else kind.value
    run_checks("crashed", state, None, label)
    key = world_key(state) if recoveries is not None else b""
    if recoveries is not None and key in recoveries:
        recovered, recovery, raised = recoveries[key]
    else:
        recovered = state.copy()
        raised = False
        try:
            recovery = scenario.recover(recovered)
        except Exception as exc:
            recovery, raised = exc, True
        if recoveries is not None:
            recoveries[key] = (recovered, recovery, raised)
    if raised and not scenario.recovery_may_fail:
        violations.append(violation(
            "RECOVERY", "recovery after any crash completes without error",
            f"recovery raised {recovery!r}", "recovered", label,
        ))  # fmt: skip
        return violations, checks, substantive
    run_checks("recovered", recovered, recovery, label)
    if kind is CrashKind.PROCESS_KILL:
        # What recovery adopted must itself be durable: a power loss right after recovery
        # (while the killed run's unsynced writes may still be in the page cache) must leave
        # the recovered guarantees intact.
        after = recovered.after_crash(CrashKind.POWER_LOSS, _ALL_LOST)
        run_checks("recovered", after, recovery, f"{label}, recovery, then power_loss(all_lost)")
    return violations, checks, substantive


@contextlib.contextmanager
def _quiet_logs() -> Iterator[None]:
    """Thousands of recoveries would log thousands of expected warnings; keep errors only."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(previous)


def explore(
    scenario: Scenario, spec: Spec, options: ExploreOptions | None = None
) -> ScenarioReport:
    """Explore every crash state of ``scenario`` and check ``spec``'s guarantees in each."""
    options = options or ExploreOptions()
    with _quiet_logs():
        return _explore(scenario, spec, options)


def _explore(scenario: Scenario, spec: Spec, options: ExploreOptions) -> ScenarioReport:
    started = time.perf_counter()
    rng = random.Random(options.seed)
    reference = reference_run(scenario)
    # A scenario may opt out of fault injection (``inject_faults = False``) when another
    # scenario of its machine already injects a fault at every operation of the same effects.
    points = crash_points(
        reference, faults=options.faults and getattr(scenario, "inject_faults", True)
    )
    report = ScenarioReport(
        scenario=scenario.name,
        machine=scenario.machine,
        io_operations=len(reference.io_log),
        effects=len(reference.trace),
        crash_points=len(points),
        guarantees=tuple(g.id for g in spec.guarantees),
        substantive_by_guarantee={g.id: 0 for g in spec.guarantees},
    )
    counts: dict[str, int] = {}
    recoveries: dict[bytes, tuple[SimWorld, Any, bool]] = {}
    for point in points:
        crashed = run_to_crash(scenario, reference.base, point)
        # Checks may read what the crashed run left in the scenario (``last_run``): a verdict
        # is reused only within one crash point's run; a recovery (which reads only the
        # world) across the whole scenario.
        seen: dict[bytes, tuple[str, list[Violation], dict[str, int], dict[str, int]]] = {}
        for kind in options.kinds:
            choices = loss_choices(
                crashed.world, kind, options.extra_subsets, rng, exhaustive=options.exhaustive
            )
            for choice in choices:
                report.crash_states += 1
                label = choice.name if choice is not None else kind.value
                state = crashed.world.after_crash(kind, choice)
                key = b""
                if options.dedup:
                    key = state_key(
                        kind, world_key(state), acknowledged=crashed.acknowledged,
                        io_log=crashed.io_log, fault=point.fault is not None,
                    )  # fmt: skip
                if key in seen:
                    first, first_found, checks, substantive = seen[key]
                    found = [_relabel(v, first, label, point.label, crashed) for v in first_found]
                else:
                    report.distinct_crash_states += 1
                    found, checks, substantive = check_crash_state(
                        scenario, spec.guarantees, reference.base, crashed, kind, choice,
                        point.label, state, recoveries if options.dedup else None,
                    )  # fmt: skip
                    if options.dedup:
                        seen[key] = (label, found, checks, substantive)
                report.checks_run += sum(checks.values())
                for g_id, n in checks.items():
                    report.checks_by_guarantee[g_id] = report.checks_by_guarantee.get(g_id, 0) + n
                for g_id, n in substantive.items():
                    by = report.substantive_by_guarantee
                    by[g_id] = by.get(g_id, 0) + n
                for v in found:
                    if counts.get(v.guarantee, 0) < options.max_violations:
                        counts[v.guarantee] = counts.get(v.guarantee, 0) + 1
                        report.violations.append(v)
    report.seconds = time.perf_counter() - started
    return report


def _relabel(
    v: Violation, first_label: str, label: str, point: str, crashed: _Crashed
) -> Violation:
    """A repeat state's violation: the first one's verdict, named by this point and choice."""
    choice = label + v.choice[len(first_label) :] if v.choice.startswith(first_label) else label
    return attrs.evolve(
        v, point=point, choice=choice, kind=v.kind, trace=crashed.trace, io_log=crashed.io_log
    )


def explore_all(
    scenarios: Iterable[Scenario], spec: Spec, options: ExploreOptions | None = None
) -> list[ScenarioReport]:
    """:func:`explore` each scenario."""
    return [explore(s, spec, options) for s in scenarios]
