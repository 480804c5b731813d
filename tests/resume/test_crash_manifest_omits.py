"""A committed manifest that omits a file its plan requires (``data.pt`` deleted from the
manifest, the file left on disk) is not a commit: the crash harness proves the shipped save and
resume machines pass over it at every crash point of the ``manifest-omits-data`` scenario
(resuming the previous iteration exactly), and catches a resume whose verification only looks
at what the manifest records."""

from __future__ import annotations

import json
from typing import Any

import attrs

from statecraft.checkpoint.kernel.catalog import scan
from statecraft.checkpoint.kernel.layout import MANIFEST_NAME, parse_iter_dirname
from statecraft.checkpoint.kernel.machines import load_machine, machine_bindings
from statecraft.checkpoint.kernel.plan import PLANS, entry_of
from statecraft.checkpoint.kernel.verify import read_manifest
from statecraft.checkpoint.resume import bindings as resume
from statecraft.engine import Bindings, Machine, load_spec
from statecraft.proofs import ExploreOptions, explore
from statecraft.proofs.oracle import DiskView, iteration_name
from statecraft.proofs.save.scenarios import SaveScenario, save_scenarios
from statecraft.resources import spec_path
from statecraft.storage import SimWorld

SAVE_SPEC = load_spec(spec_path("save"))
RESUME_SPEC = load_spec(spec_path("resume"))
BOTH = attrs.evolve(SAVE_SPEC, guarantees=SAVE_SPEC.guarantees + RESUME_SPEC.guarantees)
FAST = ExploreOptions(extra_subsets=0, faults=False)
PLAN_ENTRIES = {e.name for table in PLANS.values() for e in table}


def _scenario() -> SaveScenario:
    return next(s for s in save_scenarios() if s.name == "manifest-omits-data")


class _ListsOnlyWhatTheManifestRecords:
    """A store view for the broken verifier: an iteration's listing shows only the plan
    entries its manifest records, so a planned file the manifest omits is never seen."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def list(self, path: str = "") -> list[str]:
        names = self._store.list(path)
        iteration = parse_iter_dirname(path.rstrip("/").rsplit("/", 1)[-1])
        if iteration is None or MANIFEST_NAME not in names:
            return names
        recorded = {entry_of(n) for n in read_manifest(self._store, iteration).files}
        return [n for n in names if n not in PLAN_ENTRIES or n in recorded]


def _resume_trusting_the_manifest_list() -> Machine:
    """Broken resume: verification checks only the files the manifest records."""

    def verify_next_candidate(ctx: Any) -> None:
        if ctx.store is not None and not isinstance(ctx.store, _ListsOnlyWhatTheManifestRecords):
            ctx.store = _ListsOnlyWhatTheManifestRecords(ctx.store)
            ctx.catalog = scan(ctx.store, level=ctx.verify_level, writer=ctx.writer)
        resume.verify_next_candidate(ctx)

    bindings = machine_bindings("resume").merged(
        Bindings(effects={"verify_next_candidate": verify_next_candidate})
    )
    return Machine(load_machine("resume").table, bindings)


def test_shipped_machines_pass_over_a_manifest_that_omits_a_planned_file() -> None:
    """Every save and resume guarantee holds at every crash point of the scenario, and each
    resume that found the damaged iter 4 passed over it and adopted an older one exactly."""
    report = explore(_scenario(), BOTH, FAST)
    assert not report.violations, report.violations[0].reproducer()
    assert report.crash_states > 0


def test_harness_catches_a_resume_that_trusts_the_manifest_list() -> None:
    """A resume that verifies only what the manifest records adopts iter 4 with its data
    cursor restarted: the oracle refuses it (the manifest lacks a planned file) and the data
    source does not hold the adopted checkpoint's cursor."""
    broken = attrs.evolve(
        _scenario(),
        name="broken-manifest-omits-data",
        resume_factory=_resume_trusting_the_manifest_list,
    )
    violated = explore(broken, BOTH, FAST).violated_guarantees()
    assert {"RESUME-VERIFIED", "RESUME-EXACT"} <= violated, violated


def test_the_damaged_tree_is_what_it_claims() -> None:
    """The scenario starts from iters 2 and 4 committed, iter 4's data.pt on disk but not in
    its manifest (so the crash states above really start from the damage)."""
    world = SimWorld()
    _scenario().setup(world)
    view = DiskView.of(world)
    plan = ("model.pt", "optim.pt", "trainer.pt", "data.pt")
    assert view.verified(plan) == [2]
    assert f"{iteration_name(4)}/data.pt" in view.files
    manifest = json.loads(view.files[f"{iteration_name(4)}/{MANIFEST_NAME}"])
    assert sorted(manifest["files"]) == ["model.pt", "optim.pt", "trainer.pt"]
