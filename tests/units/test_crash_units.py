"""The crash harness proves specs/unit_seal.toml and specs/unit_prune.toml on the shipped
machines (a slot's second generation, a framework folder adopted, a refused seal, a prune), and
catches the deliberately wrong variants: the commit manifest before the files are durable, a
framework's files adopted without fsync, the replaced unit retired before the commit, and a
prune that deletes files before it invalidates."""

from __future__ import annotations

import attrs

from statecraft.cli import main
from statecraft.cli.crashcheck import crashcheck
from statecraft.engine import load_spec
from statecraft.proofs import ExploreOptions, explore
from statecraft.proofs.units.broken import (
    PrefixSiblingScenario,
    adopt_without_fsync_machine,
    delete_before_invalidate_machine,
    delete_by_name_prefix,
    delete_without_fsync,
    failed_commit_left_standing,
    manifest_before_durable_machine,
    manifest_not_fsynced,
    rerun_takes_uncommitted_for_done,
    retire_before_commit_machine,
    seal_over_a_committed_unit,
    unit_table,
)
from statecraft.proofs.units.scenarios import (
    UnitScenario,
    unit_prune_scenarios,
    unit_seal_scenarios,
)
from statecraft.resources import spec_path
from statecraft.storage import CrashKind

SEAL_SPEC = load_spec(spec_path("unit_seal"))
PRUNE_SPEC = load_spec(spec_path("unit_prune"))
KILL_AND_POWER = ExploreOptions(
    extra_subsets=0, faults=False, kinds=(CrashKind.PROCESS_KILL, CrashKind.POWER_LOSS)
)


def seal_scenario(name: str, **changes) -> UnitScenario:
    (found,) = [s for s in unit_seal_scenarios() if s.name == name]
    return attrs.evolve(found, **changes)


class TestShippedUnitMachines:
    def test_crashcheck_proves_every_guarantee_substantively(self) -> None:
        """Every guarantee of both machines holds at every crash point (with an injected I/O
        error at every operation) of every scenario under every crash kind, each judged
        substantively in some state."""
        reports, scenario_reports = crashcheck(
            ["unit_seal", "unit_prune"], ExploreOptions(extra_subsets=2)
        )
        for report in reports:
            assert report.violations == (), report.violations[0].reproducer()
            assert report.vacuous == ()
        names = {s.scenario for s in scenario_reports}
        assert names == {s.name for s in [*unit_seal_scenarios(), *unit_prune_scenarios()]}
        for spec in (SEAL_SPEC, PRUNE_SPEC):
            substantive = {g.id: 0 for g in spec.guarantees}
            for s in scenario_reports:
                for g_id, n in s.substantive_by_guarantee.items():
                    if g_id in substantive:
                        substantive[g_id] += n
            assert all(n > 0 for n in substantive.values()), substantive
        assert sum(s.crash_states for s in scenario_reports) > 500

    def test_machines_check_lists_both(self, capsys) -> None:
        assert main(["machines", "check"]) == 0
        out = capsys.readouterr().out
        assert "ok   unit_seal:" in out
        assert "ok   unit_prune:" in out


class TestBrokenVariantsAreCaught:
    def test_manifest_before_the_files_are_durable(self) -> None:
        """A power loss after the early manifest leaves it naming a framework's torn or empty
        files. (Payloads statecraft writes itself are each published durably by their atomic
        write, so the slot scenario survives this order: the framework folder is the case.)"""
        broken = seal_scenario(
            "framework-folder-adopted-beside-an-older-one",
            machine_factory=manifest_before_durable_machine,
        )
        report = explore(broken, SEAL_SPEC, KILL_AND_POWER)
        assert "US-COMMIT-COMPLETE" in report.violated_guarantees()
        assert {v.kind for v in report.violations} == {"power_loss"}

    def test_framework_files_adopted_without_fsync(self) -> None:
        """The Trainer writes without fsync: a commit over its unsynced files is caught."""
        broken = seal_scenario(
            "framework-folder-adopted-beside-an-older-one",
            machine_factory=adopt_without_fsync_machine,
        )
        report = explore(broken, SEAL_SPEC, KILL_AND_POWER)
        assert "US-COMMIT-COMPLETE" in report.violated_guarantees()
        kinds = {v.kind for v in report.violations}
        assert kinds == {"power_loss"}, kinds  # a process kill keeps the page cache

    def test_replaced_generation_retired_before_the_commit(self) -> None:
        broken = seal_scenario(
            "slot-second-generation-retires-the-first", machine_factory=retire_before_commit_machine
        )
        caught = explore(broken, SEAL_SPEC, KILL_AND_POWER).violated_guarantees()
        assert {"US-RETIRE-AFTER-COMMIT", "US-ONE-COMMITTED"} <= caught, caught

    def test_prune_deleting_files_before_the_manifest(self) -> None:
        (scenario,) = unit_prune_scenarios()
        broken = attrs.evolve(scenario, machine_factory=delete_before_invalidate_machine)
        report = explore(broken, PRUNE_SPEC, KILL_AND_POWER)
        assert "UP-NEVER-HALF" in report.violated_guarantees()
        first = next(v for v in report.violations if v.guarantee == "UP-NEVER-HALF")
        assert "looks committed" in first.message

    def test_a_committed_unit_sealed_again_is_caught(self) -> None:
        """The committed check skipped: the committed unit is cleared and rewritten."""
        (broken,) = seal_over_a_committed_unit()
        caught = explore(broken, SEAL_SPEC, KILL_AND_POWER).violated_guarantees()
        assert {"US-REFUSED", "US-NEVER-REWRITTEN"} <= caught, caught

    def test_manifest_not_fsynced_is_caught_after_return(self) -> None:
        """The seal returned over a manifest a power loss takes back."""
        caught: set[str] = set()
        for broken in manifest_not_fsynced():
            report = explore(broken, SEAL_SPEC, KILL_AND_POWER)
            caught |= report.violated_guarantees()
            lost = {v.kind for v in report.violations if v.guarantee == "US-DURABLE-ON-RETURN"}
            assert lost <= {"power_loss"}, lost  # a process kill keeps the page cache
        assert "US-DURABLE-ON-RETURN" in caught, caught

    def test_failed_commit_left_standing_is_caught_by_the_retry(self) -> None:
        """Only an injected fsync failure of the commit reaches the broken abandon path."""
        (broken,) = failed_commit_left_standing()
        without_faults = explore(broken, SEAL_SPEC, KILL_AND_POWER).violated_guarantees()
        assert "US-RETRY-COMPLETES" not in without_faults
        caught = explore(broken, SEAL_SPEC, ExploreOptions(extra_subsets=0)).violated_guarantees()
        assert "US-RETRY-COMPLETES" in caught, caught

    def test_prune_by_name_prefix_takes_a_committed_sibling(self) -> None:
        """checkpoint-20 beside checkpoint-2: the shipped prune leaves it alone, a removal by
        name pattern does not."""
        (scenario,) = unit_prune_scenarios()
        sibling = PrefixSiblingScenario(scenario.name, scenario.machine, scenario.kind)
        shipped = explore(sibling, PRUNE_SPEC, KILL_AND_POWER)
        assert not shipped.violations, shipped.violations[0].reproducer()
        (broken,) = delete_by_name_prefix()
        caught = explore(broken, PRUNE_SPEC, KILL_AND_POWER).violated_guarantees()
        assert "UP-OTHERS-UNTOUCHED" in caught, caught

    def test_prune_without_directory_fsyncs(self) -> None:
        (broken,) = delete_without_fsync()
        report = explore(broken, PRUNE_SPEC, KILL_AND_POWER)
        assert "UP-DURABLE-ON-RETURN" in report.violated_guarantees()
        lost = {v.kind for v in report.violations if v.guarantee == "UP-DURABLE-ON-RETURN"}
        assert lost == {"power_loss"}, lost  # a process kill keeps the page cache

    def test_rerun_taking_an_uncommitted_remainder_for_done(self) -> None:
        (broken,) = rerun_takes_uncommitted_for_done()
        caught = explore(broken, PRUNE_SPEC, KILL_AND_POWER).violated_guarantees()
        assert caught == {"UP-RERUN"}, caught

    def test_the_shipped_tables_are_not_the_broken_ones(self) -> None:
        """Premise: each broken variant differs from the shipped table it breaks."""
        shipped = unit_table("unit_seal")
        assert unit_table("unit_seal", ("make_files_durable", "commit_manifest")) != shipped
        assert unit_table("unit_prune", ("invalidate", "delete_files")) != unit_table("unit_prune")

    def test_cli_crashcheck_runs_the_unit_prune_machine(self, capsys) -> None:
        assert main(["crashcheck", "--machine", "unit_prune", "--extra-subsets", "0"]) == 0
        assert "unit_prune" in capsys.readouterr().out
