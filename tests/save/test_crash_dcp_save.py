"""The crash harness proves specs/dcp_save.toml on the shipped dcp_save machine, and catches
the deliberately broken variant "the manifest before every shard is durable" (a rank that
reports its shards before settling them, as a second store instance would)."""

from __future__ import annotations

import attrs
import pytest

from statecraft.checkpoint.kernel.verify import verify_checkpoint
from statecraft.cli.crashcheck import crashcheck
from statecraft.engine import load_spec
from statecraft.proofs import ExploreOptions, explore
from statecraft.proofs.oracle import CHECKPOINTS_ROOT
from statecraft.proofs.pool import default_jobs
from statecraft.proofs.save.dcp_broken import unsettled_shards_machine
from statecraft.proofs.save.dcp_scenarios import (
    FILES_PER_RANK,
    DcpSaveScenario,
    dcp_save_scenarios,
)
from statecraft.resources import spec_path
from statecraft.storage import CrashKind, SimWorld

SPEC = load_spec(spec_path("dcp_save"))
FAST = ExploreOptions(extra_subsets=0, faults=False)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_reference_runs_commit() -> None:
    """Each scenario's uncrashed run commits a DCP checkpoint that verifies at digest level
    (several shard files per component)."""
    for scenario in dcp_save_scenarios():
        world = SimWorld()
        scenario.setup(world)
        result = scenario.run(world, crash=None)
        assert result.final_state == "committed", scenario.name
        store = world.local_store(CHECKPOINTS_ROOT)
        verified = verify_checkpoint(store, scenario.target, level="digest")
        assert verified.manifest is not None
        shards = [n for n in verified.manifest.files if n.endswith(".distcp")]
        assert len(shards) == 2 * FILES_PER_RANK, shards


def test_shipped_machine_holds_every_guarantee() -> None:
    """Every guarantee holds at every crash point (process kill, power loss) of a save over
    an interrupted save's shards, and each is judged substantively (every scenario, with
    injected faults too: the slow crashcheck test below)."""
    chosen = {"dcp-save-over-partial-shards"}
    substantive = {g.id: 0 for g in SPEC.guarantees}
    for scenario in (s for s in dcp_save_scenarios() if s.name in chosen):
        report = explore(scenario, SPEC, FAST)
        assert report.violations == [], report.violations[0].reproducer()
        for g_id, n in report.substantive_by_guarantee.items():
            substantive[g_id] += n
    assert all(n > 0 for n in substantive.values()), substantive


@pytest.mark.slow
def test_crashcheck_lists_and_proves_dcp_save() -> None:
    """``statecraft crashcheck --machine dcp_save`` finds the spec's scenarios and proves it
    with injected I/O faults too."""
    reports, scenarios = crashcheck(
        ["dcp_save"], ExploreOptions(extra_subsets=0), jobs=default_jobs()
    )
    assert [r.machine for r in reports] == ["dcp_save"]
    assert not reports[0].violations
    assert {s.scenario for s in scenarios} == {s.name for s in dcp_save_scenarios()}


def test_manifest_before_durable_shards_is_caught() -> None:
    """A save whose shard-writing rank reports its shards before they are durable (no fsync,
    no settle: the coordinator goes on to .metadata and the manifest) lets the manifest
    survive a power loss that took shard bytes: DCP-SHARDS-BEFORE-MANIFEST catches it."""
    scenario = _JudgedWhenCrashed(
        "unsettled-shards", target=2, with_data=False, machine_factory=unsettled_shards_machine
    )
    shards_first = [g for g in SPEC.guarantees if g.id == "DCP-SHARDS-BEFORE-MANIFEST"]
    spec = attrs.evolve(
        SPEC, guarantees=tuple(attrs.evolve(g, at=("crashed",)) for g in shards_first)
    )
    report = explore(scenario, spec, attrs.evolve(FAST, kinds=(CrashKind.POWER_LOSS,)))
    assert "DCP-SHARDS-BEFORE-MANIFEST" in report.violated_guarantees()
    # the shipped machine passes the same judgement
    shipped = _JudgedWhenCrashed("shipped", target=2, with_data=False)
    assert (
        explore(shipped, spec, attrs.evolve(FAST, kinds=(CrashKind.POWER_LOSS,))).violations == []
    )


class _JudgedWhenCrashed(DcpSaveScenario):
    """Judged right after the crash only (recovery is not what the variant gets wrong)."""

    def recover(self, world: SimWorld) -> None:  # type: ignore[override]
        return None
