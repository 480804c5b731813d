"""``statecraft crashcheck``: crash every shipped transaction at every I/O boundary and prove
its spec.

Each machine's scenarios come from :data:`CRASHCHECK_SCENARIOS`. Machines that share
scenarios (the restarted process of a crashed save runs ``resume``) are explored once with
the union of their guarantees; the report is per machine: crash points, crash states
explored, guarantee checks run, violations (each with a minimal reproducer).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from statecraft.engine import Spec, load_spec
from statecraft.proofs import ExploreOptions, Scenario, ScenarioReport, explore
from statecraft.proofs.save_scenarios import save_scenarios
from statecraft.resources import spec_path

__all__ = ["CRASHCHECK_SCENARIOS", "crashcheck", "run_crashcheck"]

#: machine -> factory of the scenarios that exercise it (read-only).
CRASHCHECK_SCENARIOS: dict[str, Callable[[], Sequence[Scenario]]] = {
    "resume": save_scenarios,
    "save": save_scenarios,
}


@attrs.frozen
class MachineReport:
    machine: str
    scenarios: tuple[str, ...]
    crash_points: int
    crash_states: int
    checks_run: int
    guarantees: tuple[str, ...]
    violations: tuple[Any, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "machine": self.machine,
            "scenarios": list(self.scenarios),
            "crash_points": self.crash_points,
            "crash_states": self.crash_states,
            "checks_run": self.checks_run,
            "guarantees": list(self.guarantees),
            "violations": [v.to_json() for v in self.violations],
        }


def crashcheck(
    machines: Sequence[str], options: ExploreOptions
) -> tuple[list[MachineReport], list[ScenarioReport]]:
    """Explore the scenarios of ``machines`` once each, checking every selected spec."""
    specs: dict[str, Spec] = {m: load_spec(spec_path(m)) for m in machines}
    owner = {g.id: m for m, spec in specs.items() for g in spec.guarantees}
    groups: dict[Callable[[], Sequence[Scenario]], list[str]] = {}
    for machine in machines:
        groups.setdefault(CRASHCHECK_SCENARIOS[machine], []).append(machine)
    scenario_reports: list[ScenarioReport] = []
    per_machine: dict[str, list[ScenarioReport]] = {m: [] for m in machines}
    for factory, members in groups.items():
        merged = attrs.evolve(
            specs[members[0]],
            guarantees=tuple(g for m in members for g in specs[m].guarantees),
        )
        for scenario in factory():
            report = explore(scenario, merged, options)
            scenario_reports.append(report)
            for machine in members:
                per_machine[machine].append(report)
    out = []
    for machine in machines:
        reports = per_machine[machine]
        mine = {g.id for g in specs[machine].guarantees}
        # RECOVERY (recovery itself failed) belongs to no spec: every machine of the group owns it.
        violations = [
            v
            for r in reports
            for v in r.violations
            if v.guarantee in mine or v.guarantee not in owner
        ]
        checks = sum(n for r in reports for g, n in r.checks_by_guarantee.items() if g in mine)
        out.append(
            MachineReport(
                machine=machine,
                scenarios=tuple(r.scenario for r in reports),
                crash_points=sum(r.crash_points for r in reports),
                crash_states=sum(r.crash_states for r in reports),
                checks_run=checks,
                guarantees=tuple(g.id for g in specs[machine].guarantees),
                violations=tuple(violations),
            )
        )
    return out, scenario_reports


def run_crashcheck(args: argparse.Namespace) -> int:
    from statecraft.cli.envelope import emit

    if args.machine and args.machine not in CRASHCHECK_SCENARIOS:
        return emit(
            "crashcheck",
            as_json=args.json,
            exit_code=2,
            errors=[
                (
                    "unknown_machine",
                    f"no crash scenarios for machine {args.machine!r}; known: "
                    f"{', '.join(sorted(CRASHCHECK_SCENARIOS))}",
                )
            ],
        )
    machines = [args.machine] if args.machine else sorted(CRASHCHECK_SCENARIOS)
    options = ExploreOptions(extra_subsets=args.extra_subsets, seed=args.seed)
    reports, scenario_reports = crashcheck(machines, options)
    lines = []
    for r in reports:
        status = "ok" if not r.violations else f"{len(r.violations)} VIOLATION(S)"
        lines.append(
            f"{r.machine}: {status} — {len(r.scenarios)} scenarios, {r.crash_points} crash points, "
            f"{r.crash_states} crash states explored, {r.checks_run} guarantee checks "
            f"({', '.join(r.guarantees)})"
        )
    for s in scenario_reports:
        lines.append(
            f"  scenario {s.scenario}: {s.io_operations} I/O ops, {s.effects} effects, "
            f"{s.crash_points} points, {s.crash_states} states, {s.seconds:.1f}s"
        )
    violations = [v for r in reports for v in r.violations]
    if violations:
        lines.append("\nminimal reproducer (earliest crash point):\n" + violations[0].reproducer())
    errors = [
        (
            "guarantee_violation",
            f"{v.guarantee} ({v.scenario}, {v.point}, {v.kind}/{v.choice}): {v.message}",
        )
        for v in violations
    ]
    return emit(
        "crashcheck",
        as_json=args.json,
        exit_code=1 if violations else 0,
        data={
            "machines": [r.to_json() for r in reports],
            "scenarios": [s.to_json() for s in scenario_reports],
        },
        errors=errors,
        text="\n".join(lines),
    )
