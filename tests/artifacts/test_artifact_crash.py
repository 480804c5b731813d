"""The crash harness proves specs/artifact.toml on the shipped artifact machine under every
crash kind, and catches each deliberately broken variant (a harness that cannot fail proves
nothing)."""

from __future__ import annotations

import io
import tomllib

import attrs
import torch

from statecraft.checkpoint.kernel.artifact_manifest import (
    ARTIFACT_MANIFEST_SCHEMA,
    ArtifactManifest,
)
from statecraft.checkpoint.kernel.artifact_verify import verify_artifact
from statecraft.checkpoint.kernel.layout import ARTIFACT_MANIFEST_NAME
from statecraft.checkpoint.kernel.machines import load_machine, machine_bindings
from statecraft.checkpoint.kernel.manifest import FileEntry
from statecraft.cli.crashcheck import crashcheck
from statecraft.engine import Bindings, Machine, load_spec, parse_table
from statecraft.proofs import ExploreOptions, explore
from statecraft.proofs.artifacts.scenarios import (
    ARTIFACTS_ROOT,
    ArtifactScenario,
    artifact_scenarios,
)
from statecraft.resources import machine_path, spec_path
from statecraft.storage import SimWorld
from statecraft.storage.digest import Digest

SPEC = load_spec(spec_path("artifact"))
FAST = ExploreOptions(extra_subsets=0, faults=False)


def _validation_before_the_commit() -> Machine:
    """The artifact table with the cadence path's commit and ephemeral evaluation exchanged
    (``files_durable [evaluate_after]`` evaluates, then ``committed_unevaluated`` commits)."""
    data = tomllib.loads(machine_path("artifact").read_text())
    first = next(t for t in data["transitions"] if t.get("guard") == "evaluate_after")
    second = next(t for t in data["transitions"] if t["do"] == "evaluate_after_commit")
    first["do"], second["do"] = second["do"], first["do"]
    return Machine(parse_table(data, source="broken artifact table"), machine_bindings("artifact"))


def _with_bindings(**effects) -> Machine:
    bindings = machine_bindings("artifact").merged(Bindings(effects=effects))
    return Machine(load_machine("artifact").table, bindings)


def _manifest_before_files(ctx) -> None:
    """Broken write_files: the manifest (digests computed in memory) is committed first,
    then the files are written."""
    files = {}
    for name in ctx.files:
        buffer = io.BytesIO()
        torch.save(ctx.staged[name], buffer)
        data = buffer.getvalue()
        files[name] = (data, FileEntry(len(data), _digest(data)))
    manifest = ArtifactManifest(
        schema=ARTIFACT_MANIFEST_SCHEMA,
        iteration=ctx.iteration,
        format="consolidated",
        components=ctx.plan.components,
        physical=ctx.plan.physical,
        files={n: e for n, (_, e) in files.items()},
    )
    ctx.store.create_exclusive(ctx.path(ARTIFACT_MANIFEST_NAME), manifest.encode())
    for name, (data, _) in files.items():
        ctx.store.write_atomic(ctx.path(name), data)


def _digest(data: bytes) -> Digest:
    return Digest.of(data)


def _no_commit(ctx) -> None:
    """The manifest is written by the broken write_files already."""


def _overwrite_committed(ctx) -> str:
    """Broken observe: a committed artifact is taken for leftovers (and rewritten)."""
    from statecraft.checkpoint.artifacts.bindings import observe_artifact

    label = observe_artifact(ctx)
    return "partial" if label == "committed" else label


def _scenario(name: str, **changes) -> ArtifactScenario:
    base = next(s for s in artifact_scenarios() if s.name == name)
    return attrs.evolve(base, name=f"broken-{name}", calls=[], **changes)


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
        machine = _with_bindings(write_files=_manifest_before_files, commit_manifest=_no_commit)
        scenario = _scenario("model-artifact", machine_factory=lambda: machine)
        report = explore(scenario, SPEC, FAST)
        assert "ART-COMMIT-LAST" in report.violated_guarantees()

    def test_cadence_validation_moved_before_the_commit(self) -> None:
        """A table that runs the cadence artifact's ephemeral validation before the commit is
        caught: the failed validation discards the due artifact."""
        machine = _validation_before_the_commit()
        scenario = _scenario(
            "cadence-artifact-then-validation-fails", machine_factory=lambda: machine
        )
        report = explore(scenario, SPEC, FAST)
        assert "ART-CADENCE-KEPT" in report.violated_guarantees()

    def test_committed_artifact_taken_for_leftovers(self) -> None:
        """An observation that takes a committed artifact for leftovers (so the save clears
        and rewrites it) is caught."""
        machine = _with_bindings()
        machine = Machine(
            machine.table,
            machine.bindings.merged(Bindings(observers={"observe_artifact": _overwrite_committed})),
        )
        scenario = _scenario("second-save-to-committed-step", machine_factory=lambda: machine)
        report = explore(scenario, SPEC, FAST)
        assert "ART-NEVER-RECOMMITTED" in report.violated_guarantees()

    def test_evaluation_first_ignored(self) -> None:
        """Guards that treat an artifact requested by validation alone like a cadence one
        (commit, then evaluate) are caught: a failed evaluation leaves it committed."""
        machine = Machine(
            load_machine("artifact").table,
            machine_bindings("artifact").merged(
                Bindings(
                    guards={
                        "evaluate_first": lambda ctx: False,
                        "evaluate_after": lambda ctx: ctx.evaluation is not None,
                    }
                )
            ),
        )
        scenario = _scenario(
            "validation-only-partial-fails-then-retry-passes", machine_factory=lambda: machine
        )
        report = explore(scenario, SPEC, FAST)
        assert "ART-EVALUATE-FIRST" in report.violated_guarantees()
