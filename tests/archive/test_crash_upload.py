"""The crash harness proves specs/upload.toml on the shipped upload machine under every crash
kind, and catches each deliberately broken variant (statecraft/proofs/archive/upload_broken.py,
declared by the spec; a harness that cannot fail proves nothing)."""

from __future__ import annotations

from statecraft.cli.crashcheck import crashcheck
from statecraft.engine import load_spec
from statecraft.proofs import ExploreOptions, explore
from statecraft.proofs.archive import upload_broken as broken
from statecraft.proofs.archive.upload_scenarios import (
    UploadScenario,
    upload_context,
    upload_scenarios,
)
from statecraft.proofs.pool import default_jobs
from statecraft.resources import spec_path
from statecraft.storage import SimWorld

SPEC = load_spec(spec_path("upload"))
FAST = ExploreOptions(extra_subsets=0, faults=False)


def only(variants: list[UploadScenario]) -> UploadScenario:
    (s,) = variants
    return s


class TestShippedMachine:
    def test_crashcheck_proves_the_upload_spec_under_all_crash_kinds(self) -> None:
        """Every upload guarantee holds at every crash point of every scenario, under process
        kill, power loss and node loss, with injected request and I/O faults; and every
        guarantee is judged substantively somewhere."""
        (report,), scenario_reports = crashcheck(["upload"], ExploreOptions(), jobs=default_jobs())
        assert report.violations == (), report.violations[0].reproducer()
        assert report.vacuous == ()
        assert report.crash_states >= 400
        substantive = {g.id: 0 for g in SPEC.guarantees}
        for s in scenario_reports:
            for g_id, n in s.substantive_by_guarantee.items():
                substantive[g_id] += n
        assert all(n > 0 for n in substantive.values()), substantive

    def test_reference_runs_upload_and_skip_what_matches(self) -> None:
        """Each scenario's uncrashed run ends uploaded; the partial remote is completed (the
        matching object skipped, the stale one replaced); a found receipt uploads nothing."""
        for scenario in upload_scenarios():
            world = SimWorld()
            scenario.setup(world)
            ctx = upload_context(world, scenario.target, hash_limit=scenario.hash_limit)
            result = scenario.machine_factory().recover(ctx)
            assert result.final_state == "uploaded", (scenario.name, result.error)
            assert ctx.marker is not None
            assert len(ctx.marker.files) == 4
            if scenario.name.startswith("bulk-unhashed"):
                assert (ctx.uploaded, ctx.skipped) == (3, 1)
                # bulk is recorded without sha256; the control files with one
                by = {e.path: e.sha256 for e in ctx.marker.files}
                assert by["model.pt"] is None
                assert by["trainer.pt"] is not None
            if scenario.uploaded_before:
                assert ctx.uploaded == 0
                assert result.observed == "uploaded"


class TestBrokenVariantsAreCaught:
    def test_receipt_before_the_manifest_is_uploaded(self) -> None:
        """A table that writes the receipt before the manifest's upload and the verification
        is caught: a crash in between leaves a receipt listing a missing object."""
        report = explore(only(broken.receipt_before_every_part_verified()), SPEC, FAST)
        assert "UPL-MARKER-VERIFIED" in report.violated_guarantees()

    def test_manifest_uploaded_first(self) -> None:
        """An upload that sends the manifest before the files it lists is caught."""
        report = explore(only(broken.manifest_uploaded_first()), SPEC, FAST)
        assert "UPL-MANIFEST-LAST" in report.violated_guarantees()

    def test_local_bulk_removed_after_the_upload(self) -> None:
        """An upload that frees local space once archived is caught."""
        report = explore(only(broken.local_bulk_removed_after_the_upload()), SPEC, FAST)
        assert "UPL-LOCAL-UNTOUCHED" in report.violated_guarantees()

    def test_skip_by_name_only(self) -> None:
        """A skip that trusts a remote name without its size keeps a stale object of other
        bytes under the manifest that lists it (caught: the remote manifest names a file of
        another size)."""
        report = explore(only(broken.skip_by_name_only()), SPEC, FAST)
        assert "UPL-MANIFEST-LAST" in report.violated_guarantees()

    def test_every_file_put_again(self) -> None:
        """An upload without the HEAD-first skip re-sends what a crashed run already
        uploaded (caught by counting the retry's PUTs)."""
        report = explore(only(broken.every_file_put_again()), SPEC, FAST)
        assert "UPL-IDEMPOTENT" in report.violated_guarantees()

    def test_receipt_written_first_lets_retention_prune(self) -> None:
        """A receipt written before the upload lets retention prune a checkpoint whose
        archive is incomplete (caught by running retention after the crash)."""
        report = explore(only(broken.receipt_first_lets_retention_prune()), SPEC, FAST)
        assert "UPL-NEVER-PRUNED" in report.violated_guarantees()
