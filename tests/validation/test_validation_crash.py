"""The crash harness proves specs/validation.toml on the shipped validation machine, and
catches every deliberately broken variant (a harness that cannot fail would prove nothing)."""

from __future__ import annotations

import tomllib
from collections.abc import Callable

import pytest

from statecraft.checkpoint.kernel.machines import load_machine, machine_bindings
from statecraft.checkpoint.validation import bindings as v
from statecraft.cli.crashcheck import crashcheck
from statecraft.engine import Bindings, Machine, load_spec, parse_table
from statecraft.proofs import ExploreOptions, explore
from statecraft.proofs.oracle import DiskView
from statecraft.proofs.validation.checks import oracle_stage
from statecraft.proofs.validation.scenarios import ValidationScenario, validation_scenarios
from statecraft.resources import machine_path, spec_path
from statecraft.storage import CrashKind, SimWorld

SPEC = load_spec(spec_path("validation"))
FAST = ExploreOptions(extra_subsets=0, faults=False)
KILL = ExploreOptions(kinds=(CrashKind.PROCESS_KILL,), extra_subsets=0, faults=False)


def _table_with_swapped_effects(a: str, b: str) -> Callable[[], Machine]:
    def build() -> Machine:
        data = tomllib.loads(machine_path("validation").read_text())
        for t in data["transitions"]:
            if t["do"] == a:
                t["do"] = b
            elif t["do"] == b:
                t["do"] = a
        table = parse_table(data, source=f"broken validation table ({a} <-> {b})")
        return Machine(table, machine_bindings("validation"))

    return build


def _with_effects(**effects: Callable[[v.ValidationContext], None]) -> Callable[[], Machine]:
    def build() -> Machine:
        bindings = machine_bindings("validation").merged(Bindings(effects=effects))
        return Machine(load_machine("validation").table, bindings)

    return build


def _evaluate_swallowing_failure(ctx: v.ValidationContext) -> None:
    """Broken: a failed evaluation is taken for an empty success (publish what failed)."""
    try:
        v.evaluate(ctx)
    except Exception:
        ctx.metrics, ctx.evaluated = {}, True


def _publish_by_replace(ctx: v.ValidationContext) -> None:
    """Broken: the published record replaces whatever is under the name (rename)."""
    ctx.fenced.write_atomic(ctx.path(v.PUBLISHED_RECORD), b"{}")
    v.publish(ctx)


def _settle_without_fsync(ctx: v.ValidationContext) -> None:
    """Broken: a checkpoint found published is reported without being made durable."""


def _observe_ignoring_records(ctx: v.ValidationContext) -> str:
    """Broken: a committed pending checkpoint always reads evaluation-pending."""
    label = v.observe_validation(ctx)
    return "evaluation_pending" if label in ("publication_pending", "published") else label


def _observer_broken() -> Machine:
    bindings = machine_bindings("validation").merged(
        Bindings(observers={"observe_validation": _observe_ignoring_records})
    )
    return Machine(load_machine("validation").table, bindings)


class TestShippedMachine:
    def test_crashcheck_proves_validation_under_all_crash_kinds(self) -> None:
        """Every guarantee holds at every crash point of every scenario under process kill,
        power loss and node loss, with injected I/O faults, and each is judged substantively
        somewhere."""
        (report,), scenario_reports = crashcheck(["validation"], ExploreOptions())
        assert report.violations == (), report.violations[0].reproducer()
        assert report.vacuous == ()
        assert report.crash_states > 800
        substantive = {g.id: 0 for g in SPEC.guarantees}
        for s in scenario_reports:
            assert s.crash_points > 0
            for g_id, n in s.substantive_by_guarantee.items():
                substantive[g_id] += n
        assert all(n > 0 for n in substantive.values()), substantive

    def test_every_reference_run_and_recovery_publishes(self) -> None:
        """Each scenario's uncrashed run ends as intended (published, or evaluation_failed
        for the failing variant) and its recovery publishes, evaluating only when needed."""
        for scenario in validation_scenarios():
            world = SimWorld()
            scenario.setup(world)
            world.settle()
            result = scenario.run(world, crash=None)
            expected = "evaluation_failed" if scenario.run_fails else "published"
            assert result.final_state == expected, scenario.name
            recovery = scenario.recover(world)
            assert recovery.result.final_state == "published", scenario.name
            assert recovery.evaluator.calls == ([4] if scenario.run_fails else []), scenario.name
            view = DiskView.of(world)
            assert oracle_stage(view, 4, scenario.plan_files).stage == "published"


class TestBrokenVariantsAreCaught:
    def test_publish_before_the_evaluation_is_recorded(self) -> None:
        """A table that publishes (and announces) before the evaluated record is durable is
        caught: a published record appears while no evaluated record exists."""
        scenario = ValidationScenario(
            "publish-before-record",
            target=4,
            machine_factory=_table_with_swapped_effects("record_evaluation", "publish"),
        )
        report = explore(scenario, SPEC, KILL)
        assert "VALIDATION-NOT-EARLY" in report.violated_guarantees()

    def test_publish_before_evaluate(self) -> None:
        """A table that publishes before it evaluates never validates correctly: caught."""
        scenario = ValidationScenario(
            "publish-before-evaluate",
            target=4,
            machine_factory=_table_with_swapped_effects("evaluate", "publish"),
            recovery_may_fail=True,
        )
        report = explore(scenario, SPEC, KILL)
        assert report.violated_guarantees() & {"VALIDATION-NOT-EARLY", "VALIDATION-FINISHES"}

    def test_failed_evaluation_published_anyway(self) -> None:
        """An evaluate that swallows the evaluation's failure records and publishes a result
        no evaluation returned: caught by the evaluation-fails scenario."""
        scenario = ValidationScenario(
            "swallowed-failure",
            target=4,
            run_fails=True,
            machine_factory=_with_effects(evaluate=_evaluate_swallowing_failure),
        )
        report = explore(scenario, SPEC, KILL)
        assert "VALIDATION-NOT-EARLY" in report.violated_guarantees()

    def test_record_written_by_replace(self) -> None:
        """A published record written by rename instead of exclusive link is caught."""
        scenario = ValidationScenario(
            "publish-by-replace",
            target=4,
            resumed_at_evaluated=True,
            machine_factory=_with_effects(publish=_publish_by_replace),
        )
        report = explore(scenario, SPEC, FAST)
        assert "VALIDATION-APPEND-ONLY" in report.violated_guarantees()

    def test_recovery_reevaluating_a_recorded_evaluation(self) -> None:
        """A recovery that does not see the durable evaluated record evaluates again: caught."""
        scenario = ValidationScenario(
            "reevaluates",
            target=4,
            resumed_at_evaluated=True,
            machine_factory=_observer_broken,
            recovery_may_fail=True,
        )
        report = explore(scenario, SPEC, FAST)
        assert "VALIDATION-RETRY-STAGE" in report.violated_guarantees()

    def test_published_not_made_durable_by_recovery(self) -> None:
        """A recovery that reports a published checkpoint it found in the page cache without
        making it durable loses it to the next power loss: caught."""
        scenario = ValidationScenario(
            "settle-without-fsync",
            target=4,
            resumed_at_evaluated=True,
            machine_factory=_with_effects(settle=_settle_without_fsync),
        )
        report = explore(scenario, SPEC, KILL)
        assert "VALIDATION-FINISHES" in report.violated_guarantees()

    @pytest.mark.parametrize("scenario", validation_scenarios(), ids=lambda s: s.name)
    def test_each_scenario_is_deterministic(self, scenario: ValidationScenario) -> None:
        """Two reference runs of a scenario perform the same store operations (the explorer's
        crash points are only meaningful if they do)."""
        logs = []
        for _ in range(2):
            world = SimWorld()
            scenario.setup(world)
            world.settle()
            run_world = world.copy()
            scenario.run(run_world, crash=None)
            logs.append([(r.op, r.target) for r in run_world.gate.log])
        assert logs[0] == logs[1]
