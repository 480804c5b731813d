"""The crash harness proves specs/upload.toml on the shipped upload machine under every crash
kind, and catches each deliberately broken variant (a harness that cannot fail proves
nothing)."""

from __future__ import annotations

import tomllib

import attrs

from statecraft.checkpoint.archive import upload_bindings
from statecraft.checkpoint.kernel.machines import load_machine, machine_bindings
from statecraft.cli.crashcheck import crashcheck
from statecraft.engine import Bindings, Machine, load_spec, parse_table
from statecraft.proofs import ExploreOptions, explore
from statecraft.proofs.archive.upload_scenarios import (
    UploadScenario,
    upload_context,
    upload_scenarios,
)
from statecraft.resources import machine_path, spec_path
from statecraft.storage import SimWorld

SPEC = load_spec(spec_path("upload"))
FAST = ExploreOptions(extra_subsets=0, faults=False)


def _with_bindings(**effects) -> Machine:
    bindings = machine_bindings("upload").merged(Bindings(effects=effects))
    return Machine(load_machine("upload").table, bindings)


def _swapped(first: str, second: str) -> Machine:
    """The upload table with the effects of two transitions exchanged."""
    data = tomllib.loads(machine_path("upload").read_text())
    a = next(t for t in data["transitions"] if t["do"] == first)
    b = next(t for t in data["transitions"] if t["do"] == second)
    a["do"], b["do"] = b["do"], a["do"]
    return Machine(parse_table(data, source="broken upload table"), machine_bindings("upload"))


def _scenario(name: str, machine: Machine) -> UploadScenario:
    base = next(s for s in upload_scenarios() if s.name == name)
    return attrs.evolve(base, name=f"broken-{name}", machine_factory=lambda: machine)


def _receipt_first(ctx) -> None:
    """Broken upload_files: the receipt is written before anything is uploaded."""
    upload_bindings.write_receipt(ctx)
    upload_bindings.upload_files(ctx)


def _manifest_first(ctx) -> None:
    """Broken upload_files: the manifest goes first, then the other files."""
    by_path = {e.path: e for e in ctx.entries}
    for path in [".posttrain-manifest.json", *sorted(p for p in by_path if p[0] != ".")]:
        upload_bindings._put(ctx, by_path[path])


def _skip_by_name(ctx) -> None:
    """Broken upload_files: an object that exists remotely is skipped whatever its size."""
    for entry in ctx.entries:
        if entry.path == ".posttrain-manifest.json":
            continue
        key = ctx.key(entry.path)
        if ctx.destination.bucket.stat(key) is None:
            ctx.destination.bucket.upload_from(key, ctx.store, f"{ctx.iter_dir}/{entry.path}")


def _always_put(ctx) -> None:
    """Broken upload_files: no HEAD first, every file is PUT again."""
    for entry in ctx.entries:
        if entry.path != ".posttrain-manifest.json":
            key = ctx.key(entry.path)
            ctx.destination.bucket.upload_from(key, ctx.store, f"{ctx.iter_dir}/{entry.path}")


def _receipt_then_free_space(ctx) -> None:
    """Broken write_receipt: the archived optimizer state is removed locally ("it is remote
    now")."""
    upload_bindings.write_receipt(ctx)
    ctx.store.delete(f"{ctx.iter_dir}/optim.pt")


class TestShippedMachine:
    def test_crashcheck_proves_the_upload_spec_under_all_crash_kinds(self) -> None:
        """Every upload guarantee holds at every crash point of every scenario, under process
        kill, power loss and node loss, with injected request and I/O faults; and every
        guarantee is judged substantively somewhere."""
        (report,), scenario_reports = crashcheck(["upload"], ExploreOptions())
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
        machine = _swapped("upload_manifest", "write_receipt")
        report = explore(_scenario("fresh-upload", machine), SPEC, FAST)
        assert "UPL-MARKER-VERIFIED" in report.violated_guarantees()

    def test_manifest_uploaded_first(self) -> None:
        """An upload that sends the manifest before the files it lists is caught."""
        machine = _with_bindings(upload_files=_manifest_first)
        report = explore(_scenario("fresh-upload", machine), SPEC, FAST)
        assert "UPL-MANIFEST-LAST" in report.violated_guarantees()

    def test_local_bulk_removed_after_the_upload(self) -> None:
        """An upload that frees local space once archived is caught."""
        machine = _with_bindings(write_receipt=_receipt_then_free_space)
        report = explore(_scenario("fresh-upload", machine), SPEC, FAST)
        assert "UPL-LOCAL-UNTOUCHED" in report.violated_guarantees()

    def test_skip_by_name_only(self) -> None:
        """A skip that trusts a remote name without its size keeps a stale object of other
        bytes under the manifest that lists it (caught: the remote manifest names a file of
        another size)."""
        machine = _with_bindings(upload_files=_skip_by_name)
        report = explore(
            _scenario("bulk-unhashed-over-stale-and-partial-remote", machine), SPEC, FAST
        )
        assert "UPL-MANIFEST-LAST" in report.violated_guarantees()

    def test_every_file_put_again(self) -> None:
        """An upload without the HEAD-first skip re-sends what a crashed run already
        uploaded (caught by counting the retry's PUTs)."""
        machine = _with_bindings(upload_files=_always_put)
        report = explore(_scenario("fresh-upload", machine), SPEC, FAST)
        assert "UPL-IDEMPOTENT" in report.violated_guarantees()

    def test_receipt_written_first_lets_retention_prune(self) -> None:
        """A receipt written before the upload lets retention prune a checkpoint whose
        archive is incomplete (caught by running retention after the crash)."""
        machine = _with_bindings(upload_files=_receipt_first)
        scenario = _scenario("older-checkpoint-then-retention-require-uploaded", machine)
        report = explore(scenario, SPEC, FAST)
        assert "UPL-NEVER-PRUNED" in report.violated_guarantees()
