"""The crash harness proves specs/emergency.toml on the shipped emergency machine (the save at a
stop, then DONE.json) and catches the deliberately wrong variants: DONE written before the save
is durable, coverage by step number only, a second signal restarting the save, and DONE written
when the save failed."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable

import attrs
import pytest

from statecraft.checkpoint.kernel.components import ComponentPlan
from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.checkpoint.kernel.machines import machine_bindings
from statecraft.checkpoint.stop.bindings import EmergencyContext
from statecraft.checkpoint.stop.emergency_plan import StepCoverage, decide_emergency
from statecraft.checkpoint.stop.records import StopDecision, signal_reason
from statecraft.checkpoint.stop.run_done import done_record, write_done
from statecraft.cli import main
from statecraft.cli.crashcheck import crashcheck
from statecraft.engine import Bindings, Machine, load_spec, parse_table
from statecraft.proofs import ExploreOptions, explore
from statecraft.proofs.stop.scenarios import (
    DONE_PATH,
    EmergencyScenario,
    emergency_scenarios,
    lacks_a_component,
)
from statecraft.resources import machine_path, spec_path
from statecraft.storage import CrashKind, SimWorld

SPEC = load_spec(spec_path("emergency"))
FAST = ExploreOptions(extra_subsets=0, faults=False)
KILL_AND_POWER = attrs.evolve(FAST, kinds=(CrashKind.PROCESS_KILL, CrashKind.POWER_LOSS))
KILL = attrs.evolve(FAST, kinds=(CrashKind.PROCESS_KILL,))
KILL_WITH_FAULTS = attrs.evolve(KILL, faults=True)


def scenario(name: str, **changes) -> EmergencyScenario:
    (found,) = [s for s in emergency_scenarios() if s.name == name]
    return attrs.evolve(found, **changes)


def _table(edit: Callable[[dict], None]) -> dict:
    data = tomllib.loads(machine_path("emergency").read_text())
    edit(data)
    return data


def _machine(data: dict, **effects: Callable[[EmergencyContext], None]) -> Machine:
    bindings = machine_bindings("emergency").merged(Bindings(effects=effects))
    return Machine(parse_table(data, source="broken emergency table"), bindings)


def _trusting_write_done(ctx: EmergencyContext) -> None:
    """Broken: DONE.json names the directory the stop means to write, without asking whether
    a save is durable."""
    path = ctx.path or f"checkpoints/{iter_dirname(ctx.step)}"
    record = done_record(
        step=ctx.step, preempted=ctx.reason, checkpoint=path, saved=True, seconds_to_durable=0.0
    )
    write_done(ctx.attempt, ctx.filesystem, record)


def done_before_durable() -> Machine:
    """The wrong order: write_done before write_emergency (with a write_done that does not
    refuse, as a table-ordering bug does when nothing else guards it)."""

    def swap(data: dict) -> None:
        for t in data["transitions"]:
            if t["do"] == "write_emergency":
                t["do"] = "write_done"
            elif t["do"] == "write_done":
                t["do"] = "write_emergency"

    return _machine(_table(swap), write_done=_trusting_write_done)


def done_after_failed_save() -> Machine:
    """The wrong failure path: a failed save goes on to ``durable`` and DONE.json is written."""

    def on_error_durable(data: dict) -> None:
        for t in data["transitions"]:
            if t["do"] == "write_emergency":
                t["on_error"] = "durable"
        del data["states"]["save_failed"]

    return _machine(_table(on_error_durable), write_done=_trusting_write_done)


def _decide_by_step_number(ctx: EmergencyContext) -> None:
    """Broken: any directory of the step counts as covering it (step number, not coverage)."""
    fs = ctx.filesystem
    assert fs is not None
    name = iter_dirname(ctx.step)
    found = any(
        fs.stat(str(root / name)) is not None
        for root in (ctx.attempt.checkpoints_dir, ctx.attempt.artifacts_dir)
    )
    ctx.coverage = StepCoverage(artifact=ComponentPlan.full() if found else None)
    ctx.boundary = decide_emergency(
        ctx.config, validation_due=ctx.validation_due, coverage=ctx.coverage
    )


def coverage_by_step_number() -> Machine:
    return _machine(_table(lambda data: None), decide=_decide_by_step_number)


def restarting_on_second_signal(s: EmergencyScenario) -> Callable[[], Machine]:
    """Broken: a signal that arrives during the save restarts it under the newest reason."""

    def write_emergency(ctx: EmergencyContext) -> None:
        run = s.last_run
        assert run is not None
        assert ctx.boundary is not None
        seen = len(run.latch.received)
        ctx.path = ctx.write(ctx.boundary)
        if len(run.latch.received) > seen:
            newest = signal_reason(run.latch.received[-1])
            ctx.decision = StopDecision(True, newest, (0,), ctx.decision.decided_at)
            ctx.path = ctx.write(ctx.boundary)
        ctx.seconds_to_durable = 0.0

    return lambda: _machine(_table(lambda data: None), write_emergency=write_emergency)


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
        report = explore(scenario("full-save", machine_factory=done_before_durable), SPEC, KILL)
        assert "EMERGENCY-DONE-DURABLE" in report.violated_guarantees()
        first = next(v for v in report.violations if v.guarantee == "EMERGENCY-DONE-DURABLE")
        assert "which is not a durable commit" in first.message

    def test_coverage_by_step_number_only(self) -> None:
        """A step whose validation artifact lacks the optimizer, taken as covered because the
        step has a directory, is caught: DONE names a directory without the whole plan."""
        broken = attrs.evolve(lacks_a_component(), machine_factory=coverage_by_step_number)
        report = explore(broken, SPEC, KILL)
        assert "EMERGENCY-COVERAGE" in report.violated_guarantees()
        first = next(v for v in report.violations if v.guarantee == "EMERGENCY-COVERAGE")
        assert "saved=False for a step that was not covered" in first.message

    def test_second_signal_restarting_the_save(self) -> None:
        """A save restarted by the second signal is caught: two saves, and DONE records the
        second reason."""
        broken = scenario("second-signal-during-save")
        broken.machine_factory = restarting_on_second_signal(broken)
        report = explore(broken, SPEC, KILL)
        assert "EMERGENCY-ONE-SAVE" in report.violated_guarantees()
        first = next(v for v in report.violations if v.guarantee == "EMERGENCY-ONE-SAVE")
        assert "one stop started 2 saves" in first.message

    @pytest.mark.slow
    def test_done_when_the_save_failed(self) -> None:
        """A failed save that still writes DONE.json is caught under an injected I/O error:
        the record names a checkpoint that was never committed."""
        broken = scenario("full-save", machine_factory=done_after_failed_save)
        report = explore(broken, SPEC, KILL_WITH_FAULTS)
        assert "EMERGENCY-DONE-DURABLE" in report.violated_guarantees()
        failed = [
            v
            for v in report.violations
            if v.guarantee == "EMERGENCY-DONE-DURABLE" and "fault" in v.point
        ]
        assert failed, [v.point for v in report.violations]
