"""Acceptance tests of the crash harness (statecraft.proofs.explorer) on the toy ``replace``
machine: the right bindings survive every crash state, the deliberately wrong ones are caught,
for the right reason, at the right crash point, with a usable reproducer.

The WRONG bindings of ``toy_replace`` carry two bugs:
    1. the pointer ``current`` is published (renamed) before ``data.v2`` is fsynced
       (REPLACE-COMPLETE: ``current`` may name a missing or torn file);
    2. nothing is made durable with a directory fsync (REPLACE-DURABLE: an acknowledged
       replace may revert under power loss).
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st
from toy_replace import RIGHT, SPEC, WRONG, ReplaceScenario

from statecraft.engine import CrashPlan, format_trace
from statecraft.proofs import (
    CrashPoint,
    ExploreOptions,
    ScenarioReport,
    Violation,
    check_crash_state,
    crash_points,
    explore,
    explore_all,
    reference_run,
    run_to_crash,
)
from statecraft.storage import CrashKind, LossChoice

ALL = ExploreOptions(max_violations=1000)


@pytest.fixture(scope="module")
def right_report() -> ScenarioReport:
    """The exploration of the right bindings (computed once)."""
    return explore(ReplaceScenario(RIGHT), SPEC)


@pytest.fixture(scope="module")
def wrong_report() -> ScenarioReport:
    """The exploration of the wrong bindings, keeping every violation (computed once)."""
    return explore(ReplaceScenario(WRONG), SPEC, ALL)


def wrong_io_indices() -> tuple[int, int]:
    """Indices, in the wrong bindings' reference run, of the pointer rename and of the data
    fsync that comes after it."""
    log = reference_run(ReplaceScenario(WRONG)).io_log
    rename = next(r.index for r in log if r.op == "rename" and r.target.endswith("/current"))
    data_fsync = next(r.index for r in log if r.op == "fsync" and r.index > rename)
    return rename, data_fsync


class TestExploreRight:
    """explore() on the right bindings: no violation anywhere."""

    def test_no_violations(self, right_report: ScenarioReport) -> None:
        """Every crash point, crash kind and loss choice keeps every guarantee."""
        assert right_report.ok, "\n\n".join(v.reproducer() for v in right_report.violations)
        assert right_report.violations == []

    def test_explored_something(self, right_report: ScenarioReport) -> None:
        """The exploration ran real crash states and checks over the whole run."""
        assert right_report.scenario == "replace-v1-to-v2"
        assert right_report.machine == "replace"
        assert right_report.effects == 2
        assert right_report.io_operations == 10  # two write_atomic calls, 5 operations each
        assert right_report.crash_points > right_report.io_operations
        assert right_report.crash_states > right_report.crash_points
        assert right_report.checks_run > right_report.crash_states
        guarantees = ("REPLACE-COMPLETE", "REPLACE-DURABLE", "REPLACE-RECOVERS")
        assert right_report.guarantees == guarantees
        assert set(right_report.checks_by_guarantee) == set(guarantees)
        assert all(n > 0 for n in right_report.checks_by_guarantee.values())
        assert sum(right_report.checks_by_guarantee.values()) == right_report.checks_run

    def test_substantive_checks_are_counted(self, right_report: ScenarioReport) -> None:
        """A check counts as substantive only where it asserted something: REPLACE-DURABLE
        only in the acknowledged states, a check that never asserts nowhere."""
        substantive = right_report.substantive_by_guarantee
        checks = right_report.checks_by_guarantee
        assert set(substantive) == set(checks)
        assert 0 < substantive["REPLACE-DURABLE"] < checks["REPLACE-DURABLE"]
        assert substantive["REPLACE-RECOVERS"] == checks["REPLACE-RECOVERS"]
        assert right_report.to_json()["substantive_by_guarantee"] == substantive
        vacuous = attrs.evolve(SPEC.guarantees[0], id="VACUOUS", check="toy_replace:never_asserts")
        spec = attrs.evolve(SPEC, guarantees=(*SPEC.guarantees, vacuous))
        report = explore(ReplaceScenario(RIGHT), spec, ExploreOptions(extra_subsets=0))
        assert report.checks_by_guarantee["VACUOUS"] > 0
        assert report.substantive_by_guarantee["VACUOUS"] == 0

    def test_a_violation_counts_as_substantive(self) -> None:
        """A check that raised asserted something, even without calling exercised()."""
        raising = attrs.evolve(SPEC.guarantees[0], id="RAISES", check="toy_replace:always_violates")
        spec = attrs.evolve(SPEC, guarantees=(raising,))
        report = explore(ReplaceScenario(RIGHT), spec, ExploreOptions(extra_subsets=0))
        assert report.checks_by_guarantee["RAISES"] > 0
        assert report.substantive_by_guarantee["RAISES"] == report.checks_by_guarantee["RAISES"]

    @pytest.mark.parametrize("kind", list(CrashKind))
    def test_each_crash_kind_is_explored(
        self, kind: CrashKind, right_report: ScenarioReport
    ) -> None:
        """Each of the three crash kinds, explored alone, yields crash states and checks, no
        violation, and is part of the default exploration."""
        assert kind in ExploreOptions().kinds
        report = explore(ReplaceScenario(RIGHT), SPEC, ExploreOptions(kinds=(kind,)))
        assert report.ok, "\n\n".join(v.reproducer() for v in report.violations)
        assert report.crash_states >= report.crash_points > 0
        assert report.checks_run > 0

    def test_default_run_is_the_sum_of_the_kinds(self, right_report: ScenarioReport) -> None:
        """The default exploration covers exactly the crash states of the three kinds."""
        per_kind = [
            explore(ReplaceScenario(RIGHT), SPEC, ExploreOptions(kinds=(kind,)))
            for kind in CrashKind
        ]
        assert right_report.crash_states == sum(r.crash_states for r in per_kind)
        assert right_report.checks_run == sum(r.checks_run for r in per_kind)


class TestExploreWrong:
    """explore() on the wrong bindings: both bugs are found where they are."""

    def test_finds_both_bugs(self, wrong_report: ScenarioReport) -> None:
        """Both REPLACE-COMPLETE and REPLACE-DURABLE are violated."""
        assert not wrong_report.ok
        assert {"REPLACE-COMPLETE", "REPLACE-DURABLE"} <= wrong_report.violated_guarantees()

    def test_pointer_before_data_fsync(self, wrong_report: ScenarioReport) -> None:
        """REPLACE-COMPLETE fails under power loss at the crash point between the pointer
        rename and the data fsync, and at no point before the rename."""
        rename, data_fsync = wrong_io_indices()
        assert data_fsync == rename + 1
        complete = [v for v in wrong_report.violations if v.guarantee == "REPLACE-COMPLETE"]
        between = [
            v
            for v in complete
            if v.point.startswith(f"io#{data_fsync} before fsync") and v.kind == "power_loss"
        ]
        assert between, [v.point for v in complete]
        assert any("`current` names data.v2 but that file is" in v.message for v in between)
        early = [f"io#{i} " for i in range(rename + 1)]
        assert not [v for v in complete if v.point.startswith(tuple(early))]

    def test_rename_without_directory_fsync(self, wrong_report: ScenarioReport) -> None:
        """REPLACE-DURABLE fails after the completed (acknowledged) run under power loss when
        every unsynced operation is lost: `current` reverts to the old version."""
        durable = [
            v
            for v in wrong_report.violations
            if v.guarantee == "REPLACE-DURABLE"
            and v.point == "after the completed run"
            and v.kind == "power_loss"
            and v.choice == "all_lost"
        ]
        assert durable
        assert durable[0].message == (
            "replace returned, yet after the crash `current` names 'data.v1' (complete)"
        )

    def test_process_kill_finds_bugs_only_through_a_later_power_loss(self) -> None:
        """Under process kill the crashed disk looks fine; the bugs show when power fails after
        recovery trusted the killed run's unsynced writes (its page cache)."""
        report = explore(
            ReplaceScenario(WRONG), SPEC, ExploreOptions(kinds=(CrashKind.PROCESS_KILL,))
        )
        assert not report.ok
        assert all(v.phase == "recovered" for v in report.violations)
        assert all("then power_loss" in v.choice for v in report.violations)

    def test_max_violations_caps_each_guarantee(self) -> None:
        """By default at most three violations are kept per guarantee."""
        report = explore(ReplaceScenario(WRONG), SPEC)
        for guarantee in report.violated_guarantees():
            assert sum(v.guarantee == guarantee for v in report.violations) <= 3

    def test_reproducer_names_trace_point_and_choice(self, wrong_report: ScenarioReport) -> None:
        """A violation's reproducer holds the guarantee, the trace up to the crash, the crash
        point, the crash kind, the loss choice and the last I/O operations."""
        _, data_fsync = wrong_io_indices()
        violation = next(
            v
            for v in wrong_report.violations
            if v.guarantee == "REPLACE-COMPLETE" and v.point.startswith(f"io#{data_fsync} ")
        )
        text = violation.reproducer()
        assert text.startswith(f"REPLACE-COMPLETE violated ({violation.phase}): ")
        assert violation.statement in text
        assert f"crash point: {violation.point}" in text
        assert "kind: power_loss" in text
        assert f"loss choice: {violation.choice}" in text
        assert format_trace(violation.trace) in text
        assert "write_data" in text
        assert "switch_pointer" in text
        assert "io#5: rename /store/.current.tmp -> /store/current" in text
        as_json = violation.to_json()
        assert as_json["point"] == violation.point
        assert as_json["choice"] == violation.choice
        assert len(as_json["trace"]) == len(violation.trace) == 2

    def test_fault_point_reproducer_has_the_trace(self, wrong_report: ScenarioReport) -> None:
        """A violation found at an injected-fault point carries the effects that ran."""
        faulted = [v for v in wrong_report.violations if v.point.startswith("fault ")]
        assert faulted
        assert all(v.trace for v in faulted)

    def test_report_json(self, wrong_report: ScenarioReport) -> None:
        """The report serialises its counts and every violation."""
        data = wrong_report.to_json()
        assert data["scenario"] == "replace-v1-to-v2"
        assert data["crash_states"] == wrong_report.crash_states
        assert len(data["violations"]) == len(wrong_report.violations)


class TestCrashPoints:
    """crash_points / explore_all: what the explorer interrupts."""

    def test_points_cover_every_op_and_effect(self) -> None:
        """Without faults: one point per I/O op, two per effect, one after completion."""
        reference = reference_run(ReplaceScenario(RIGHT))
        points = crash_points(reference, faults=False)
        n, m = len(reference.io_log), len(reference.trace)
        assert len(points) == n + 2 * m + 1
        assert [p.plan for p in points[:n]] == [CrashPlan(at_io=i) for i in range(n)]
        assert points[-1] == CrashPoint("after the completed run")

    def test_fault_points(self) -> None:
        """With faults: every op also fails with EIO, and every write with ENOSPC too."""
        reference = reference_run(ReplaceScenario(RIGHT))
        plain = crash_points(reference, faults=False)
        faulted = crash_points(reference, faults=True)[len(plain) :]
        writes = sum(r.op == "write" for r in reference.io_log)
        assert len(faulted) == len(reference.io_log) + writes
        assert all(p.plan is None and p.fault is not None for p in faulted)

    def test_explore_all(self) -> None:
        """explore_all explores each scenario in order."""
        reports = explore_all([ReplaceScenario(RIGHT), ReplaceScenario(WRONG)], SPEC)
        assert [r.ok for r in reports] == [True, False]


# ----------------------------------------------------------------- hypothesis, driven directly

Reference = type(reference_run(ReplaceScenario(RIGHT)))  # the explorer's private record
RIGHT_REF = reference_run(ReplaceScenario(RIGHT))
WRONG_REF = reference_run(ReplaceScenario(WRONG))


def point_at(index: int, n: int) -> CrashPoint:
    """Crash before I/O op ``index``; ``index == n`` means after the completed run."""
    if index == n:
        return CrashPoint("after the completed run")
    return CrashPoint(f"io#{index}", CrashPlan(at_io=index))


def power_loss_violations(
    scenario: ReplaceScenario, reference: Reference, index: int, kept: frozenset[int]
) -> list[Violation]:
    """The violations of one power-loss crash state: crash before op ``index`` and keep the
    unsynced operations in ``kept``."""
    point = point_at(index, len(reference.io_log))
    crashed = run_to_crash(scenario, reference.base, point)
    pending = {p.op_id for p in crashed.world.fs.pending_ops()}
    choice = LossChoice("hypothesis", frozenset(kept & pending))
    violations, checks, _ = check_crash_state(
        scenario,
        SPEC.guarantees,
        reference.base,
        crashed,
        CrashKind.POWER_LOSS,
        choice,
        point.label,
    )
    assert sum(checks.values()) > 0
    return violations


class TestCheckCrashStateProperty:
    """run_to_crash + check_crash_state over random crash points and loss subsets."""

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def test_right_bindings_always_pass(self, data: st.DataObject) -> None:
        """Any crash point, any subset of the unsynced operations (one write possibly torn)
        and any crash kind keep every guarantee of the right bindings."""
        scenario = ReplaceScenario(RIGHT)
        n = len(RIGHT_REF.io_log)
        point = point_at(data.draw(st.integers(0, n), label="io index"), n)
        crashed = run_to_crash(scenario, RIGHT_REF.base, point)
        kind = data.draw(st.sampled_from(list(CrashKind)), label="kind")
        choice = None
        if kind is CrashKind.POWER_LOSS:
            pending = crashed.world.fs.pending_ops()
            ids = sorted(p.op_id for p in pending)
            kept = set(data.draw(st.sets(st.sampled_from(ids)) if ids else st.just(set())))
            writes = [p.op_id for p in pending if p.kind == "write"]
            torn = None
            if writes and data.draw(st.booleans(), label="torn"):
                mode = data.draw(st.sampled_from(["prefix", "zeros"]))
                torn = (data.draw(st.sampled_from(writes)), mode)
                kept.add(torn[0])
            choice = LossChoice("hypothesis", frozenset(kept), torn)
        violations, checks, _ = check_crash_state(
            scenario, SPEC.guarantees, RIGHT_REF.base, crashed, kind, choice, point.label
        )
        assert sum(checks.values()) > 0
        assert violations == [], "\n\n".join(v.reproducer() for v in violations)

    def shrink(self, guarantee: str) -> tuple[int, frozenset[int]]:
        """The minimal (crash index, kept operations) hypothesis finds for which the wrong
        bindings violate ``guarantee`` under power loss."""
        scenario = ReplaceScenario(WRONG)
        n = len(WRONG_REF.io_log)
        full = run_to_crash(scenario, WRONG_REF.base, point_at(n, n))
        ids = sorted(p.op_id for p in full.world.fs.pending_ops())

        def violates(example: tuple[int, frozenset[int]]) -> bool:
            found = power_loss_violations(scenario, WRONG_REF, *example)
            return any(v.guarantee == guarantee for v in found)

        return find(
            st.tuples(st.integers(0, n), st.frozensets(st.sampled_from(ids))),
            violates,
            settings=settings(database=None, derandomize=True, max_examples=2000),
        )

    def test_shrinker_finds_acknowledged_replace_lost(self) -> None:
        """hypothesis.find shrinks a REPLACE-DURABLE failure of the wrong bindings to the
        simplest one: the run completed, then a power loss lost every unsynced operation."""
        index, kept = self.shrink("REPLACE-DURABLE")
        assert (index, kept) == (len(WRONG_REF.io_log), frozenset())
        (violation,) = power_loss_violations(ReplaceScenario(WRONG), WRONG_REF, index, kept)
        assert violation.guarantee == "REPLACE-DURABLE"
        assert violation.point == "after the completed run"

    def test_shrinker_finds_pointer_before_data(self) -> None:
        """hypothesis.find shrinks a REPLACE-COMPLETE failure of the wrong bindings to the
        minimal one: crash just before the data fsync, only the pointer rename survives."""
        index, kept = self.shrink("REPLACE-COMPLETE")
        _, data_fsync = wrong_io_indices()
        assert index == data_fsync
        n = len(WRONG_REF.io_log)
        crashed = run_to_crash(ReplaceScenario(WRONG), WRONG_REF.base, point_at(index, n))
        # pending_ops describes a rename by its first half, the removal of the source name
        (rename_op,) = [
            p.op_id
            for p in crashed.world.fs.pending_ops()
            if p.description == "remove entry '.current.tmp'"
        ]
        assert kept == {rename_op}
        found = power_loss_violations(ReplaceScenario(WRONG), WRONG_REF, index, kept)
        messages = [v.message for v in found if v.guarantee == "REPLACE-COMPLETE"]
        assert messages[0] == "`current` names data.v2 but that file is missing"
