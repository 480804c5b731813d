"""The crash harness proves specs/validation.toml on the shipped validation machine, and
catches every deliberately broken variant (statecraft/proofs/validation/broken.py, declared
by the spec; a harness that cannot fail would prove nothing)."""

from __future__ import annotations

import pytest

from statecraft.cli.crashcheck import crashcheck
from statecraft.engine import load_spec
from statecraft.proofs import ExploreOptions, explore
from statecraft.proofs.oracle import DiskView
from statecraft.proofs.validation import broken
from statecraft.proofs.validation.checks import oracle_stage
from statecraft.proofs.validation.scenarios import ValidationScenario, validation_scenarios
from statecraft.resources import spec_path
from statecraft.storage import CrashKind, SimWorld

SPEC = load_spec(spec_path("validation"))
FAST = ExploreOptions(extra_subsets=0, faults=False)
KILL = ExploreOptions(kinds=(CrashKind.PROCESS_KILL,), extra_subsets=0, faults=False)


def only(variants: list[ValidationScenario]) -> ValidationScenario:
    (s,) = variants
    return s


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
        report = explore(only(broken.publish_before_the_evaluation_is_recorded()), SPEC, KILL)
        assert "VALIDATION-NOT-EARLY" in report.violated_guarantees()

    def test_publish_before_evaluate(self) -> None:
        """A table that publishes before it evaluates never validates correctly: caught."""
        report = explore(only(broken.publish_before_evaluate()), SPEC, KILL)
        assert report.violated_guarantees() & {"VALIDATION-NOT-EARLY", "VALIDATION-FINISHES"}

    def test_failed_evaluation_published_anyway(self) -> None:
        """An evaluate that swallows the evaluation's failure records and publishes a result
        no evaluation returned: caught by the evaluation-fails scenario."""
        report = explore(only(broken.failed_evaluation_published_anyway()), SPEC, KILL)
        assert "VALIDATION-NOT-EARLY" in report.violated_guarantees()

    def test_record_written_by_replace(self) -> None:
        """A published record written by rename instead of exclusive link is caught."""
        report = explore(only(broken.record_written_by_replace()), SPEC, FAST)
        assert "VALIDATION-APPEND-ONLY" in report.violated_guarantees()

    def test_recovery_reevaluating_a_recorded_evaluation(self) -> None:
        """A recovery that does not see the durable evaluated record evaluates again: caught."""
        report = explore(only(broken.recovery_reevaluating_a_recorded_evaluation()), SPEC, FAST)
        assert "VALIDATION-RETRY-STAGE" in report.violated_guarantees()

    def test_published_not_made_durable_by_recovery(self) -> None:
        """A recovery that reports a published checkpoint it found in the page cache without
        making it durable loses it to the next power loss: caught."""
        report = explore(only(broken.published_not_made_durable_by_recovery()), SPEC, KILL)
        assert "VALIDATION-FINISHES" in report.violated_guarantees()

    def test_published_record_without_directory_fsync(self) -> None:
        """A publish that links its record without the directory fsync returns before the
        publication is durable: a power loss after it returned reads publication-pending."""
        report = explore(only(broken.published_record_without_directory_fsync()), SPEC, FAST)
        assert "VALIDATION-DURABLE" in report.violated_guarantees()
        messages = [x.message for x in report.violations if x.guarantee == "VALIDATION-DURABLE"]
        assert any("returned, yet after the crash it reads" in m for m in messages), messages

    def test_pending_checkpoint_saved_without_its_stage(self) -> None:
        """A validation whose checkpoint is committed without its evaluation-pending stage is
        adopted by resume as if validated: caught (VALIDATION-RESUME), because the restarted
        process finds the adopted step committed without its stage and cannot validate it."""
        report = explore(only(broken.pending_checkpoint_saved_without_its_stage()), SPEC, KILL)
        messages = [x.message for x in report.violations if x.guarantee == "VALIDATION-RESUME"]
        assert any(
            "which read none" in m or "cannot become a validation checkpoint" in m for m in messages
        ), messages

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
