"""The crash harness proves specs/direct_save.toml on the shipped direct-save machine under
every crash kind (node loss: only the bucket survives), and catches each deliberately broken
variant (a harness that cannot fail proves nothing)."""

from __future__ import annotations

import tomllib

import attrs

from statecraft.checkpoint.direct import bindings
from statecraft.checkpoint.kernel.machines import load_machine, machine_bindings
from statecraft.cli.crashcheck import crashcheck
from statecraft.engine import Bindings, Machine, load_spec, parse_table
from statecraft.proofs import ExploreOptions, explore
from statecraft.proofs.direct.scenarios import (
    DirectScenario,
    direct_context,
    direct_save_scenarios,
    shard_objects,
)
from statecraft.resources import machine_path, spec_path
from statecraft.storage import SimWorld

SPEC = load_spec(spec_path("direct_save"))
FAST = ExploreOptions(extra_subsets=0, faults=False)


def _with_bindings(**effects) -> Machine:
    merged = machine_bindings("direct_save").merged(Bindings(effects=effects))
    return Machine(load_machine("direct_save").table, merged)


def _swapped(first: str, second: str) -> Machine:
    """The direct-save table with the effects of two transitions exchanged."""
    data = tomllib.loads(machine_path("direct_save").read_text())
    a = next(t for t in data["transitions"] if t["do"] == first)
    b = next(t for t in data["transitions"] if t["do"] == second)
    a["do"], b["do"] = b["do"], a["do"]
    table = parse_table(data, source="broken direct_save table")
    return Machine(table, machine_bindings("direct_save"))


def _scenario(name: str, machine: Machine) -> DirectScenario:
    base = next(s for s in direct_save_scenarios() if s.name == name)
    return attrs.evolve(base, name=f"broken-{name}", machine_factory=lambda: machine)


def _manifest_before_rank_one(ctx) -> None:
    """Broken write_components: rank 0's shards and the .metadata, then the control files and
    the manifest (naming every rank's shards), and only then rank 1's shards."""
    objects = shard_objects(ctx.plan, ctx.write_shards.salt)
    late = {p: d for p, d in objects.items() if "/__1_" in p}
    records = {}
    for path, data in objects.items():
        if path not in late:
            records[path] = ctx.store.write_atomic(path, data)
    from statecraft.storage.base import FileRecord
    from statecraft.storage.digest import Digest

    for path, data in late.items():
        records[path] = FileRecord(path, len(data), Digest.of(data))
    ctx.records = records
    bindings.write_control(ctx)
    bindings.commit_manifest(ctx)
    for path, data in late.items():
        ctx.store.write_atomic(path, data)


def _without_lease(effect):
    """A broken effect: ``effect`` run without its lease check."""

    def broken(ctx) -> None:
        lease, ctx.lease = ctx.lease, None
        try:
            effect(ctx)
        finally:
            ctx.lease = lease

    return broken


def _rewrite_committed(ctx) -> None:
    """Broken validate_committed: the retry writes its control files again."""
    bindings.validate_committed(ctx)
    ctx.store.write_atomic(f"{ctx.iter_dir}/.posttrain/generations/00000001/trainer.pt", b"x")


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
        machine = _swapped("commit_manifest", "publish_latest")
        report = explore(_scenario("save-after-previous", machine), SPEC, FAST)
        assert "DS-LATEST-COMPLETE" in report.violated_guarantees()

    def test_manifest_before_every_shard_is_durable(self) -> None:
        """A save that commits the manifest before rank 1's shards are written is caught."""
        machine = _with_bindings(write_components=_manifest_before_rank_one)
        report = explore(_scenario("save-after-previous", machine), SPEC, FAST)
        assert "DS-MANIFEST-COMPLETE" in report.violated_guarantees()

    def test_commit_without_lease_check(self) -> None:
        """A control write and commit that do not check the lease let the stale writer
        commit (caught)."""
        machine = _with_bindings(
            write_control=_without_lease(bindings.write_control),
            commit_manifest=_without_lease(bindings.commit_manifest),
        )
        report = explore(_scenario("stale-writer-lease-taken-over", machine), SPEC, FAST)
        assert "DS-STALE-WRITER" in report.violated_guarantees()

    def test_retry_rewrites_a_committed_iteration(self) -> None:
        """A retry that writes under a committed iteration is caught."""
        machine = _with_bindings(validate_committed=_rewrite_committed)
        report = explore(_scenario("manifest-committed-latest-behind", machine), SPEC, FAST)
        assert "DS-COMMITTED-IMMUTABLE" in report.violated_guarantees()


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
