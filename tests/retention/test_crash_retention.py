"""The crash harness proves specs/retention.toml on the shipped retention machine, and catches
every deliberately broken variant: deleting files before invalidating, removing the manifest
before the marker, pruning before marking, pruning what latest names, pruning what is not
uploaded, a rerun that deletes what it should prune or forgets an interrupted deletion, sweeping
checkpoint_artifacts/, trusting a marker a killed pass left (the variants live in
statecraft/proofs/retention/broken.py, declared by the spec; a harness that cannot fail would
prove nothing)."""

from __future__ import annotations

import pytest

from statecraft.checkpoint.kernel.retention_records import RetentionAction
from statecraft.cli.crashcheck import crashcheck
from statecraft.engine import load_spec
from statecraft.proofs import ExploreOptions, explore
from statecraft.proofs.retention import broken
from statecraft.proofs.retention.scenarios import RetentionScenario, retention_scenarios
from statecraft.resources import spec_path
from statecraft.storage import CrashKind, SimWorld

SPEC = load_spec(spec_path("retention"))
FAST = ExploreOptions(extra_subsets=0, faults=False)

KEEP, WEIGHTS_ONLY, DELETE = (
    RetentionAction.KEEP,
    RetentionAction.WEIGHTS_ONLY,
    RetentionAction.DELETE,
)


def scenario(name: str) -> RetentionScenario:
    return next(s for s in retention_scenarios() if s.name == name)


def only(variants: list[RetentionScenario]) -> RetentionScenario:
    (s,) = variants
    return s


class TestShippedMachine:
    @pytest.mark.slow
    def test_crashcheck_proves_retention_under_all_crash_kinds(self) -> None:
        """Every guarantee of the retention spec holds at every crash point of every scenario
        (process kill, power loss, node loss, injected I/O faults), and each is judged
        substantively somewhere; each scenario's checks run."""
        reports, scenario_reports = crashcheck(["retention"], ExploreOptions())
        (report,) = reports
        assert report.violations == (), report.violations[0].reproducer()
        assert report.vacuous == ()
        assert report.crash_states >= 1200
        substantive = dict.fromkeys((g.id for g in SPEC.guarantees), 0)
        for s in scenario_reports:
            assert s.crash_points > 0
            for g in SPEC.guarantees:
                assert s.checks_by_guarantee.get(g.id, 0) > 0, (s.scenario, g.id)
                substantive[g.id] += s.substantive_by_guarantee.get(g.id, 0)
        assert all(n > 0 for n in substantive.values()), substantive

    def test_every_reference_pass_decides_as_documented(self) -> None:
        """Each scenario's uncrashed pass ends recorded with the decision its name promises."""
        expected = {
            "keep-optim-last-1-over-3-partial-leftover": (
                {6: KEEP, 4: WEIGHTS_ONLY, 2: WEIGHTS_ONLY},
                ("iter_000000003",),
            ),
            "second-pass-after-a-recorded-one": (
                {8: KEEP, 6: WEIGHTS_ONLY, 4: WEIGHTS_ONLY, 2: WEIGHTS_ONLY},
                (),
            ),
            "keep-model-last-1-pending-validation": ({6: KEEP, 4: KEEP, 2: DELETE}, ()),
            "best-n-by-metric": ({6: KEEP, 4: DELETE, 2: KEEP}, ()),
            "require-uploaded": ({6: KEEP, 4: KEEP, 2: DELETE}, ()),
            "invalidated-leftover-finished": ({2: DELETE}, ()),
        }
        for s in retention_scenarios():
            world = SimWorld()
            s.setup(world)
            result = s.run(world, crash=None)
            assert result.final_state == "recorded", s.name
            reference = s.reference()
            assert {r.iteration: r.action for r in reference.rows} == expected[s.name][0], s.name
            assert reference.garbage == expected[s.name][1], s.name

    def test_pending_row_and_uploaded_rows_say_why(self) -> None:
        """The decision names why a kept iteration is kept (pending validation, not
        uploaded)."""
        pending = scenario("keep-model-last-1-pending-validation").reference().rows
        assert next(r for r in pending if r.iteration == 4).kept_by == ("validation pending",)
        gated = scenario("require-uploaded").reference().rows
        assert next(r for r in gated if r.iteration == 4).kept_by == ("not uploaded",)


class TestBrokenVariantsAreCaught:
    def test_delete_files_before_invalidating(self) -> None:
        """Files removed while the manifest stands and no marker exists: a half-deleted
        directory that looks committed is caught (RET-NO-HALF), and the order check sees it."""
        s = only(broken.delete_files_before_invalidating())
        violated = explore(s, SPEC, FAST).violated_guarantees()
        assert {"RET-NO-HALF", "RET-ORDER"} <= violated

    def test_manifest_removed_before_the_marker(self) -> None:
        """Decided: removing the manifest before the marker is refused by the contract (the
        marker is what tells an interrupted deletion from an interrupted save, and what a
        rerun finishes); the directory is never adoptable either way, so only the order check
        (RET-ORDER) catches it."""
        s = only(broken.manifest_removed_before_the_marker())
        violated = explore(s, SPEC, FAST).violated_guarantees()
        assert violated == {"RET-ORDER"}

    def test_prune_before_marking(self) -> None:
        """A table that removes optim.pt before the weights-only marker leaves a committed
        directory missing its optimizer without a marker."""
        s = only(broken.prune_before_marking())
        violated = explore(s, SPEC, FAST).violated_guarantees()
        assert {"RET-NO-HALF", "RET-ORDER"} <= violated

    def test_prune_the_newest(self) -> None:
        """A decision that prunes the newest committed checkpoint is caught: it is not whole,
        latest names a pruned directory, no exact-resume checkpoint is left, resume fails."""
        s = only(broken.prune_the_latest())
        violated = explore(s, SPEC, FAST).violated_guarantees()
        assert {"RET-NEWEST", "RET-LATEST", "RET-NEVER-ZERO"} <= violated
        assert violated & {"RET-RESUME", "RECOVERY"}

    def test_trusting_a_marker_a_killed_pass_left(self) -> None:
        """A rerun that trusts a weights-only marker it finds (instead of publishing it again)
        prunes under a marker a failed directory fsync lost for good: after the next power
        loss the directory holds its manifest, no marker and no optim.pt."""
        s = only(broken.trusting_a_marker_a_killed_pass_left())
        options = ExploreOptions(kinds=(CrashKind.PROCESS_KILL,), extra_subsets=0, faults=True)
        violated = explore(s, SPEC, options).violated_guarantees()
        assert "RET-NO-HALF" in violated

    def test_prune_not_uploaded(self) -> None:
        """With require_uploaded, a decision that deletes an iteration without .uploaded is
        caught (RET-UPLOADED)."""
        violated = explore(only(broken.prune_not_uploaded()), SPEC, FAST).violated_guarantees()
        assert "RET-UPLOADED" in violated

    def test_rerun_deletes_what_it_should_prune(self) -> None:
        """A rerun that takes a weights-only marker for an invalidation deletes a model.pt the
        decision keeps (RET-KEPT)."""
        s = only(broken.weights_only_marker_read_as_invalidation())
        assert "RET-KEPT" in explore(s, SPEC, FAST).violated_guarantees()

    def test_rerun_forgets_an_interrupted_deletion(self) -> None:
        """A rerun that does not finish an announced deletion misses the decided end state
        (RET-RERUN)."""
        s = only(broken.rerun_forgets_an_interrupted_deletion())
        assert "RET-RERUN" in explore(s, SPEC, FAST).violated_guarantees()

    def test_artifacts_swept_as_garbage(self) -> None:
        """A sweep that reaches checkpoint_artifacts/ is caught (RET-ARTIFACTS)."""
        s = only(broken.artifacts_swept_as_garbage())
        assert "RET-ARTIFACTS" in explore(s, SPEC, FAST).violated_guarantees()
