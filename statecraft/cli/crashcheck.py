"""``statecraft crashcheck``: crash every transaction at every I/O boundary and prove its spec.

The transactions are the tables of a machines directory (``--machines-dir``, default: the
shipped ``machines/``); each one's scenarios come from the factory its spec names
(``scenarios = "module:callable"`` in ``<specs-dir>/<name>.toml``). A scenario that several
specs' lists hold (the restarted process of a crashed save runs ``resume``, whose list holds
every ``save`` scenario) is explored once with the union of their guarantees; distinct scenarios
are explored side by side in ``--jobs`` forked processes. The report is per machine: crash
points, crash states explored (all, and distinct: a repeat of a state is judged once), seconds,
guarantee checks run (in total and per guarantee), violations (each with a minimal
reproducer). A guarantee that ran zero checks over all its scenarios is vacuous and fails the
command like a violation.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from statecraft.engine import Spec, load_spec
from statecraft.engine.registry import scenarios_factory
from statecraft.errors import SpecError
from statecraft.proofs import ExploreOptions, Scenario, ScenarioReport
from statecraft.proofs.pool import default_jobs, explore_in_parallel

__all__ = [
    "MachineReport",
    "crashcheck",
    "run_crashcheck",
    "vacuous_errors",
]


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
    distinct_crash_states: int = 0
    seconds: float = 0.0

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
            "distinct_crash_states": self.distinct_crash_states,
            "seconds": round(self.seconds, 3),
            "checks_run": self.checks_run,
            "checks_by_guarantee": dict(self.checks_by_guarantee),
            "guarantees": list(self.guarantees),
            "vacuous": list(self.vacuous),
            "violations": [v.to_json() for v in self.violations],
        }


def _distinct_scenarios(
    machines: Sequence[str], specs: dict[str, Spec]
) -> tuple[list[tuple[Scenario, list[str]]], dict[str, list[str]]]:
    """Every distinct scenario of ``machines`` with the machines whose lists hold it, and per
    machine the names of its scenarios. Specs may name different factories that share
    scenarios (``resume`` lists every ``save`` scenario, then its own): a scenario is the same
    one when its name is, and it is explored once for all of them.

    Raises:
        SpecError: two different scenarios share a name.
    """
    by_name: dict[str, tuple[Scenario, list[str]]] = {}
    names: dict[str, list[str]] = {}
    factories: dict[Callable[[], Sequence[Scenario]], list[Scenario]] = {}
    for machine in machines:
        factory = scenarios_factory(specs[machine])
        if factory not in factories:
            factories[factory] = list(factory())
        names[machine] = []
        for scenario in factories[factory]:
            if scenario.name in names[machine]:
                continue
            names[machine].append(scenario.name)
            known = by_name.setdefault(scenario.name, (scenario, []))
            if type(known[0]) is not type(scenario) or known[0].machine != scenario.machine:
                raise SpecError(
                    f"{specs[machine].source}: scenario {scenario.name!r} of {machine} is not "
                    f"the scenario of that name {known[1][0]} explores; rename one of them"
                )
            known[1].append(machine)
    return list(by_name.values()), names


def crashcheck(
    machines: Sequence[str],
    options: ExploreOptions,
    *,
    specs_dir: str | Path | None = None,
    jobs: int = 1,
) -> tuple[list[MachineReport], list[ScenarioReport]]:
    """Explore every distinct scenario of ``machines`` once, checking every selected spec.

    Args:
        machines: machine names; each needs ``<specs_dir>/<name>.toml`` with a ``scenarios``
            key.
        options: how much to explore.
        specs_dir: where the specs are (default: the shipped ``specs/``).
        jobs: worker processes exploring scenarios side by side (1: in this process).

    Raises:
        SpecError: a spec is missing, malformed, or its scenarios factory does not import.
    """
    from statecraft import resources

    root = Path(specs_dir) if specs_dir is not None else resources.specs_dir()
    specs: dict[str, Spec] = {m: load_spec(root / f"{m}.toml") for m in machines}
    owner = {g.id: m for m, spec in specs.items() for g in spec.guarantees}
    distinct, names = _distinct_scenarios(machines, specs)
    work = [
        (
            scenario,
            attrs.evolve(
                specs[members[0]],
                guarantees=tuple(g for m in members for g in specs[m].guarantees),
            ),
            options,
        )
        for scenario, members in distinct
    ]
    scenario_reports = explore_in_parallel(work, jobs)
    by_name = {r.scenario: r for r in scenario_reports}
    out = []
    for machine in machines:
        reports = [by_name[n] for n in names[machine]]
        mine = [g.id for g in specs[machine].guarantees]
        # RECOVERY (recovery itself failed) belongs to no spec: every machine of the scenario
        # owns it.
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
                distinct_crash_states=sum(r.distinct_crash_states for r in reports),
                seconds=sum(r.seconds for r in reports),
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
    if getattr(args, "broken", False):
        from statecraft.cli.crashcheck_broken import run_broken

        return run_broken(args, machines, specs_dir)
    options = ExploreOptions(
        extra_subsets=args.extra_subsets, seed=args.seed, exhaustive=args.exhaustive
    )
    jobs = args.jobs if args.jobs is not None else default_jobs()
    started = time.perf_counter()
    reports, scenario_reports = crashcheck(machines, options, specs_dir=specs_dir, jobs=jobs)
    wall_seconds = time.perf_counter() - started
    lines = []
    for r in reports:
        status = "ok" if not r.violations else f"{len(r.violations)} VIOLATION(S)"
        if r.vacuous:
            status += f", VACUOUS: {', '.join(r.vacuous)}"
        lines.append(
            f"{r.machine}: {status} — {len(r.scenarios)} scenarios, {r.crash_points} crash points, "
            f"{r.crash_states} crash states explored ({r.distinct_crash_states} distinct), "
            f"{r.checks_run} guarantee checks ({', '.join(r.guarantees)}), {r.seconds:.1f}s"
        )
    for s in scenario_reports:
        lines.append(
            f"  scenario {s.scenario}: {s.io_operations} I/O ops, {s.effects} effects, "
            f"{s.crash_points} points, {s.crash_states} states ({s.distinct_crash_states} "
            f"distinct), {s.seconds:.1f}s"
        )
    lines.append(
        f"crashcheck took {wall_seconds:.1f} s wall for {len(reports)} machine(s) "
        f"({jobs} job(s))"
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
            "wall_seconds": round(wall_seconds, 3),
            "jobs": jobs,
        },
        errors=errors,
        text="\n".join(lines),
    )
