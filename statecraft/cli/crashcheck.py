"""``statecraft crashcheck``: crash every transaction at every I/O boundary and prove its spec.

The transactions are the tables of a machines directory (``--machines-dir``, default: the
shipped ``machines/``); each one's scenarios come from the factory its spec names
(``scenarios = "module:callable"`` in ``<specs-dir>/<name>.toml``). Machines whose specs name
the same factory (the restarted process of a crashed save runs ``resume``) are explored once
with the union of their guarantees; the report is per machine: crash points, crash states
explored, guarantee checks run (in total and per guarantee), violations (each with a minimal
reproducer). A guarantee that ran zero checks over all its scenarios is vacuous and fails the
command like a violation.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from statecraft.engine import Spec, load_spec
from statecraft.engine.registry import scenarios_factory
from statecraft.proofs import ExploreOptions, Scenario, ScenarioReport, explore

__all__ = ["MachineReport", "crashcheck", "run_crashcheck", "vacuous_errors"]


@attrs.frozen
class MachineReport:
    """What crashcheck found for one machine.

    ``vacuous`` names the guarantees that ran zero checks over every scenario: such a
    guarantee proves nothing (its ``at``/``kinds`` never meet a crash state, or its scenarios
    never reach it).
    """

    machine: str
    scenarios: tuple[str, ...]
    crash_points: int
    crash_states: int
    checks_run: int
    guarantees: tuple[str, ...]
    violations: tuple[Any, ...]
    checks_by_guarantee: dict[str, int] = attrs.field(factory=dict)
    spec: str = ""

    @property
    def vacuous(self) -> tuple[str, ...]:
        return tuple(g for g in self.guarantees if self.checks_by_guarantee.get(g, 0) == 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "machine": self.machine,
            "spec": self.spec,
            "scenarios": list(self.scenarios),
            "crash_points": self.crash_points,
            "crash_states": self.crash_states,
            "checks_run": self.checks_run,
            "checks_by_guarantee": dict(self.checks_by_guarantee),
            "guarantees": list(self.guarantees),
            "vacuous": list(self.vacuous),
            "violations": [v.to_json() for v in self.violations],
        }


def crashcheck(
    machines: Sequence[str],
    options: ExploreOptions,
    *,
    specs_dir: str | Path | None = None,
) -> tuple[list[MachineReport], list[ScenarioReport]]:
    """Explore the scenarios of ``machines`` once each, checking every selected spec.

    Args:
        machines: machine names; each needs ``<specs_dir>/<name>.toml`` with a ``scenarios``
            key.
        options: how much to explore.
        specs_dir: where the specs are (default: the shipped ``specs/``).

    Raises:
        SpecError: a spec is missing, malformed, or its scenarios factory does not import.
    """
    from statecraft import resources

    root = Path(specs_dir) if specs_dir is not None else resources.specs_dir()
    specs: dict[str, Spec] = {m: load_spec(root / f"{m}.toml") for m in machines}
    owner = {g.id: m for m, spec in specs.items() for g in spec.guarantees}
    groups: dict[Callable[[], Sequence[Scenario]], list[str]] = {}
    for machine in machines:
        groups.setdefault(scenarios_factory(specs[machine]), []).append(machine)
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
        mine = [g.id for g in specs[machine].guarantees]
        # RECOVERY (recovery itself failed) belongs to no spec: every machine of the group owns it.
        violations = [
            v
            for r in reports
            for v in r.violations
            if v.guarantee in mine or v.guarantee not in owner
        ]
        by_guarantee = {g: sum(r.checks_by_guarantee.get(g, 0) for r in reports) for g in mine}
        out.append(
            MachineReport(
                machine=machine,
                scenarios=tuple(r.scenario for r in reports),
                crash_points=sum(r.crash_points for r in reports),
                crash_states=sum(r.crash_states for r in reports),
                checks_run=sum(by_guarantee.values()),
                guarantees=tuple(mine),
                violations=tuple(violations),
                checks_by_guarantee=by_guarantee,
                spec=specs[machine].source,
            )
        )
    return out, scenario_reports


def vacuous_errors(reports: Sequence[MachineReport]) -> list[tuple[str, str]]:
    """One ``("vacuous_guarantee", message)`` per guarantee that ran zero checks."""
    return [
        (
            "vacuous_guarantee",
            f"{r.spec}: guarantee {g} ran 0 checks over {len(r.scenarios)} scenario(s) of "
            f"machine {r.machine}, so it proves nothing; widen its at/kinds or add a scenario "
            "that reaches it",
        )
        for r in reports
        for g in r.vacuous
    ]


def run_crashcheck(args: argparse.Namespace) -> int:
    from statecraft.cli.envelope import emit
    from statecraft.cli.machines import resolve_dirs
    from statecraft.engine import transaction_names

    machines_dir, specs_dir = resolve_dirs(args)
    known = transaction_names(machines_dir)
    if args.machine and args.machine not in known:
        return emit(
            "crashcheck",
            as_json=args.json,
            exit_code=2,
            errors=[
                (
                    "unknown_machine",
                    f"no machine {args.machine!r} in {machines_dir}; known: "
                    f"{', '.join(known) or 'none'}",
                )
            ],
        )
    machines = [args.machine] if args.machine else known
    options = ExploreOptions(extra_subsets=args.extra_subsets, seed=args.seed)
    reports, scenario_reports = crashcheck(machines, options, specs_dir=specs_dir)
    lines = []
    for r in reports:
        status = "ok" if not r.violations else f"{len(r.violations)} VIOLATION(S)"
        if r.vacuous:
            status += f", VACUOUS: {', '.join(r.vacuous)}"
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
    errors.extend(vacuous_errors(reports))
    return emit(
        "crashcheck",
        as_json=args.json,
        exit_code=1 if errors else 0,
        data={
            "machines": [r.to_json() for r in reports],
            "scenarios": [s.to_json() for s in scenario_reports],
        },
        errors=errors,
        text="\n".join(lines),
    )
