"""The crash harness proves specs/unit_seal.toml and specs/unit_prune.toml on the shipped
machines (a slot's second generation, a framework folder adopted, a refused seal, a prune), and
catches the deliberately wrong variants: the commit manifest before the files are durable, a
framework's files adopted without fsync, the replaced unit retired before the commit, and a
prune that deletes files before it invalidates."""

from __future__ import annotations

import tomllib

import attrs

from statecraft.checkpoint.kernel.machines import machine_bindings
from statecraft.checkpoint.units import prune_unit, unit_files
from statecraft.checkpoint.units.prune_bindings import UnitPruneContext
from statecraft.checkpoint.units.seal_bindings import UnitSealContext
from statecraft.cli import main
from statecraft.cli.crashcheck import crashcheck
from statecraft.engine import Bindings, Machine, load_spec, parse_table
from statecraft.proofs import ExploreOptions, explore
from statecraft.proofs.units.scenarios import (
    UnitScenario,
    unit_prune_scenarios,
    unit_seal_scenarios,
)
from statecraft.resources import machine_path, spec_path
from statecraft.storage import CrashKind

SEAL_SPEC = load_spec(spec_path("unit_seal"))
PRUNE_SPEC = load_spec(spec_path("unit_prune"))
KILL_AND_POWER = ExploreOptions(
    extra_subsets=0, faults=False, kinds=(CrashKind.PROCESS_KILL, CrashKind.POWER_LOSS)
)


def _table(name: str, swap: tuple[str, str] | None = None) -> dict:
    data = tomllib.loads(machine_path(name).read_text())
    if swap is not None:
        a, b = swap
        for t in data["transitions"]:
            if t["do"] == a:
                t["do"] = b
            elif t["do"] == b:
                t["do"] = a
    return data


def _machine(name: str, data: dict, **effects) -> Machine:
    bindings = machine_bindings(name)
    if effects:
        bindings = bindings.merged(Bindings(effects=effects))
    return Machine(parse_table(data, source=f"broken {name} table"), bindings)


def manifest_before_durable() -> Machine:
    """The wrong seal: the commit manifest is created before the files are made durable."""
    return _machine("unit_seal", _table("unit_seal", ("make_files_durable", "commit_manifest")))


def adopt_without_fsync() -> Machine:
    """The wrong seal: a framework's files are trusted durable (the step that fsyncs them does
    nothing), what a commit marker written beside unsynced files amounts to."""
    return _machine("unit_seal", _table("unit_seal"), make_files_durable=lambda ctx: None)


def _trusting_retire(ctx: UnitSealContext) -> None:
    """Broken: retires without checking that the unit is committed."""
    for other in ctx.retire:
        prune_unit(ctx.store, other)


def retire_before_commit() -> Machine:
    """The wrong seal: the replaced generation is pruned before the new one is written."""
    data = _table("unit_seal", ("write_payloads", "retire_units"))
    return _machine(
        "unit_seal",
        data,
        retire_units=_trusting_retire,
        write_payloads=machine_bindings("unit_seal").effects["write_payloads"],
    )


def _rmtree_files_first(ctx: UnitPruneContext) -> None:
    """Broken: deletes the unit's files (what shutil.rmtree does, in listing order) while the
    commit manifest is still there."""
    for name in unit_files(ctx.store, ctx.unit):
        ctx.store.delete(f"{ctx.unit}/{name}")
    ctx.store.delete_tree(ctx.unit)


def delete_before_invalidate() -> Machine:
    """The wrong prune: files go first, the manifest last."""
    return _machine(
        "unit_prune", _table("unit_prune", ("invalidate", "delete_files")),
        delete_files=_rmtree_files_first,
    )  # fmt: skip


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
            "framework-folder-adopted-beside-an-older-one", machine_factory=manifest_before_durable
        )
        report = explore(broken, SEAL_SPEC, KILL_AND_POWER)
        assert "US-COMMIT-COMPLETE" in report.violated_guarantees()
        assert {v.kind for v in report.violations} == {"power_loss"}

    def test_framework_files_adopted_without_fsync(self) -> None:
        """The Trainer writes without fsync: a commit over its unsynced files is caught."""
        broken = seal_scenario(
            "framework-folder-adopted-beside-an-older-one", machine_factory=adopt_without_fsync
        )
        report = explore(broken, SEAL_SPEC, KILL_AND_POWER)
        assert "US-COMMIT-COMPLETE" in report.violated_guarantees()
        kinds = {v.kind for v in report.violations}
        assert kinds == {"power_loss"}, kinds  # a process kill keeps the page cache

    def test_replaced_generation_retired_before_the_commit(self) -> None:
        broken = seal_scenario(
            "slot-second-generation-retires-the-first", machine_factory=retire_before_commit
        )
        caught = explore(broken, SEAL_SPEC, KILL_AND_POWER).violated_guarantees()
        assert {"US-RETIRE-AFTER-COMMIT", "US-ONE-COMMITTED"} <= caught, caught

    def test_prune_deleting_files_before_the_manifest(self) -> None:
        (scenario,) = unit_prune_scenarios()
        broken = attrs.evolve(scenario, machine_factory=delete_before_invalidate)
        report = explore(broken, PRUNE_SPEC, KILL_AND_POWER)
        assert "UP-NEVER-HALF" in report.violated_guarantees()
        first = next(v for v in report.violations if v.guarantee == "UP-NEVER-HALF")
        assert "looks committed" in first.message

    def test_the_shipped_tables_are_not_the_broken_ones(self) -> None:
        """Premise: each broken variant differs from the shipped table it breaks."""
        shipped = _table("unit_seal")
        assert _table("unit_seal", ("make_files_durable", "commit_manifest")) != shipped
        assert _table("unit_prune", ("invalidate", "delete_files")) != _table("unit_prune")

    def test_cli_crashcheck_runs_the_unit_prune_machine(self, capsys) -> None:
        assert main(["crashcheck", "--machine", "unit_prune", "--extra-subsets", "0"]) == 0
        assert "unit_prune" in capsys.readouterr().out
