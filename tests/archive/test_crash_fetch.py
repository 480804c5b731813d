"""The crash harness proves specs/fetch.toml on the shipped fetch machine under every crash
kind, and catches each deliberately broken variant (a harness that cannot fail proves
nothing)."""

from __future__ import annotations

import tomllib

import attrs

from statecraft.checkpoint.kernel.machines import load_machine, machine_bindings
from statecraft.cli.crashcheck import crashcheck
from statecraft.engine import Bindings, Machine, load_spec, parse_table
from statecraft.errors import ArchiveError
from statecraft.proofs import ExploreOptions, explore
from statecraft.proofs.archive.fetch_scenarios import DST_ROOT, FetchScenario, fetch_scenarios
from statecraft.proofs.pool import default_jobs
from statecraft.resources import machine_path, spec_path
from statecraft.storage import SimWorld

SPEC = load_spec(spec_path("fetch"))
FAST = ExploreOptions(extra_subsets=0, faults=False)


def _scenario(name: str, **changes) -> FetchScenario:
    base = next(s for s in fetch_scenarios() if s.name == name)
    return attrs.evolve(base, name=f"broken-{name}", **changes)


def _with_bindings(**effects) -> Machine:
    bindings = machine_bindings("fetch").merged(Bindings(effects=effects))
    return Machine(load_machine("fetch").table, bindings)


def _placed_before_verified() -> Machine:
    """The fetch table with the proof and the move exchanged: the staged copy is renamed
    into place first, then 'verified'."""
    data = tomllib.loads(machine_path("fetch").read_text())
    verify = next(t for t in data["transitions"] if t["do"] == "verify_staged")
    place = next(t for t in data["transitions"] if t["do"] == "place_fetched")
    verify["do"], place["do"] = place["do"], verify["do"]
    return Machine(parse_table(data, source="broken fetch table"), machine_bindings("fetch"))


def _size_only(ctx) -> None:
    """Broken verify_staged: sizes only, no sha256 and no manifest digests."""
    for entry in ctx.entries:
        stat = ctx.dst.stat(ctx.staged(entry.path))
        if stat is None or stat.size != entry.size:
            raise ArchiveError(ctx.source(entry.path), "wrong size")


def _overwrite(ctx) -> str:
    """Broken observe: an existing destination is taken for absent (and moved over)."""
    return "absent"


def _replace_existing(ctx) -> None:
    """Broken place: clears an existing destination, then moves the staged copy there."""
    if ctx.dst.stat(ctx.name) is not None:
        ctx.dst.delete_tree(ctx.name)
    ctx.dst.rename_dir(ctx.staged(), ctx.name)


class TestShippedMachine:
    def test_crashcheck_proves_the_fetch_spec_under_all_crash_kinds(self) -> None:
        """Every fetch guarantee holds at every crash point of every scenario, under process
        kill, power loss and node loss, with injected I/O faults; each guarantee is judged
        substantively somewhere."""
        (report,), scenario_reports = crashcheck(["fetch"], ExploreOptions(), jobs=default_jobs())
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
        """Each uncrashed fetch places the archive byte for byte, or fails (tampered), or
        refuses (existing destination) without changing it."""
        expected = {
            "tampered-artifact-payload": "failed",
            "tampered-checkpoint-payload": "failed",
            "existing-destination": "refused",
        }
        for scenario in fetch_scenarios():
            world = SimWorld()
            scenario.setup(world)
            result = scenario.run(world, crash=None)
            assert result.final_state == expected.get(scenario.name, "placed"), scenario.name
            target = f"{DST_ROOT}/{scenario.dest_name}"
            if result.final_state == "placed":
                assert world.fs.tree(target) == scenario.expected
            elif scenario.existing:
                assert world.fs.tree(target) == scenario.existing_tree
            else:
                assert world.fs.stat(target) is None
            assert [n for n in world.fs.listdir(DST_ROOT) if ".fetch-" in n] == []


class TestBrokenVariantsAreCaught:
    def test_moved_into_place_before_the_proof(self) -> None:
        """A table that renames the staged copy into place before proving it is caught: a
        tampered payload lands at the destination."""
        machine = _placed_before_verified()
        scenario = _scenario("tampered-artifact-payload", machine_factory=lambda: machine)
        report = explore(scenario, SPEC, FAST)
        assert "FET-NEVER-PLACED-UNVERIFIED" in report.violated_guarantees()

    def test_sha256_check_skipped(self) -> None:
        """A proof that checks sizes only is caught: the same-size tampered payload is
        placed."""
        machine = _with_bindings(verify_staged=_size_only)
        scenario = _scenario("tampered-artifact-payload", machine_factory=lambda: machine)
        report = explore(scenario, SPEC, FAST)
        assert "FET-NEVER-PLACED-UNVERIFIED" in report.violated_guarantees()

    def test_existing_destination_replaced(self) -> None:
        """A fetch that takes an existing destination for absent and replaces it is caught."""
        base = _with_bindings(place_fetched=_replace_existing)
        machine = Machine(
            base.table, base.bindings.merged(Bindings(observers={"observe_fetch": _overwrite}))
        )
        scenario = _scenario("existing-destination", machine_factory=lambda: machine)
        report = explore(scenario, SPEC, FAST)
        assert "FET-NO-OVERWRITE" in report.violated_guarantees()
