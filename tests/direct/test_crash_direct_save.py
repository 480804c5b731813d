"""The crash harness proves specs/direct_save.toml on the shipped direct-save machine under
every crash kind (node loss: only the bucket survives), and catches each deliberately broken
variant (a harness that cannot fail proves nothing)."""

from __future__ import annotations

from statecraft.cli.crashcheck import crashcheck
from statecraft.engine import load_spec
from statecraft.proofs import ExploreOptions, explore
from statecraft.proofs.direct.broken import (
    commit_without_lease_check,
    latest_before_manifest,
    latest_error_swallowed,
    latest_replaced_by_delete_then_put,
    manifest_before_every_rank,
    plan_not_compared,
    retry_rewrites_committed,
    retry_skips_latest,
)
from statecraft.proofs.direct.scenarios import direct_context, direct_save_scenarios
from statecraft.resources import spec_path
from statecraft.storage import SimWorld

SPEC = load_spec(spec_path("direct_save"))
FAST = ExploreOptions(extra_subsets=0, faults=False)


def _caught(variant, options: ExploreOptions = FAST) -> set[str]:
    """The guarantees exploring every scenario of a declared broken variant violates."""
    return {g for s in variant() for g in explore(s, SPEC, options).violated_guarantees()}


class TestShippedMachine:
    def test_crashcheck_proves_the_direct_save_spec_under_all_crash_kinds(self) -> None:
        """Every direct-save guarantee holds at every crash point of every scenario, under
        process kill, power loss and node loss, with injected request faults (a lost latest
        response included); and every guarantee is judged substantively somewhere."""
        (report,), scenario_reports = crashcheck(["direct_save"], ExploreOptions())
        assert report.violations == (), report.violations[0].reproducer()
        assert report.vacuous == ()
        assert report.crash_states >= 400
        substantive = {g.id: 0 for g in SPEC.guarantees}
        for s in scenario_reports:
            for g_id, n in s.substantive_by_guarantee.items():
                substantive[g_id] += n
        assert all(n > 0 for n in substantive.values()), substantive

    def test_reference_runs(self) -> None:
        """Each scenario's uncrashed run ends as it should: committed (latest names it, the
        manifest names 2 ranks' shards), or failed closed with the expected error."""
        for scenario in direct_save_scenarios():
            world = SimWorld()
            scenario.setup(world)
            result = scenario.run(world, crash=None)
            if scenario.expect_failure is None:
                assert result.final_state == "committed", (scenario.name, result.error)
            else:
                assert result.final_state == "failed", scenario.name
                assert type(result.error).__name__ == scenario.expect_failure, result.error

    def test_lost_latest_response_is_read_back_and_the_retry_only_confirms(self) -> None:
        """An ambiguous latest PUT (applied, response lost) is read back by the fenced write
        (the save commits); a retry then observes 'committed' and writes nothing under the
        root but its own lease."""
        from statecraft.engine.crash import FaultKind, IoGate

        scenario = next(s for s in direct_save_scenarios() if s.name == "save-after-previous")
        world = SimWorld()
        scenario.setup(world)
        probe = IoGate()
        world.rearm(probe)
        scenario.run(world, crash=None)
        latest_op = next(r.index for r in probe.log if r.target.endswith("latest_checkpoint.txt"))
        world = SimWorld()
        scenario.setup(world)
        gate = IoGate(faults={latest_op: FaultKind.LOST_RESPONSE})
        world.rearm(gate)
        result = scenario.run(world, crash=None)
        assert gate.log[latest_op].target.endswith("latest_checkpoint.txt")
        assert result.final_state == "committed", result.error
        recovery = scenario.recover(world)
        assert recovery.retry.observed == "committed"
        assert recovery.retry.final_state == "committed"
        assert [r.target for r in recovery.retry_io if r.op == "put"] == []


class TestBrokenVariantsAreCaught:
    def test_latest_before_the_manifest(self) -> None:
        """A table that PUTs latest before the manifest is caught: a crash in between leaves
        latest naming an uncommitted iteration."""
        assert "DS-LATEST-COMPLETE" in _caught(latest_before_manifest)

    def test_manifest_before_every_shard_is_durable(self) -> None:
        """A save that commits the manifest before rank 1's shards are written is caught."""
        assert "DS-MANIFEST-COMPLETE" in _caught(manifest_before_every_rank)

    def test_commit_without_lease_check(self) -> None:
        """A control write and commit that do not check the lease let the stale writer
        commit (caught)."""
        assert "DS-STALE-WRITER" in _caught(commit_without_lease_check)

    def test_retry_rewrites_a_committed_iteration(self) -> None:
        """A retry that writes under a committed iteration is caught."""
        assert "DS-COMMITTED-IMMUTABLE" in _caught(retry_rewrites_committed)

    def test_latest_replaced_by_delete_then_put(self) -> None:
        """A crash between the DELETE and the PUT of latest leaves no latest."""
        assert "DS-LATEST-MONOTONE" in _caught(latest_replaced_by_delete_then_put)

    def test_latest_error_swallowed(self) -> None:
        """Only an injected request fault reaches the swallowed error: the save returns while
        latest names the previous iteration."""
        assert "DS-DURABLE-ON-RETURN" not in _caught(latest_error_swallowed)
        with_faults = ExploreOptions(extra_subsets=0)
        assert "DS-DURABLE-ON-RETURN" in _caught(latest_error_swallowed, with_faults)

    def test_retry_that_skips_latest(self) -> None:
        assert "DS-RETRY-COMPLETES" in _caught(retry_skips_latest)

    def test_plan_not_compared(self) -> None:
        """A save over an iteration committed with another plan moves latest to it."""
        assert "DS-PLAN-DRIFT" in _caught(plan_not_compared)


def test_the_harness_saves_under_the_production_lease() -> None:
    """The scenarios' context holds the production ObjectStoreLease of the setup's writer."""
    scenario = direct_save_scenarios()[0]
    world = SimWorld()
    scenario.setup(world)
    ctx = direct_context(world, scenario.plan)
    assert ctx.store.describe().startswith("s3://sim-bucket/")
    assert ctx.lease is not None
    assert ctx.lease.record.host == "host-a"
    ctx.lease.check()
