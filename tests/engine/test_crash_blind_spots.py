"""Each blind spot the outside review found in the crash harness (issue 6, item 9) has a
guarantee, and a deliberately broken variant of the library that the harness catches through
that specific guarantee (a harness that cannot fail would prove nothing)."""

from __future__ import annotations

import io
from typing import Any

import attrs
import pytest
import torch

from statecraft.checkpoint.kernel.layout import MANIFEST_NAME, iter_dirname
from statecraft.checkpoint.kernel.machines import load_machine
from statecraft.checkpoint.resume import bindings as resume_tx
from statecraft.engine import load_spec
from statecraft.errors import CheckpointCorruptError
from statecraft.proofs import ExploreOptions, explore
from statecraft.proofs import damaged_trees as damage
from statecraft.proofs.oracle import DiskView
from statecraft.proofs.resume.broken import (
    UnsafeWriter,
)
from statecraft.proofs.resume.broken import load_skipping_clocks as _load_skipping_clocks
from statecraft.proofs.resume.broken import load_skipping_optimizer as _load_skipping_optimizer
from statecraft.proofs.resume.broken import load_skipping_rng as _load_skipping_rng
from statecraft.proofs.resume.broken import load_skipping_scheduler as _load_skipping_scheduler
from statecraft.proofs.resume.broken import resume_cleaning_up as _resume_cleaning_up
from statecraft.proofs.resume.broken import resume_forgetting_reasons as _resume_forgetting_reasons
from statecraft.proofs.resume.broken import resume_oldest_first as _resume_oldest_first
from statecraft.proofs.resume.broken import resume_trusting_latest as _resume_trusting_latest
from statecraft.proofs.save import broken as save_broken
from statecraft.proofs.save.broken import RenamingStore
from statecraft.proofs.save.broken import scenario as _shipped
from statecraft.proofs.save.broken import with_effects as _with_effects
from statecraft.proofs.save.scenarios import (
    CHECKPOINTS_ROOT,
    SaveScenario,
    resume_context,
    save_context,
    save_scenarios,
)
from statecraft.proofs.training import SALT_RUN, fresh_objects
from statecraft.resources import spec_path
from statecraft.storage import CrashKind, SimWorld
from statecraft.writers.consolidated import ConsolidatedWriter

SAVE_SPEC = load_spec(spec_path("save"))
RESUME_SPEC = load_spec(spec_path("resume"))
BOTH = attrs.evolve(SAVE_SPEC, guarantees=SAVE_SPEC.guarantees + RESUME_SPEC.guarantees)
FAST = ExploreOptions(extra_subsets=0, faults=False)
KILL_ONLY = ExploreOptions(kinds=(CrashKind.PROCESS_KILL,), extra_subsets=0, faults=False)


def _violated(scenario: SaveScenario, options: ExploreOptions = FAST) -> set[str]:
    return explore(scenario, BOTH, options).violated_guarantees()


def _caught(scenario: SaveScenario, guarantee: str, message: str) -> None:
    """``guarantee`` is violated, and one of its violations says ``message``."""
    report = explore(scenario, BOTH, KILL_ONLY)
    messages = [v.message for v in report.violations if v.guarantee == guarantee]
    assert messages, (guarantee, report.violated_guarantees())
    assert any(message in m for m in messages), messages


# ------------------------------------------------------------- vacuous checks, now judged
class TestVacuousChecks:
    def test_resume_trying_the_oldest_first_violates_resume_newest(self) -> None:
        """A resume that tries the oldest checkpoint first passed RESUME-NEWEST while it
        exempted the iteration being saved and judged the disk after the retry."""
        scenario = _shipped(
            "next-save",
            resume_factory=_with_effects("resume", list_candidates=_resume_oldest_first),
        )
        _caught(scenario, "RESUME-NEWEST", "verified when it ran")

    def test_resume_recording_no_reason_violates_resume_reasons(self) -> None:
        """A resume that passes over a corrupt checkpoint without recording it passed
        RESUME-REASONS while nothing recorded meant nothing checked."""
        scenario = _shipped(
            "newest-is-corrupt",
            resume_factory=_with_effects(
                "resume", verify_next_candidate=_resume_forgetting_reasons
            ),
        )
        _caught(scenario, "RESUME-REASONS", "but the newer iterations were ['iter_000000004']")

    def test_manifest_without_the_full_plan_is_caught(self) -> None:
        """The oracle requires every planned file in the manifest (it once required only
        model.pt and trainer.pt): a commit that leaves optim.pt out of the record is caught
        by the save guarantees in the crashed phase (``verify_checkpoint`` also refuses it
        since it checks the plan model's required entries; it once accepted it)."""

        (scenario,) = save_broken.manifest_omits_optimizer()
        world = SimWorld()
        scenario.setup(world)
        scenario.run(world, crash=None).raise_for_failure()
        with pytest.raises(CheckpointCorruptError, match=r"it lacks \['optim\.pt'\]"):
            resume_tx.verify_checkpoint(world.local_store(CHECKPOINTS_ROOT), scenario.target)
        assert {"SAVE-DURABLE", "SAVE-LATEST"} <= _violated(scenario, KILL_ONLY)


# ------------------------------------------------------------------ resume writes nothing
def test_resume_that_cleans_up_a_corrupt_commit_violates_read_only() -> None:
    scenario = _shipped(
        "newest-is-corrupt",
        resume_factory=_with_effects("resume", verify_next_candidate=_resume_cleaning_up),
    )
    _caught(scenario, "RESUME-READ-ONLY", "resume changed the store: unlink")


# ------------------------------------------------------- the pointer never goes backwards
def test_pointer_replaced_by_delete_then_create_violates_monotonic() -> None:
    (scenario,) = save_broken.pointer_replaced_by_delete_then_create()
    _caught(
        scenario,
        "SAVE-LATEST-MONOTONIC",
        "existed before the save (b'iter_000000002\\n') and is now absent",
    )


# ----------------------------------------------- committed files are never opened again
def test_rewriting_a_committed_file_with_identical_bytes_violates_no_reopen() -> None:
    """The bytes stay the same, so only the I/O trace can tell (SAVE-IMMUTABLE cannot)."""
    (scenario,) = save_broken.committed_rewritten_identically()
    _caught(scenario, "SAVE-NO-REOPEN", "touched committed names: #")
    assert "SAVE-IMMUTABLE" not in _violated(scenario, KILL_ONLY)


def test_rewriting_a_committed_file_with_fresh_payloads_violates_immutable() -> None:
    """The run's payloads carry another salt than the committed ones: the bytes differ."""
    (scenario,) = save_broken.committed_rewritten_with_fresh_payloads()
    assert {"SAVE-NO-REOPEN", "SAVE-IMMUTABLE"} <= _violated(scenario, KILL_ONLY)


def test_payloads_differ_between_a_run_and_its_retry() -> None:
    """Same-bytes rewrites cannot hide: the run and the retry write different bytes."""
    worlds = []
    for salt in (SALT_RUN, SALT_RUN + 1):
        world = SimWorld()
        store = world.local_store(CHECKPOINTS_ROOT)
        ctx = save_context(store, 2, with_data=True, salt=salt)
        load_machine("save").recover(ctx).raise_for_failure()
        worlds.append(DiskView.of(world))
    run, retry = worlds
    name = iter_dirname(2)
    for file_name in ("trainer.pt", "data.pt"):
        assert run.files[f"{name}/{file_name}"] != retry.files[f"{name}/{file_name}"], file_name
    assert run.files[f"{name}/model.pt"] == retry.files[f"{name}/model.pt"]
    optim = torch.load(io.BytesIO(run.files[f"{name}/optim.pt"]), weights_only=True)
    assert optim["state"][0]["exp_avg"].flatten().tolist() == [2.25] * 4


# --------------------------------------------------------- hostile pickles are refused
def test_loading_with_weights_only_false_violates_no_code(monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = _shipped("dangling-latest-hostile-pickle")
    assert "RESUME-NO-CODE" not in _violated(scenario, KILL_ONLY)
    monkeypatch.setattr(ConsolidatedWriter, "read", UnsafeWriter.read)
    monkeypatch.setattr(ConsolidatedWriter, "load_bytes", UnsafeWriter.load_bytes)
    _caught(scenario, "RESUME-NO-CODE", "executed pickle payloads ['iter_000000004/trainer.pt']")


def _world_with_hostile_model() -> SimWorld:
    world = SimWorld()
    for iteration in (2, 4):
        ctx = save_context(world.local_store(CHECKPOINTS_ROOT), iteration, with_data=True, salt=0)
        load_machine("save").recover(ctx).raise_for_failure()
    damage.hostile_pickle(4, "model.pt")(world)
    return world


def _resume_once(world: SimWorld) -> Any:
    ctx = resume_context(world.local_store(CHECKPOINTS_ROOT), fresh_objects(with_data=True))
    damage.PAYLOAD_RAN.clear()
    return load_machine("resume").run(ctx), ctx


def test_hostile_model_payload_is_refused_and_never_runs() -> None:
    """A model.pt whose manifest digests match but whose pickle would call code: verification
    parses it the way resume loads it, so resume=auto passes over iter 4 naming the file and
    the refused global, adopts iter 2, and the payload never runs."""
    world = _world_with_hostile_model()
    assert DiskView.of(world).problem(4, ("data.pt", "model.pt", "optim.pt", "trainer.pt"))
    result, ctx = _resume_once(world)
    assert result.final_state == "resumed"
    assert ctx.result.source.endswith(iter_dirname(2))
    assert damage.PAYLOAD_RAN == []
    (passed,) = ctx.passed_over
    assert passed.name == iter_dirname(4)
    assert "model.pt: holds an object built by statecraft.proofs.damaged_trees.payload_ran" in (
        passed.reason
    )


def test_hostile_model_payload_runs_with_weights_only_false(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ConsolidatedWriter, "read", UnsafeWriter.read)
    monkeypatch.setattr(ConsolidatedWriter, "load_bytes", UnsafeWriter.load_bytes)
    _resume_once(_world_with_hostile_model())
    ran = list(damage.PAYLOAD_RAN)
    assert ran == [f"{iter_dirname(4)}/model.pt"]


# ------------------------------------------------- exactness covers every tracked object
@pytest.mark.parametrize(
    ("effect", "what"),
    [
        (_load_skipping_optimizer, "the optimizer differs"),
        (_load_skipping_scheduler, "the scheduler differs"),
        (_load_skipping_rng, "the RNG streams differ"),
        (_load_skipping_clocks, "the clocks differ"),
    ],
)
def test_resume_skipping_a_tracked_object_violates_exact(effect: Any, what: str) -> None:
    scenario = _shipped("next-save", resume_factory=_with_effects("resume", load_checkpoint=effect))
    _caught(scenario, "RESUME-EXACT", what)


# ------------------------------------------------- an exclusive create never replaces
def test_exclusive_create_by_rename_violates_exclusive() -> None:
    scenario = _shipped(
        "next-save", store_factory=lambda world: RenamingStore(CHECKPOINTS_ROOT, fs=world.fs)
    )
    _caught(scenario, "SAVE-EXCLUSIVE", "by something other than an exclusive link: #")


# ------------------------------------------------------- scenarios from damaged trees
@pytest.mark.parametrize(
    ("name", "effects", "expected"),
    [
        # a stale pointer trusted: the newest verified checkpoint is skipped
        (
            "stale-latest-newer-partial",
            {"list_candidates": _resume_trusting_latest},
            "RESUME-NEWEST",
        ),
        # a garbage pointer parsed without care: resume fails
        ("garbage-latest-size-disagrees", {"list_candidates": _resume_trusting_latest}, "RECOVERY"),
        # a dangling pointer tried as a candidate: a passed-over name that never existed
        (
            "dangling-latest-hostile-pickle",
            {"list_candidates": _resume_trusting_latest},
            "RESUME-REASONS",
        ),
    ],
)
def test_damaged_tree_scenarios_catch_broken_fallbacks(
    name: str, effects: dict[str, Any], expected: str
) -> None:
    scenario = _shipped(name, resume_factory=_with_effects("resume", **effects))
    assert expected in _violated(scenario, KILL_ONLY)


def test_damaged_trees_are_what_they_claim() -> None:
    """Each damaged starting tree holds the damage its name says (so the scenarios above
    really start from it)."""
    views = {}
    for scenario in save_scenarios():
        world = SimWorld()
        scenario.setup(world)
        views[scenario.name] = DiskView.of(world)
    files = ("model.pt", "optim.pt", "trainer.pt")  # these scenarios track no data source
    stale = views["stale-latest-newer-partial"]
    assert stale.pointer() == 2
    assert stale.verified(files) == [2, 4]
    assert "iter_000000008" in stale.names
    assert "iter_000000008/" + MANIFEST_NAME not in stale.files
    garbage = views["garbage-latest-size-disagrees"]
    assert garbage.pointer_raw() is not None
    assert garbage.pointer_or_none() is None
    assert "does not match" in (garbage.problem(4, files) or "")
    dangling = views["dangling-latest-hostile-pickle"]
    assert dangling.pointer() == 9
    assert 9 not in dangling.iterations()
    assert "weights_only" in (dangling.problem(4, files) or "")
