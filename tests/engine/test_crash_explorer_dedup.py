"""The crash explorer's shortcuts keep its verdicts: a repeated crash state gets the verdict its
first occurrence got (the same violations, checks and substantive counts as judging it again),
``--exhaustive`` tries every loss subset, and a scenario several specs list is explored once."""

from __future__ import annotations

import random

import attrs
from toy_replace import RIGHT, SPEC, WRONG, ReplaceScenario

from statecraft.cli.crashcheck import _distinct_scenarios
from statecraft.engine import load_spec
from statecraft.proofs import ExploreOptions, ScenarioReport, explore
from statecraft.proofs.crash_states import loss_choices
from statecraft.resources import spec_path
from statecraft.storage import CrashKind, SimWorld

ALL = ExploreOptions(max_violations=100_000)


def _verdicts(report: ScenarioReport) -> list[tuple[str, str, str, str, str]]:
    return [(v.guarantee, v.point, v.kind, v.choice, v.phase) for v in report.violations]


def _same_judgement(fast: ScenarioReport, slow: ScenarioReport) -> None:
    assert fast.crash_points == slow.crash_points
    assert fast.crash_states == slow.crash_states == slow.distinct_crash_states
    assert fast.checks_run == slow.checks_run
    assert fast.checks_by_guarantee == slow.checks_by_guarantee
    assert fast.substantive_by_guarantee == slow.substantive_by_guarantee
    assert _verdicts(fast) == _verdicts(slow)


class TestDedupKeepsVerdicts:
    def test_wrong_bindings_get_every_violation_at_every_state(self) -> None:
        """The toy's wrong bindings: with and without deduplication the explorer reports the
        same violations at the same points, kinds and loss choices, in the same order."""
        scenario = ReplaceScenario(WRONG)
        fast = explore(scenario, SPEC, ALL)
        slow = explore(scenario, SPEC, attrs.evolve(ALL, dedup=False))
        assert slow.violations
        _same_judgement(fast, slow)
        assert fast.distinct_crash_states < fast.crash_states

    def test_right_bindings_same_counts(self) -> None:
        scenario = ReplaceScenario(RIGHT)
        fast = explore(scenario, SPEC, ALL)
        slow = explore(scenario, SPEC, attrs.evolve(ALL, dedup=False))
        assert not slow.violations
        _same_judgement(fast, slow)
        assert fast.to_json()["distinct_crash_states"] == fast.distinct_crash_states

    def test_a_shipped_broken_variant_is_caught_identically(self) -> None:
        """A real transaction (the emergency stop judging coverage by step number): the same
        violations with and without deduplication and the shared recoveries."""
        from statecraft.proofs.stop.broken import coverage_by_step_number

        spec = load_spec(spec_path("emergency"))
        (scenario,) = coverage_by_step_number()
        options = ExploreOptions(max_violations=100_000, faults=False)
        fast = explore(scenario, spec, options)
        slow = explore(scenario, spec, attrs.evolve(options, dedup=False))
        assert "EMERGENCY-COVERAGE" in slow.violated_guarantees()
        _same_judgement(fast, slow)


def _world_with_pending_ops() -> SimWorld:
    world = SimWorld()
    world.fs.makedirs("/d")
    world.settle()
    for name in ("a", "b"):
        handle = world.fs.open_write(f"/d/{name}", exclusive=True)
        world.fs.write(handle, b"payload")
        world.fs.close(handle)
    return world


class TestExhaustive:
    def test_every_subset_of_the_unsynced_operations(self) -> None:
        world = _world_with_pending_ops()
        ids = sorted({op.op_id for op in world.fs.pending_ops()})
        assert len(ids) >= 3
        rng = random.Random(0)
        choices = list(loss_choices(world, CrashKind.POWER_LOSS, 2, rng, exhaustive=True))
        kept = {c.kept for c in choices if c is not None and c.torn is None}
        assert len(kept) == 2 ** len(ids)

    def test_quick_mode_samples(self) -> None:
        world = _world_with_pending_ops()
        ids = sorted({op.op_id for op in world.fs.pending_ops()})
        rng = random.Random(0)
        choices = list(loss_choices(world, CrashKind.POWER_LOSS, 2, rng, exhaustive=False))
        kept = {c.kept for c in choices if c is not None and c.torn is None}
        assert len(kept) < 2 ** len(ids)

    def test_other_kinds_have_one_state(self) -> None:
        world = _world_with_pending_ops()
        for kind in (CrashKind.PROCESS_KILL, CrashKind.NODE_LOSS):
            rng = random.Random(0)
            assert list(loss_choices(world, kind, 2, rng, exhaustive=True)) == [None]


class TestSharedScenarios:
    def test_resume_and_save_share_the_save_scenarios_once(self) -> None:
        """resume's list holds every save scenario: each is explored once for both specs."""
        specs = {m: load_spec(spec_path(m)) for m in ("save", "resume")}
        distinct, names = _distinct_scenarios(["save", "resume"], specs)
        assert set(names["save"]) < set(names["resume"])
        assert len(distinct) == len(set(names["save"]) | set(names["resume"]))
        members = {s.name: m for s, m in distinct}
        assert all(members[n] == ["save", "resume"] for n in names["save"])
