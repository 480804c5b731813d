"""Retention's states on real checkpoints, built by hand with the retention records: the catalog
classifies weights-only and invalidated iterations (at every level, a damaged marker included),
resume=auto passes over them, an explicit resume from one is refused naming the newest
resumable, load_weights accepts a weights-only one, a save never rewrites one, and nothing
committed changes on any refusal."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import pytest
import torch
from checkpoint_runs import RUN, Objects, committed_run, open_checkpointer, private_copy, train
from checkpoint_runs import flip_tensor_bit as flip_bit_in
from retained_runs import invalidate, mark_weights_only, write_decision

import statecraft as sc
from statecraft.checkpoint.facade.lifecycle import newest_committed
from statecraft.checkpoint.kernel.catalog import CheckpointState, classify, scan
from statecraft.checkpoint.kernel.layout import LATEST_POINTER, MANIFEST_NAME, iter_dirname
from statecraft.checkpoint.kernel.machines import load_machine
from statecraft.checkpoint.kernel.retention_marks import MarkKind, newest_resumable, read_mark
from statecraft.checkpoint.kernel.retention_records import (
    INVALIDATED_MARKER,
    WEIGHTS_ONLY_MARKER,
    DecisionRow,
    RetentionAction,
    RetentionDecision,
)
from statecraft.checkpoint.kernel.verify import verify_checkpoint
from statecraft.checkpoint.save.saving import save_full_checkpoint
from statecraft.checkpoint.state import gather_data_state, gather_rng_inventory
from statecraft.cli import main
from statecraft.cli.inspect import inspect_path
from statecraft.errors import (
    CheckpointCorruptError,
    ResumeRequiredError,
    WeightsOnlyResumeError,
)
from statecraft.storage.local import LocalStore

LEVELS = ("manifest", "size", "digest")
WEIGHTS_ONLY_REASON = (
    "weights-only: its optimizer state was removed by retention (latest 1); it holds weights "
    "and trainer state for evaluation (statecraft.load_weights) but cannot resume exactly"
)
INVALIDATED_REASON = (
    "invalidated: retention (latest 2) is deleting it; it is never adopted or loaded, and the "
    "next retention pass finishes removing it"
)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Committed iterations 2, 4, 6 and 8 of a run that tracks a data source."""
    return committed_run(tmp_path_factory.mktemp("pristine"), data=True)


@pytest.fixture
def out(pristine: Path, tmp_path: Path) -> Path:
    return private_copy(pristine, tmp_path)


def checkpoints(out: Path) -> Path:
    attempt = min(p for p in RUN.job_dir(out).iterdir() if p.is_dir())
    return attempt / "checkpoints"


def iter_path(out: Path, iteration: int) -> Path:
    return checkpoints(out) / iter_dirname(iteration)


def store_of(out: Path) -> LocalStore:
    return LocalStore(str(checkpoints(out)))


def tree_sha256(root: Path) -> dict[str, str]:
    """Every file under ``root`` but writer leases and launch locks: path -> SHA-256."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith((".statecraft-writer.", ".statecraft-launch."))
    }


class _Recording:
    """A store that records every call it forwards (name, first argument)."""

    def __init__(self, inner: LocalStore, calls: list[tuple[str, str]]) -> None:
        self._inner = inner
        self._calls = calls

    def __getattr__(self, name: str) -> object:
        attr = getattr(self._inner, name)
        if not callable(attr) or name == "describe":
            return attr

        def call(*args: object, **kwargs: object) -> object:
            self._calls.append((name, str(args[0]) if args else ""))
            return attr(*args, **kwargs)

        return call


def warnings_of(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)


class TestCatalog:
    @pytest.mark.parametrize("level", LEVELS)
    @pytest.mark.parametrize("removed", [True, False], ids=["pruned", "marker-only"])
    def test_weights_only_at_every_level(self, out: Path, level: str, removed: bool) -> None:
        """A marked checkpoint is weights-only at every level, whether optim.pt is gone or a
        crash left it behind; the reason names the policy from the marker."""
        mark_weights_only(iter_path(out, 4), remove=removed)
        entry = classify(store_of(out), 4, level=level)
        assert entry.state is CheckpointState.WEIGHTS_ONLY
        assert entry.reason == WEIGHTS_ONLY_REASON
        assert entry.policy == "latest 1"
        assert entry.mark is not None
        assert entry.mark.kind is MarkKind.WEIGHTS_ONLY
        assert entry.mark.pruned == ("optim.pt",)
        assert entry.verified is not None
        assert entry.verified.weights_only
        assert not entry.state.adoptable
        assert "optim.pt" not in entry.verified.payloads

    @pytest.mark.parametrize("level", LEVELS)
    @pytest.mark.parametrize("stage", ["marked", "unmanifested", "emptied"])
    def test_invalidated_whatever_is_left(self, out: Path, level: str, stage: str) -> None:
        """An invalidation marker makes the iteration invalidated at every level, with its
        manifest still there, gone, or only the marker left."""
        invalidate(iter_path(out, 6), stage=stage)
        entry = classify(store_of(out), 6, level=level)
        assert entry.state is CheckpointState.INVALIDATED
        assert entry.reason == INVALIDATED_REASON
        assert entry.policy == "latest 2"
        assert entry.verified is None
        assert not entry.state.adoptable

    def test_invalidated_wins_over_weights_only(self, out: Path) -> None:
        """A weights-only iteration that retention then deletes is invalidated."""
        mark_weights_only(iter_path(out, 4))
        invalidate(iter_path(out, 4))
        assert classify(store_of(out), 4).state is CheckpointState.INVALIDATED

    @pytest.mark.parametrize(
        ("marker", "state"),
        [
            (WEIGHTS_ONLY_MARKER, CheckpointState.WEIGHTS_ONLY),
            (INVALIDATED_MARKER, CheckpointState.INVALIDATED),
        ],
    )
    def test_damaged_marker_still_counts(
        self, out: Path, marker: str, state: CheckpointState
    ) -> None:
        """A marker that is not a valid record still marks the iteration (fail closed), and
        the reason says it is damaged and why."""
        (iter_path(out, 4) / marker).write_bytes(b"{half a reco")
        entry = classify(store_of(out), 4, level="size")
        assert entry.state is state
        assert entry.policy is None
        assert f"retention (its marker {iter_dirname(4)}/{marker} is damaged: is not JSON" in (
            entry.reason
        )

    def test_marker_of_another_iteration_still_counts(self, out: Path) -> None:
        """A weights-only marker copied from another iteration is damaged, still counted."""
        mark_weights_only(iter_path(out, 2), remove=False)
        (iter_path(out, 4) / WEIGHTS_ONLY_MARKER).write_bytes(
            (iter_path(out, 2) / WEIGHTS_ONLY_MARKER).read_bytes()
        )
        entry = classify(store_of(out), 4, level="size")
        assert entry.state is CheckpointState.WEIGHTS_ONLY
        assert "is damaged: names iteration 2" in entry.reason

    def test_weights_only_that_does_not_verify_is_corrupt(self, out: Path) -> None:
        """A weights-only checkpoint whose model.pt changed is corrupt; the note says it was
        weights-only."""
        mark_weights_only(iter_path(out, 4))
        flip_bit_in(iter_path(out, 4) / "model.pt")
        entry = classify(store_of(out), 4, level="digest")
        assert entry.state is CheckpointState.CORRUPT
        assert f"{iter_dirname(4)}/model.pt: digest xxh3_128" in entry.reason
        assert entry.notes == (WEIGHTS_ONLY_REASON,)
        assert classify(store_of(out), 4, level="size").state is CheckpointState.WEIGHTS_ONLY

    def test_weights_only_needs_its_trainer_state(self, out: Path) -> None:
        """Only the optimizer entries may be missing: a weights-only dir without trainer.pt
        is corrupt, naming it."""
        mark_weights_only(iter_path(out, 4))
        (iter_path(out, 4) / "trainer.pt").unlink()
        entry = classify(store_of(out), 4, level="size")
        assert entry.state is CheckpointState.CORRUPT
        assert f"{iter_dirname(4)}/trainer.pt: is missing" in entry.reason

    def test_weights_only_marker_without_manifest_is_partial(self, out: Path) -> None:
        """A weights-only marker in a directory without a manifest is partial, noted."""
        mark_weights_only(iter_path(out, 4))
        (iter_path(out, 4) / MANIFEST_NAME).unlink()
        entry = classify(store_of(out), 4, level="size")
        assert entry.state is CheckpointState.PARTIAL
        assert entry.notes == (
            f"{iter_dirname(4)}/{WEIGHTS_ONLY_MARKER} ignored: {iter_dirname(4)} has no manifest",
        )

    def test_pick_passes_over_marked_iterations(self, out: Path) -> None:
        """The auto-pick passes over invalidated and weights-only iterations with their
        reasons and adopts the newest whole one."""
        invalidate(iter_path(out, 8))
        mark_weights_only(iter_path(out, 6), remove=False)
        mark_weights_only(iter_path(out, 4))
        pick = scan(store_of(out), level="digest").pick()
        assert pick.chosen is not None
        assert pick.chosen.iteration == 2
        assert [(p.name, p.reason) for p in pick.passed_over] == [
            (iter_dirname(8), INVALIDATED_REASON),
            (iter_dirname(6), WEIGHTS_ONLY_REASON),
            (iter_dirname(4), WEIGHTS_ONLY_REASON),
        ]

    @pytest.mark.parametrize("mark", ["none", "weights-only", "invalidated"])
    def test_manifest_level_reads(self, out: Path, mark: str) -> None:
        """At level manifest (the save machine's observation) an unmarked iteration costs the
        two marker stats and nothing else beyond the old reads; nothing is ever written."""
        if mark == "weights-only":
            mark_weights_only(iter_path(out, 8))
        elif mark == "invalidated":
            invalidate(iter_path(out, 8))
        calls: list[tuple[str, str]] = []
        store = _Recording(store_of(out), calls)
        classify(store, 8, level="manifest")  # type: ignore[arg-type]
        name = iter_dirname(8)
        marker_stats = [("stat", f"{name}/{INVALIDATED_MARKER}")]
        if mark == "invalidated":
            tail = [("read_bytes", f"{name}/{INVALIDATED_MARKER}")]
        else:
            marker_stats.append(("stat", f"{name}/{WEIGHTS_ONLY_MARKER}"))
            manifest = [("stat", f"{name}/{MANIFEST_NAME}")] * 2
            manifest.append(("read_bytes", f"{name}/{MANIFEST_NAME}"))
            wo = [("read_bytes", f"{name}/{WEIGHTS_ONLY_MARKER}")] if mark != "none" else []
            tail = wo + manifest
        assert calls == [("stat", name), *marker_stats, *tail]

    def test_read_mark_of_an_unmarked_iteration(self, out: Path) -> None:
        """An iteration without a marker has no mark and stays committed."""
        assert read_mark(store_of(out), 8) is None
        assert classify(store_of(out), 8, level="manifest").state is CheckpointState.COMMITTED


class TestVerify:
    def test_optimizer_entries_required_unless_weights_only(self, out: Path) -> None:
        """Without weights_only a pruned checkpoint fails on optim.pt; with it, it verifies
        and optim.pt is neither required nor read."""
        mark_weights_only(iter_path(out, 4))
        with pytest.raises(CheckpointCorruptError, match=r"iter_000000004/optim\.pt: is missing"):
            verify_checkpoint(store_of(out), 4)
        verified = verify_checkpoint(store_of(out), 4, weights_only=True)
        assert verified.weights_only
        assert sorted(verified.payloads) == ["data.pt", "model.pt"]


class TestNewest:
    def test_newest_committed_counts_weights_only(self, out: Path) -> None:
        """A weights-only checkpoint is a commit of the series; an invalidated one is not."""
        invalidate(iter_path(out, 8), stage="marked")
        mark_weights_only(iter_path(out, 6))
        assert newest_committed(store_of(out)) == 6
        assert newest_resumable(store_of(out)) == 4

    def test_save_without_resume_refused_by_a_weights_only_commit(self, out: Path) -> None:
        """resume=auto passes over the weights-only commits (saying so), starts fresh, and the
        first save is refused because the attempt holds them; nothing is written."""
        for iteration in (8, 6):
            invalidate(iter_path(out, iteration), stage="emptied")
        for iteration in (4, 2):
            mark_weights_only(iter_path(out, iteration))
        before = tree_sha256(out)
        ckpt, objects = open_checkpointer(out)
        result = ckpt.resume()
        assert result.step == 0
        assert result.reason == (
            "resume=auto found no checkpoint that verifies (4 passed over, 2 of them "
            "weights-only (optimizer removed by retention)): starting fresh"
        )
        with pytest.raises(ResumeRequiredError) as info:
            train(ckpt, objects, 2)
        assert f"already holds committed checkpoints (newest {iter_dirname(4)})" in str(info.value)
        assert "weights-only (optimizer removed by retention)" in str(info.value)
        assert tree_sha256(out) == before


class TestResume:
    def test_auto_passes_over_marked(self, out: Path, caplog: pytest.LogCaptureFixture) -> None:
        """resume=auto passes over an invalidated iteration whose manifest is still there and
        a weights-only one whose optim.pt is still there, logging each reason, and resumes
        from the newest whole one; nothing committed changes."""
        invalidate(iter_path(out, 8))
        mark_weights_only(iter_path(out, 6), remove=False)
        before = tree_sha256(checkpoints(out))
        ckpt, _ = open_checkpointer(out)
        with caplog.at_level(logging.WARNING, logger="statecraft.resume"):
            result = ckpt.resume()
        assert result.step == 4
        assert [(p.name, p.reason) for p in result.passed_over] == [
            (iter_dirname(8), INVALIDATED_REASON),
            (iter_dirname(6), WEIGHTS_ONLY_REASON),
        ]
        logged = warnings_of(caplog)
        assert f"resume=auto passed over {iter_dirname(8)}: {INVALIDATED_REASON}" in logged
        assert f"resume=auto passed over {iter_dirname(6)}: {WEIGHTS_ONLY_REASON}" in logged
        assert tree_sha256(checkpoints(out)) == before

    @pytest.mark.parametrize("removed", [True, False], ids=["pruned", "marker-only"])
    def test_explicit_weights_only_refused(self, out: Path, removed: bool) -> None:
        """An explicit resume from a weights-only iteration raises WeightsOnlyResumeError
        naming the policy and the newest iteration that holds its optimizer; nothing loads."""
        mark_weights_only(iter_path(out, 4), remove=removed)
        mark_weights_only(iter_path(out, 2))
        invalidate(iter_path(out, 8))
        before = tree_sha256(out)
        ckpt, objects = open_checkpointer(out, f"resume={iter_path(out, 4)}")
        weights = objects.model.weight.detach().clone()
        with pytest.raises(WeightsOnlyResumeError) as info:
            ckpt.resume()
        where = f"local:{checkpoints(out).resolve()}/{iter_dirname(4)}"
        assert str(info.value) == (
            f"resume={iter_path(out, 4)}: {where} is weights-only: its optimizer state was "
            "removed by retention (latest 1); it holds weights and trainer state for evaluation "
            "(statecraft.load_weights) but cannot resume exactly; resume from iter_000000006, "
            "the newest that holds its optimizer, or set keep_optim_last=0 to keep optimizer "
            "state. Nothing was loaded"
        )
        assert info.value.fields == {
            "path": where,
            "policy": "latest 1",
            "newest_resumable": iter_dirname(6),
        }
        assert ckpt.step == 0
        assert torch.equal(objects.model.weight, weights)
        assert tree_sha256(out) == before

    def test_explicit_weights_only_without_a_resumable_one(self, out: Path) -> None:
        """With no iteration still holding its optimizer, the refusal says so and points at
        load_weights or a new attempt."""
        for iteration in (8, 6, 4, 2):
            mark_weights_only(iter_path(out, iteration))
        ckpt, _ = open_checkpointer(out, f"resume={iter_path(out, 8)}")
        with pytest.raises(WeightsOnlyResumeError) as info:
            ckpt.resume()
        message = str(info.value)
        assert (
            f"no iteration of local:{checkpoints(out).resolve()} still holds its optimizer; load "
            "its weights with statecraft.load_weights as initialisation, or set resume=off to "
            "start a new attempt, or set keep_optim_last=0 to keep optimizer state"
        ) in message
        assert info.value.fields["newest_resumable"] is None

    @pytest.mark.parametrize("stage", ["marked", "unmanifested"])
    def test_explicit_invalidated_refused(self, out: Path, stage: str) -> None:
        """An explicit resume from an invalidated iteration is refused naming retention and
        the newest whole checkpoint; nothing loads or changes."""
        invalidate(iter_path(out, 6), stage=stage)
        before = tree_sha256(out)
        ckpt, objects = open_checkpointer(out, f"resume={iter_path(out, 6)}")
        weights = objects.model.weight.detach().clone()
        with pytest.raises(CheckpointCorruptError) as info:
            ckpt.resume()
        assert str(info.value) == (
            f"local:{checkpoints(out).resolve()}/{iter_dirname(6)}: is invalidated: retention "
            "(latest 2) is deleting it, so whatever is left of it is never adopted or loaded "
            f"(resume={iter_path(out, 6)} refused; nothing was loaded). Resume from "
            "iter_000000008, the newest that holds a whole checkpoint, or use resume=auto."
        )
        assert torch.equal(objects.model.weight, weights)
        assert tree_sha256(out) == before


class TestLoadWeights:
    def test_weights_only_loads(self, out: Path) -> None:
        """load_weights accepts a weights-only iteration: its model.pt is loaded exactly."""
        mark_weights_only(iter_path(out, 4))
        before = tree_sha256(out)
        model = Objects().model
        loaded = sc.load_weights(model, iter_path(out, 4))
        saved = torch.load(iter_path(out, 4) / "model.pt", weights_only=True)
        assert loaded.iteration == 4
        assert all(torch.equal(model.state_dict()[k], v) for k, v in saved.items())
        assert tree_sha256(out) == before

    def test_newest_invalidated_passed_over(
        self, out: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """From a run, an invalidated newest iteration is passed over (warned) and the newest
        loadable one, here weights-only, is loaded."""
        invalidate(iter_path(out, 8))
        mark_weights_only(iter_path(out, 6))
        with caplog.at_level(logging.WARNING, logger="statecraft.eval"):
            loaded = sc.load_weights(Objects().model, out)
        assert loaded.iteration == 6
        assert f"{iter_dirname(8)}: is invalidated: retention (latest 2)" in warnings_of(caplog)

    def test_pinned_invalidated_refused(self, out: Path) -> None:
        """load_weights of an invalidated iteration is refused naming retention; the model is
        unchanged."""
        invalidate(iter_path(out, 6))
        model = Objects().model
        weights = model.weight.detach().clone()
        with pytest.raises(CheckpointCorruptError) as info:
            sc.load_weights(model, iter_path(out, 6))
        assert str(info.value) == (
            f"local:{checkpoints(out).resolve()}/{iter_dirname(6)}: is invalidated: retention "
            "(latest 2) is deleting it, so whatever is left of it is never adopted or loaded "
            f"(load_weights(model, {str(iter_path(out, 6))!r}) refused; nothing was loaded). "
            "Load iter_000000008, the newest whole checkpoint, or point load_weights at the run "
            "directory for the newest that verifies."
        )
        assert torch.equal(model.weight, weights)


class TestSaveRetry:
    @pytest.mark.parametrize(
        "mark",
        [
            lambda d: mark_weights_only(d, remove=False),  # optim.pt still there
            lambda d: invalidate(d, stage="marked"),
            lambda d: invalidate(d, stage="unmanifested"),
        ],
        ids=["weights-only", "invalidated", "invalidated-unmanifested"],
    )
    def test_save_never_rewrites_a_marked_iteration(self, out: Path, mark) -> None:
        """The save machine observes a marked iteration as corrupt and refuses it naming
        retention: the iteration and latest are unchanged (never rewritten, never named)."""
        mark(iter_path(out, 4))
        ckpt, _ = open_checkpointer(out)
        assert ckpt.resume().step == 8
        before = tree_sha256(iter_path(out, 4))
        pointer = (checkpoints(out) / LATEST_POINTER).read_bytes()
        with pytest.raises(CheckpointCorruptError) as info:
            save_full_checkpoint(
                ckpt.tracked,
                store_of(out),
                rng=gather_rng_inventory(rank=0, world_size=1),
                data=gather_data_state(ckpt.tracked.data, collective=ckpt.collective),
                step=4,
                lease=None,
                machine=load_machine("save"),
                location=str(checkpoints(out)),
            )
        entry = classify(store_of(out), 4, level="manifest")
        assert str(info.value) == (
            f"local:{checkpoints(out).resolve()}/{iter_dirname(4)}: is {entry.reason}; a save "
            "never rewrites an iteration retention has pruned or is deleting, and latest never "
            "names one. Nothing was touched. Resume from the newest committed checkpoint "
            "(resume=auto) instead of saving this step again."
        )
        assert tree_sha256(iter_path(out, 4)) == before
        assert (checkpoints(out) / LATEST_POINTER).read_bytes() == pointer
        ckpt.close()


DECISION = RetentionDecision(
    8,
    "optimizer: latest 1; model: latest 3",
    (
        DecisionRow(8, RetentionAction.KEEP, ("latest 1", "latest 3", "newest committed")),
        DecisionRow(6, RetentionAction.WEIGHTS_ONLY, ("latest 3",), "beyond keep_optim_last=1"),
        DecisionRow(4, RetentionAction.WEIGHTS_ONLY, ("latest 3",), "beyond keep_optim_last=1"),
        DecisionRow(2, RetentionAction.DELETE, (), "beyond keep_model_last=3"),
    ),
)


def retained(out: Path, *, decision: bool = True) -> None:
    """8 whole; 6 weights-only; 4 marked weights-only with optim.pt still there; 2 being
    deleted (manifest gone); with the decision record of that pass."""
    mark_weights_only(iter_path(out, 6))
    mark_weights_only(iter_path(out, 4), remove=False)
    invalidate(iter_path(out, 2), stage="unmanifested", policy="latest 3")
    if decision:
        write_decision(checkpoints(out), DECISION)


class TestInspect:
    def test_json_rows(self, out: Path) -> None:
        """inspect --json reports each state, the marker's policy, the kept-by policies and
        action of the last pass, and the pass itself; the decision file is not an 'other
        entry'; nothing on disk changes."""
        retained(out)
        before = tree_sha256(out)
        data = inspect_path(RUN.job_dir(out), verify=True)
        (attempt,) = data["attempts"]
        report = attempt["checkpoints"]
        rows = {
            it["iteration"]: (it["state"], it["policy"], it["kept_by"], it["retention_action"])
            for it in report["iterations"]
        }
        assert rows == {
            8: ("committed", None, ["latest 1", "latest 3", "newest committed"], "keep"),
            6: ("weights_only", "latest 1", ["latest 3"], "weights_only"),
            4: ("weights_only", "latest 1", ["latest 3"], "weights_only"),
            2: ("invalidated", "latest 3", [], "delete"),
        }
        reasons = {it["iteration"]: it["reason"] for it in report["iterations"]}
        assert reasons[6] == WEIGHTS_ONLY_REASON
        assert reasons[2] == INVALIDATED_REASON.replace("latest 2", "latest 3")
        assert report["retention"] == {
            "saved_iteration": 8,
            "policy": "optimizer: latest 1; model: latest 3",
            "rows": [
                {
                    "iteration": r.iteration,
                    "action": r.action.value,
                    "kept_by": list(r.kept_by),
                    "reason": r.reason,
                }
                for r in DECISION.rows
            ],
        }
        assert report["other_entries"] == []
        assert data["resume_auto"]["pick"] == iter_dirname(8)
        assert tree_sha256(out) == before

    def test_without_a_decision_record(self, out: Path) -> None:
        """Without a decision record the kept-by fields are blank (None), the states and
        policies still shown."""
        retained(out, decision=False)
        (attempt,) = inspect_path(RUN.job_dir(out))["attempts"]
        report = attempt["checkpoints"]
        assert report["retention"] is None
        assert [(it["state"], it["kept_by"]) for it in report["iterations"]] == [
            ("committed", None),
            ("weights_only", None),
            ("weights_only", None),
            ("invalidated", None),
        ]

    def test_text(self, out: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """The text shows weights-only and invalidated rows with why, the kept-by column,
        the markers and the pruned optim.pt, and the last pass; resume=auto passes over
        nothing newer than iter 8."""
        retained(out)
        assert main(["inspect", str(RUN.job_dir(out))]) == 0
        text = capsys.readouterr().out
        lines = [line.strip() for line in text.splitlines()]
        row = {line.split()[0]: line for line in lines if line.startswith("iter_")}
        assert row[iter_dirname(8)].endswith("kept by: latest 1, latest 3, newest committed")
        assert row[iter_dirname(6)].split()[1] == "weights-only"
        assert row[iter_dirname(6)].endswith("kept by: latest 3")
        assert row[iter_dirname(2)].split()[1] == "invalidated"
        assert "kept by" not in row[iter_dirname(2)]
        assert f"why: {WEIGHTS_ONLY_REASON}" in lines
        assert f"why: {INVALIDATED_REASON.replace('latest 2', 'latest 3')}" in lines
        assert any(
            line.startswith(WEIGHTS_ONLY_MARKER) and line.endswith("(retention marker)")
            for line in lines
        )
        assert any(
            line.startswith("optim.pt") and line.endswith("(removed by retention)")
            for line in lines
        )
        assert (
            "last retention pass: after iter_000000008 under optimizer: latest 1; model: latest 3"
        ) in lines
        assert "(not in the manifest)" not in text  # what is left of iter 2 is being deleted
        assert "(not a checkpoint)" not in text

    def test_explicit_weights_only_iteration(self, out: Path) -> None:
        """inspect of a weights-only iter_* says resume=PATH would be refused, with the
        refusal resume raises (policy, newest resumable, the fix)."""
        retained(out)
        data = inspect_path(iter_path(out, 6))
        path = str(iter_path(out, 6).resolve())
        where = f"local:{checkpoints(out).resolve()}/{iter_dirname(6)}"
        assert data["explicit_resume"] == {
            "accepted": False,
            "reason": (
                f"resume={path} would be refused: {where} is weights-only: its optimizer state "
                "was removed by retention (latest 1); it holds weights and trainer state for "
                "evaluation (statecraft.load_weights) but cannot resume exactly; resume from "
                "iter_000000008, the newest that holds its optimizer, or set keep_optim_last=0 "
                "to keep optimizer state. Nothing was loaded"
            ),
        }

    def test_explicit_invalidated_iteration(self, out: Path) -> None:
        """inspect of an invalidated iter_* says resume=PATH would be refused naming
        retention."""
        retained(out)
        data = inspect_path(iter_path(out, 2))
        reason = data["explicit_resume"]["reason"]
        assert data["explicit_resume"]["accepted"] is False
        assert f"resume={iter_path(out, 2).resolve()} would be refused: local:" in reason
        assert "is invalidated: retention (latest 3) is deleting it" in reason
        assert "Resume from iter_000000008, the newest that holds a whole checkpoint" in reason
