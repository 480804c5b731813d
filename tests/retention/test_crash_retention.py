"""The crash harness proves specs/retention.toml on the shipped retention machine, and catches
every deliberately broken variant: deleting files before invalidating, removing the manifest
before the marker, pruning before marking, pruning the newest, trusting a marker a killed pass
left (a harness that cannot fail would prove nothing)."""

from __future__ import annotations

import tomllib

import attrs
import pytest

from statecraft.checkpoint.kernel.layout import MANIFEST_NAME, iter_dirname
from statecraft.checkpoint.kernel.machines import load_machine, machine_bindings
from statecraft.checkpoint.kernel.retention_records import (
    INVALIDATED_MARKER,
    WEIGHTS_ONLY_MARKER,
    DecisionRow,
    InvalidatedRecord,
    RetentionAction,
    WeightsOnlyRecord,
)
from statecraft.checkpoint.retention import bindings
from statecraft.checkpoint.retention.scan import OPTIMIZER_ENTRIES
from statecraft.cli.crashcheck import crashcheck
from statecraft.engine import Bindings, Machine, load_spec, parse_table
from statecraft.proofs import ExploreOptions, explore
from statecraft.proofs.retention.scenarios import RetentionScenario, retention_scenarios
from statecraft.resources import machine_path, spec_path
from statecraft.storage import CrashKind, SimWorld

SPEC = load_spec(spec_path("retention"))
FAST = ExploreOptions(extra_subsets=0, faults=False)

KEEP, WEIGHTS_ONLY, DELETE = (
    RetentionAction.KEEP,
    RetentionAction.WEIGHTS_ONLY,
    RetentionAction.DELETE,
)


def scenario(name: str, machine: Machine | None = None) -> RetentionScenario:
    found = next(s for s in retention_scenarios() if s.name == name)
    return found if machine is None else attrs.evolve(found, machine_factory=lambda: machine)


def with_effects(**effects) -> Machine:
    merged = machine_bindings("retention").merged(Bindings(effects=effects))
    return Machine(load_machine("retention").table, merged)


def with_swapped_effects(a: str, b: str) -> Machine:
    data = tomllib.loads(machine_path("retention").read_text())
    for t in data["transitions"]:
        t["do"] = {a: b, b: a}.get(t["do"], t["do"])
    table = parse_table(data, source="broken retention table")
    return Machine(table, machine_bindings("retention"))


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


def _delete_files_first(ctx) -> None:
    """Broken: the bulk files go before the marker and the manifest."""
    store = ctx.fenced
    for it in ctx.to_delete:
        name = iter_dirname(it)
        for child in ("model.pt", "optim.pt", "trainer.pt"):
            store.delete(f"{name}/{child}")
        marker = InvalidatedRecord(it, "broken").encode()
        if INVALIDATED_MARKER not in ctx.store.list(name):
            store.create_exclusive(f"{name}/{INVALIDATED_MARKER}", marker)
        store.delete(f"{name}/{MANIFEST_NAME}")


def _manifest_before_marker(ctx) -> None:
    """Broken (or not? the order the contract fixes): the manifest goes before the marker."""
    store = ctx.fenced
    for it in ctx.to_delete:
        name = iter_dirname(it)
        store.delete(f"{name}/{MANIFEST_NAME}")
        if INVALIDATED_MARKER not in ctx.store.list(name):
            store.create_exclusive(
                f"{name}/{INVALIDATED_MARKER}", InvalidatedRecord(it, "broken").encode()
            )


def _decide_and_prune_the_newest(ctx) -> None:
    """Broken: the newest committed is given to retention as weights-only too."""
    bindings.decide(ctx)
    newest = max(ctx.scan.committed)
    ctx.to_prune = (*ctx.to_prune, newest)
    ctx.rows = tuple(
        DecisionRow(r.iteration, WEIGHTS_ONLY, r.kept_by, "broken") if r.iteration == newest else r
        for r in ctx.rows
    )


def _mark_trusting_a_found_marker(ctx) -> None:
    """Broken: a marker found on disk is trusted as durable (a killed pass, or a failed
    directory fsync, may have left it visible but never durable)."""
    store = ctx.fenced
    for it in ctx.to_prune:
        name = iter_dirname(it)
        if WEIGHTS_ONLY_MARKER in ctx.store.list(name):
            continue
        record = WeightsOnlyRecord(it, OPTIMIZER_ENTRIES, "broken").encode()
        store.create_exclusive(f"{name}/{WEIGHTS_ONLY_MARKER}", record)


class TestBrokenVariantsAreCaught:
    def test_delete_files_before_invalidating(self) -> None:
        """Files removed while the manifest stands and no marker exists: a half-deleted
        directory that looks committed is caught (RET-NO-HALF), and the order check sees it."""
        s = scenario("require-uploaded", with_effects(invalidate=_delete_files_first))
        violated = explore(s, SPEC, FAST).violated_guarantees()
        assert {"RET-NO-HALF", "RET-ORDER"} <= violated

    def test_manifest_removed_before_the_marker(self) -> None:
        """Decided: removing the manifest before the marker is refused by the contract (the
        marker is what tells an interrupted deletion from an interrupted save, and what a
        rerun finishes); the directory is never adoptable either way, so only the order check
        (RET-ORDER) catches it."""
        s = scenario("require-uploaded", with_effects(invalidate=_manifest_before_marker))
        violated = explore(s, SPEC, FAST).violated_guarantees()
        assert violated == {"RET-ORDER"}

    def test_prune_before_marking(self) -> None:
        """A table that removes optim.pt before the weights-only marker leaves a committed
        directory missing its optimizer without a marker."""
        s = scenario(
            "keep-optim-last-1-over-3-partial-leftover",
            with_swapped_effects("mark_weights_only", "prune_optimizer"),
        )
        violated = explore(s, SPEC, FAST).violated_guarantees()
        assert {"RET-NO-HALF", "RET-ORDER"} <= violated

    def test_prune_the_newest(self) -> None:
        """A decision that prunes the newest committed checkpoint is caught: it is not whole,
        latest names a pruned directory, no exact-resume checkpoint is left, resume fails."""
        s = scenario(
            "keep-optim-last-1-over-3-partial-leftover",
            with_effects(decide=_decide_and_prune_the_newest),
        )
        violated = explore(s, SPEC, FAST).violated_guarantees()
        assert {"RET-NEWEST", "RET-LATEST", "RET-NEVER-ZERO"} <= violated
        assert violated & {"RET-RESUME", "RECOVERY"}

    def test_trusting_a_marker_a_killed_pass_left(self) -> None:
        """A rerun that trusts a weights-only marker it finds (instead of publishing it again)
        prunes under a marker a failed directory fsync lost for good: after the next power
        loss the directory holds its manifest, no marker and no optim.pt."""
        s = scenario(
            "keep-optim-last-1-over-3-partial-leftover",
            with_effects(mark_weights_only=_mark_trusting_a_found_marker),
        )
        options = ExploreOptions(kinds=(CrashKind.PROCESS_KILL,), extra_subsets=0, faults=True)
        violated = explore(s, SPEC, options).violated_guarantees()
        assert "RET-NO-HALF" in violated
