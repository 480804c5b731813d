"""The crash harness proves specs/artifact.toml on the shipped artifact machine under every
crash kind, and catches each deliberately broken variant (statecraft/proofs/artifacts/broken.py,
declared by the spec; a harness that cannot fail proves nothing)."""

from __future__ import annotations

from statecraft.checkpoint.kernel.artifact_verify import verify_artifact
from statecraft.cli.crashcheck import crashcheck
from statecraft.engine import load_spec
from statecraft.proofs import ExploreOptions, explore
from statecraft.proofs.artifacts import broken
from statecraft.proofs.artifacts.scenarios import (
    ARTIFACTS_ROOT,
    ArtifactScenario,
    artifact_scenarios,
)
from statecraft.resources import spec_path
from statecraft.storage import SimWorld

SPEC = load_spec(spec_path("artifact"))
FAST = ExploreOptions(extra_subsets=0, faults=False)


def only(variants: list[ArtifactScenario]) -> ArtifactScenario:
    (s,) = variants
    return s


class TestShippedMachine:
    def test_crashcheck_proves_the_artifact_spec_under_all_crash_kinds(self) -> None:
        """Every artifact guarantee holds at every crash point of every scenario, under
        process kill, power loss and node loss, with injected I/O faults; and every guarantee
        is judged substantively somewhere."""
        (report,), scenario_reports = crashcheck(["artifact"], ExploreOptions())
        assert report.violations == (), report.violations[0].reproducer()
        assert report.vacuous == ()
        assert report.crash_states >= 1000
        substantive = {g.id: 0 for g in SPEC.guarantees}
        for s in scenario_reports:
            assert s.crash_points > 0
            for g_id, n in s.substantive_by_guarantee.items():
                substantive[g_id] += n
        assert all(n > 0 for n in substantive.values()), substantive

    def test_reference_runs_end_as_each_scenario_intends(self) -> None:
        """Each scenario's uncrashed run ends where it should: committed (and verifiable),
        a failed validation after the commit, a failed evaluation first, or a refusal."""
        expected = {
            "cadence-artifact-then-validation-fails": "validation_failed",
            "validation-only-partial-fails-then-retry-passes": "evaluation_failed",
            "second-save-to-committed-step": "refused",
            "damaged-artifact-manifest": "refused",
            "full-checkpoint-manifest-in-artifact-dir": "refused",
        }
        for scenario in artifact_scenarios():
            world = SimWorld()
            scenario.setup(world)
            result = scenario.run(world, crash=None)
            assert result.final_state == expected.get(scenario.name, "committed"), scenario.name
            if result.final_state in ("committed", "validation_failed"):
                verify_artifact(world.local_store(ARTIFACTS_ROOT), scenario.target)


class TestBrokenVariantsAreCaught:
    def test_manifest_committed_before_the_payload_files(self) -> None:
        """A save that commits the manifest before writing the files it lists is caught: a
        crash in between leaves a manifest naming missing files."""
        report = explore(only(broken.manifest_committed_before_the_payload_files()), SPEC, FAST)
        assert "ART-COMMIT-LAST" in report.violated_guarantees()

    def test_cadence_validation_moved_before_the_commit(self) -> None:
        """A table that runs the cadence artifact's ephemeral validation before the commit is
        caught: the failed validation discards the due artifact."""
        report = explore(only(broken.cadence_validation_moved_before_the_commit()), SPEC, FAST)
        assert "ART-CADENCE-KEPT" in report.violated_guarantees()

    def test_committed_artifact_taken_for_leftovers(self) -> None:
        """An observation that takes a committed artifact for leftovers (so the save clears
        and rewrites it) is caught."""
        report = explore(only(broken.committed_artifact_taken_for_leftovers()), SPEC, FAST)
        assert "ART-NEVER-RECOMMITTED" in report.violated_guarantees()

    def test_evaluation_first_ignored(self) -> None:
        """Guards that treat an artifact requested by validation alone like a cadence one
        (commit, then evaluate) are caught: a failed evaluation leaves it committed."""
        report = explore(only(broken.evaluation_first_ignored()), SPEC, FAST)
        assert "ART-EVALUATE-FIRST" in report.violated_guarantees()

    def test_manifest_published_by_replace(self) -> None:
        """A manifest published by rename instead of exclusive link is caught."""
        report = explore(only(broken.manifest_published_by_replace()), SPEC, FAST)
        assert "ART-EXCLUSIVE" in report.violated_guarantees()

    def test_artifact_moves_latest(self) -> None:
        """An artifact commit that moves latest_checkpoint.txt is caught."""
        report = explore(only(broken.artifact_moves_latest()), SPEC, FAST)
        assert "ART-NEVER-CHECKPOINT" in report.violated_guarantees()

    def test_saved_as_a_full_checkpoint(self) -> None:
        """An artifact saved as a full checkpoint under checkpoints/ is caught: it writes
        outside checkpoint_artifacts/, and resume adopts a step the setup never committed."""
        report = explore(only(broken.saved_as_a_full_checkpoint()), SPEC, FAST)
        violated = report.violated_guarantees()
        assert {"ART-NEVER-CHECKPOINT", "ART-RESUME-NEVER-ADOPTS"} <= violated
        messages = [
            v.message for v in report.violations if v.guarantee == "ART-RESUME-NEVER-ADOPTS"
        ]
        assert any("never committed as a full checkpoint" in m for m in messages), messages

    def test_manifest_written_in_place(self) -> None:
        """A manifest written in place (no complete temporary linked into place) leaves a torn
        commit record after a crash mid-write, which the retry refuses: caught."""
        report = explore(only(broken.manifest_written_in_place()), SPEC, FAST)
        assert {"ART-RETRY-FINISHES", "ART-EXCLUSIVE"} <= report.violated_guarantees()
