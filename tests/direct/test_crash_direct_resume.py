"""The crash harness proves specs/resume.toml on the resume machine over a direct object-store
root (the production direct save of real DCP shards into the simulated bucket, crashed at every
request; resume, retry, resume), and catches each deliberately broken resume source (a harness
that cannot fail proves nothing)."""

from __future__ import annotations

import io

import attrs
import torch

from statecraft.checkpoint.direct.manifest import DirectManifest
from statecraft.checkpoint.direct.reading import DirectCheckpoint
from statecraft.checkpoint.direct.resume_source import DirectResumeSource
from statecraft.checkpoint.kernel.layout import MANIFEST_NAME, iter_dirname, parse_iter_dirname
from statecraft.checkpoint.state import TrainerState
from statecraft.engine import load_spec
from statecraft.proofs import ExploreOptions, explore
from statecraft.proofs.resume.direct_scenarios import (
    DirectResumeScenario,
    direct_resume_scenarios,
)
from statecraft.proofs.resume.scenarios import resume_scenarios
from statecraft.resources import spec_path
from statecraft.storage.base import FileRecord
from statecraft.storage.digest import Digest

SPEC = load_spec(spec_path("resume"))
FAST = ExploreOptions(extra_subsets=0, faults=False)
DIRECT_GUARANTEES = {
    "RESUME-VERIFIED",
    "RESUME-EXACT",
    "RESUME-READ-ONLY",
    "RESUME-NO-CODE",
    "RESUME-DIRECT-LATEST",
}


def _scenario(name: str) -> DirectResumeScenario:
    return next(s for s in direct_resume_scenarios() if s.name == name)


# The shipped resume machine holding on every direct scenario is proven by
# tests/save/test_crash_save.py::TestShippedMachines: crashcheck of ``resume`` explores each
# scenario of direct_resume_scenarios() (resume_scenarios() lists them after the local ones)
# with every crash kind, injected faults and extra loss subsets (a superset of FAST's crash
# states), asserts no violation and that every guarantee of specs/resume.toml, each of
# DIRECT_GUARANTEES among them, is checked in each scenario. The test below pins that the
# direct scenarios are in that list and that DIRECT_GUARANTEES are the spec's.


def test_direct_scenarios_are_proven_by_the_resume_crashcheck() -> None:
    resume_names = [s.name for s in resume_scenarios()]
    direct_names = [s.name for s in direct_resume_scenarios()]
    assert direct_names
    assert resume_names[-len(direct_names) :] == direct_names
    assert {g.id for g in SPEC.guarantees} >= DIRECT_GUARANTEES


class ManifestlessSource(DirectResumeSource):
    """Broken: adopts the newest iter_N holding any object, and when it has no manifest makes
    one up from the objects that are there (the shards and the newest control generation)."""

    def candidates(self) -> list[int]:
        found = (parse_iter_dirname(n) for n in self.store.list(""))
        return sorted((i for i in found if i is not None), reverse=True)[:1]

    def verify(self, iteration: int, *, explicit: bool) -> DirectCheckpoint:
        iter_dir = iter_dirname(iteration)
        if self.store.stat(f"{iter_dir}/{MANIFEST_NAME}") is not None:
            return super().verify(iteration, explicit=explicit)
        generations = f"{iter_dir}/.posttrain/generations"
        generation = max(self.store.list(generations))
        trainer_bytes = self.store.read_bytes(f"{generations}/{generation}/trainer.pt")
        files = {}
        for component in ("model", "optim"):
            for name in self.store.list(f"{iter_dir}/{component}"):
                data = self.store.read_bytes(f"{iter_dir}/{component}/{name}")
                files[f"{component}/{name}"] = FileRecord(name, len(data), Digest.of(data))
        manifest = DirectManifest.build(
            iteration,
            control_generation=generation,
            control={
                "trainer.pt": FileRecord("trainer.pt", len(trainer_bytes), Digest.of(trainer_bytes))
            },
            plan=("model", "optimizer", "training_state"),
            writer={"world_size": "1"},
            lease_generation=1,
            components={"model": "model", "optim": "optim"},
            files=files,
        )
        payload = torch.load(io.BytesIO(trainer_bytes), weights_only=True)
        trainer = TrainerState.from_payload(payload, source="made up")
        return DirectCheckpoint(
            self.store, iteration, self.iteration_uri(iteration), manifest, trainer, None
        )


class FreshOverDamagedLatest(DirectResumeSource):
    """Broken: when latest names an iteration that does not verify, starts fresh."""

    def fresh_refusal(self, failures: dict[int, Exception]) -> Exception | None:
        return None


def _violations(scenario: DirectResumeScenario, source: type[DirectResumeSource]) -> set[str]:
    broken = attrs.evolve(scenario, name=f"broken-{scenario.name}", source_factory=source)
    return {v.guarantee for v in explore(broken, SPEC, FAST).violations}


def test_harness_catches_a_resume_that_adopts_an_iteration_without_manifest() -> None:
    found = _violations(_scenario("direct-next-save"), ManifestlessSource)
    assert {"RESUME-VERIFIED", "RESUME-DIRECT-LATEST"} <= found


def test_harness_catches_a_fresh_start_over_a_damaged_latest() -> None:
    found = _violations(_scenario("direct-latest-names-missing-object"), FreshOverDamagedLatest)
    assert "RESUME-DIRECT-LATEST" in found
