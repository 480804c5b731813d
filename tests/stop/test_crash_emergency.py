"""The crash harness proves specs/emergency.toml on the shipped emergency machine (the save at a
stop, then DONE.json) and catches the deliberately wrong variants: DONE written before the save
is durable, coverage by step number only, a second signal restarting the save, and DONE written
when the save failed."""

from __future__ import annotations

import json

import attrs
import pytest

from statecraft.cli import main
from statecraft.cli.crashcheck import crashcheck
from statecraft.engine import load_spec
from statecraft.proofs import ExploreOptions, explore
from statecraft.proofs.stop import broken
from statecraft.proofs.stop.broken import scenario
from statecraft.proofs.stop.scenarios import (
    DONE_PATH,
    emergency_scenarios,
    lacks_a_component,
)
from statecraft.resources import spec_path
from statecraft.storage import CrashKind, SimWorld

SPEC = load_spec(spec_path("emergency"))
FAST = ExploreOptions(extra_subsets=0, faults=False)
KILL_AND_POWER = attrs.evolve(FAST, kinds=(CrashKind.PROCESS_KILL, CrashKind.POWER_LOSS))
KILL = attrs.evolve(FAST, kinds=(CrashKind.PROCESS_KILL,))
KILL_WITH_FAULTS = attrs.evolve(KILL, faults=True)


class TestShippedEmergency:
    @pytest.mark.slow
    def test_crashcheck_proves_every_guarantee_substantively(self) -> None:
        """Every guarantee of the emergency machine holds at every crash point of every
        scenario under process kill and power loss, each judged substantively."""
        reports, scenario_reports = crashcheck(["emergency"], KILL_AND_POWER)
        (report,) = reports
        assert not report.violations, report.violations[0].reproducer()
        assert report.vacuous == ()
        assert {s.scenario for s in scenario_reports} == {s.name for s in emergency_scenarios()}
        substantive = {g.id: 0 for g in SPEC.guarantees}
        for s in scenario_reports:
            for g_id, n in s.substantive_by_guarantee.items():
                substantive[g_id] += n
        assert all(n > 0 for n in substantive.values()), substantive

    def test_machines_check_lists_emergency(self, capsys) -> None:
        """``statecraft machines check`` lists the emergency table with its contract clean."""
        assert main(["machines", "check"]) == 0
        assert "ok   emergency:" in capsys.readouterr().out

    def test_full_plan_past_a_validation_artifact_lacking_a_component(self) -> None:
        """The ``full`` plan at a step whose validation artifact holds only the model is
        saved in full, every guarantee holding at every crash point."""
        report = explore(lacks_a_component(), SPEC, KILL)
        assert not report.violations, report.violations[0].reproducer()

    def test_second_signal_reaches_the_latch_and_changes_nothing(self) -> None:
        """The second-signal scenario really delivers signals during the save, and the
        uncrashed run still saves once and records the first reason."""
        s = scenario("second-signal-during-save")
        world = SimWorld()
        s.setup(world)
        world.settle()
        result = s.run(world, crash=None)
        assert result.final_state == "done"
        run = s.last_run
        assert run is not None
        assert run.delivered > 10
        assert run.writes == ["checkpoint"]
        assert run.latch.received[:2] == ["SIGUSR1", "SIGTERM"]
        done = json.loads(world.fs.read(DONE_PATH))
        assert done["preempted"] == "signal SIGUSR1"
        assert done["checkpoint"] == "checkpoints/iter_000000004"


class TestBrokenVariantsAreCaught:
    def test_done_before_the_save_is_durable(self) -> None:
        """DONE.json written before the save is caught: a crash then leaves a record naming
        a checkpoint that is not there."""
        (broken_run,) = broken.done_before_durable()
        report = explore(broken_run, SPEC, KILL)
        assert "EMERGENCY-DONE-DURABLE" in report.violated_guarantees()
        first = next(v for v in report.violations if v.guarantee == "EMERGENCY-DONE-DURABLE")
        assert "which is not a durable commit" in first.message

    def test_coverage_by_step_number_only(self) -> None:
        """A step whose validation artifact lacks the optimizer, taken as covered because the
        step has a directory, is caught: DONE names a directory without the whole plan."""
        (broken_run,) = broken.coverage_by_step_number()
        report = explore(broken_run, SPEC, KILL)
        assert "EMERGENCY-COVERAGE" in report.violated_guarantees()
        first = next(v for v in report.violations if v.guarantee == "EMERGENCY-COVERAGE")
        assert "saved=False for a step that was not covered" in first.message

    def test_second_signal_restarting_the_save(self) -> None:
        """A save restarted by the second signal is caught: two saves, and DONE records the
        second reason."""
        (broken_run,) = broken.restarting_on_second_signal()
        report = explore(broken_run, SPEC, KILL)
        assert "EMERGENCY-ONE-SAVE" in report.violated_guarantees()
        first = next(v for v in report.violations if v.guarantee == "EMERGENCY-ONE-SAVE")
        assert "one stop started 2 saves" in first.message

    @pytest.mark.slow
    def test_done_when_the_save_failed(self) -> None:
        """A failed save that still writes DONE.json is caught under an injected I/O error:
        the record names a checkpoint that was never committed."""
        (broken_run,) = broken.done_after_failed_save()
        report = explore(broken_run, SPEC, KILL_WITH_FAULTS)
        assert "EMERGENCY-DONE-DURABLE" in report.violated_guarantees()
        failed = [
            v
            for v in report.violations
            if v.guarantee == "EMERGENCY-DONE-DURABLE" and "fault" in v.point
        ]
        assert failed, [v.point for v in report.violations]
