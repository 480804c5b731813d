"""The crash harness proves specs/roles_boundary.toml on the shipped machine (a warm-up
boundary beside a committed one, a retry whose replay was not bit-exact, a doctored marker
passed over) and catches every declared broken variant: the marker before the last role, a
restore checking only the first role's counter, a reader mixing boundaries, a retry that
rewrites a committed role, a partial taken for committed, a marker that is not durable."""

from __future__ import annotations

from statecraft.cli import main
from statecraft.cli.crashcheck import crashcheck
from statecraft.engine import load_spec
from statecraft.proofs import ExploreOptions, explore
from statecraft.proofs.roles import broken
from statecraft.proofs.roles.scenarios import roles_boundary_scenarios
from statecraft.resources import spec_path
from statecraft.storage import CrashKind

SPEC = load_spec(spec_path("roles_boundary"))
KILL_AND_POWER = ExploreOptions(
    extra_subsets=0, faults=False, kinds=(CrashKind.PROCESS_KILL, CrashKind.POWER_LOSS)
)


def caught(variant) -> set[str]:
    found: set[str] = set()
    for scenario in variant():
        found |= explore(scenario, SPEC, KILL_AND_POWER).violated_guarantees()
    return found


class TestShippedRolesMachine:
    def test_crashcheck_proves_every_guarantee_substantively(self) -> None:
        """Every guarantee holds at every crash point (with an injected I/O error at every
        operation of the first scenario) under every crash kind, each judged substantively."""
        reports, scenario_reports = crashcheck(["roles_boundary"], ExploreOptions(extra_subsets=0))
        for report in reports:
            assert report.violations == (), report.violations[0].reproducer()
            assert report.vacuous == ()
        assert {s.scenario for s in scenario_reports} == {
            s.name for s in roles_boundary_scenarios()
        }
        substantive = {g.id: 0 for g in SPEC.guarantees}
        for s in scenario_reports:
            for g_id, n in s.substantive_by_guarantee.items():
                substantive[g_id] += n
        assert all(n > 0 for n in substantive.values()), substantive
        assert sum(s.crash_states for s in scenario_reports) > 500

    def test_machines_check_lists_it(self, capsys) -> None:
        """`statecraft machines check` finds the table, its contract and its bindings."""
        assert main(["machines", "check"]) == 0
        assert "ok   roles_boundary:" in capsys.readouterr().out


class TestBrokenVariantsAreCaught:
    def test_marker_before_the_last_role(self) -> None:
        """A _SUCCESS created before the last role is written names an uncommitted role."""
        assert "RB-MARKER-LAST" in caught(broken.marker_before_last_role)

    def test_restore_checking_only_the_first_role_counter(self) -> None:
        """The doctored critic counter is adopted by a restore that checks the first role."""
        assert "RB-ADOPT-COMPLETE" in caught(broken.first_role_counter_only)

    def test_reader_mixing_two_boundaries(self) -> None:
        """Each role's newest unit without the marker mixes boundary 2 with boundary 1."""
        assert {"RB-NO-MIX", "RB-ADOPT-COMPLETE"} <= caught(broken.newest_unit_per_role)

    def test_retry_rewriting_a_committed_role(self) -> None:
        """A retry that clears committed role units rewrites them."""
        assert "RB-NEVER-REWRITTEN" in caught(broken.rewrite_committed_roles)

    def test_partial_taken_for_committed(self) -> None:
        """A retry that takes a partial for committed never completes the boundary."""
        assert "RB-RETRY" in caught(broken.partial_taken_for_committed)

    def test_marker_not_durable(self) -> None:
        """A marker without fsync is lost to a power loss after the save returned, and only
        to a power loss (a process kill keeps the page cache)."""
        (scenario,) = broken.marker_not_durable()
        report = explore(scenario, SPEC, KILL_AND_POWER)
        assert "RB-DURABLE-ON-RETURN" in report.violated_guarantees()
        kinds = {v.kind for v in report.violations if v.guarantee == "RB-DURABLE-ON-RETURN"}
        assert kinds == {"power_loss"}, kinds
