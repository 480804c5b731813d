"""The checkpoint catalog: every iteration's state and reason, the latest pointer, the
auto-pick, and on-demand verification (resume hashes only what it tries)."""

from __future__ import annotations

from pathlib import Path

import pytest
from checkpoint_runs import RUN, committed_run, flip_tensor_bit, private_copy
from validation_runs import METRICS, PENDING, save_pending, write_evaluated, write_published
from validation_runs import checkpoints_of as pending_checkpoints

from statecraft.checkpoint.kernel import catalog_verified as catalog_module
from statecraft.checkpoint.kernel.catalog import (
    CheckpointState,
    Depth,
    LatestState,
    classify,
    scan,
)
from statecraft.checkpoint.kernel.layout import LATEST_POINTER, MANIFEST_NAME, iter_dirname
from statecraft.checkpoint.kernel.validation_records import EVALUATED_RECORD, ValidationStage
from statecraft.errors import CheckpointError
from statecraft.storage.local import LocalStore


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Committed iterations 2, 4, 6 and 8 of a run with a data source."""
    return committed_run(tmp_path_factory.mktemp("pristine"), data=True)


@pytest.fixture
def out(pristine: Path, tmp_path: Path) -> Path:
    return private_copy(pristine, tmp_path)


def checkpoints(out: Path) -> Path:
    job = RUN.job_dir(out)
    return next(p for p in job.iterdir() if p.is_dir()) / "checkpoints"


def store_of(out: Path) -> LocalStore:
    return LocalStore(str(checkpoints(out)))


class TestStates:
    def test_every_state_with_its_reason(self, out: Path) -> None:
        """absent, partial (no manifest), corrupt (digest mismatch, with the file named) and
        committed are told apart, each with its reason."""
        (checkpoints(out) / iter_dirname(4) / MANIFEST_NAME).unlink()
        flip_tensor_bit(checkpoints(out) / iter_dirname(6) / "model.pt")
        catalog = scan(store_of(out), level="digest")
        assert catalog.iterations == (8, 6, 4, 2)
        states = {e.iteration: e.state for e in catalog.entries()}
        assert states == {
            8: CheckpointState.COMMITTED,
            6: CheckpointState.CORRUPT,
            4: CheckpointState.PARTIAL,
            2: CheckpointState.COMMITTED,
        }
        assert "iter_000000006/model.pt: digest xxh3_128" in catalog.entry(6).reason
        assert "has no manifest (an interrupted save)" in catalog.entry(4).reason
        assert catalog.entry(8).reason == ""
        assert catalog.entry(8).verified is not None
        missing = catalog.entry(10)
        assert missing.state is CheckpointState.ABSENT
        assert missing.reason == "iter_000000010 does not exist"

    def test_size_level_does_not_see_a_flipped_bit(self, out: Path) -> None:
        """At level 'size' a same-size bit flip is committed; at 'digest' it is corrupt."""
        flip_tensor_bit(checkpoints(out) / iter_dirname(8) / "optim.pt")
        assert classify(store_of(out), 8, level="size").state is CheckpointState.COMMITTED
        assert classify(store_of(out), 8, level="digest").state is CheckpointState.CORRUPT

    def test_not_the_full_plan_is_corrupt(self, out: Path) -> None:
        """A manifest without optim.pt is refused as not the full plan, naming what it lacks."""
        import json

        path = checkpoints(out) / iter_dirname(8) / MANIFEST_NAME
        record = json.loads(path.read_text())
        del record["files"]["optim.pt"]
        path.write_text(json.dumps(record))
        entry = classify(store_of(out), 8, level="size")
        assert entry.state is CheckpointState.CORRUPT
        assert "does not describe a full exact-resume checkpoint" in entry.reason
        assert "it lacks ['optim.pt'], required by the checkpoint plan" in entry.reason

    def test_manifest_level_only_parses_the_manifest(self, out: Path) -> None:
        """Level 'manifest' (the save observation) accepts a commit whose file is truncated;
        an unparsable manifest is corrupt at every level."""
        (checkpoints(out) / iter_dirname(8) / "model.pt").write_bytes(b"x")
        assert classify(store_of(out), 8, level="manifest").state is CheckpointState.COMMITTED
        (checkpoints(out) / iter_dirname(6) / MANIFEST_NAME).write_bytes(b"{not json")
        for level in ("manifest", "size", "digest"):
            assert classify(store_of(out), 6, level=level).state is CheckpointState.CORRUPT

    def test_unknown_level_is_refused(self, out: Path) -> None:
        """A level that is not manifest / size / digest is refused, listing the levels."""
        with pytest.raises(CheckpointError, match=r"one of \['manifest', 'size', 'digest'\]"):
            scan(store_of(out), level="quick")


class TestDepths:
    def test_the_cheap_depths_open_no_bulk_file(
        self, out: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Depth STAT (retention's reading) sees a missing file but not a same-size bit flip,
        and never verifies; depth LISTING reads no manifest (a committed iteration is
        UNREAD); both carry each directory's listing."""
        (checkpoints(out) / iter_dirname(4) / MANIFEST_NAME).unlink()
        flip_tensor_bit(checkpoints(out) / iter_dirname(6) / "model.pt")
        (checkpoints(out) / iter_dirname(2) / "optim.pt").unlink()

        def refuse(*_: object, **__: object) -> None:
            raise AssertionError("a cheap depth verified a checkpoint")

        monkeypatch.setattr(catalog_module, "verify_checkpoint", refuse)
        stat = {e.iteration: e for e in scan(store_of(out), depth=Depth.STAT).entries()}
        assert {i: e.state for i, e in stat.items()} == {
            8: CheckpointState.COMMITTED,
            6: CheckpointState.COMMITTED,
            4: CheckpointState.PARTIAL,
            2: CheckpointState.CORRUPT,
        }
        assert "optim.pt is missing" in stat[2].reason
        assert MANIFEST_NAME in stat[8].names
        listing = scan(store_of(out), depth=Depth.LISTING)
        assert [e.state for e in listing.entries()] == [
            CheckpointState.UNREAD,
            CheckpointState.UNREAD,
            CheckpointState.PARTIAL,
            CheckpointState.UNREAD,
        ]
        assert listing.pick().chosen is None


class TestLatest:
    @pytest.mark.parametrize(
        ("content", "state", "iteration"),
        [
            (b"iter_000000008\n", LatestState.OK, 8),
            (None, LatestState.MISSING, None),
            (b"garbage\n", LatestState.GARBAGE, None),
            (b"iter_000000010\n", LatestState.DANGLING, 10),
        ],
    )
    def test_pointer_states(self, out: Path, content, state, iteration) -> None:
        """The pointer is ok, missing, garbage (with why) or dangling (with a note)."""
        pointer = checkpoints(out) / LATEST_POINTER
        if content is None:
            pointer.unlink()
        else:
            pointer.write_bytes(content)
        latest = scan(store_of(out)).latest
        assert (latest.state, latest.iteration) == (state, iteration)
        if state is LatestState.GARBAGE:
            assert latest.problem is not None
            assert "garbage" in latest.problem
            assert "is unreadable" in (latest.note or "")
        if state is LatestState.DANGLING:
            assert "names iter_000000010, which does not exist" in (latest.note or "")


class TestPick:
    def test_newest_committed_with_the_passed_over(self, out: Path) -> None:
        """The pick is the newest committed iteration; newer ones are passed over with why."""
        flip_tensor_bit(checkpoints(out) / iter_dirname(8) / "model.pt")
        (checkpoints(out) / iter_dirname(6) / MANIFEST_NAME).unlink()
        pick = scan(store_of(out), level="digest").pick()
        assert pick.chosen is not None
        assert pick.chosen.iteration == 4
        assert [p.name for p in pick.passed_over] == ["iter_000000008", "iter_000000006"]
        assert "digest xxh3_128" in pick.passed_over[0].reason

    def test_nothing_committed(self, tmp_path: Path) -> None:
        """An empty store picks nothing and passes over nothing."""
        pick = scan(LocalStore(str(tmp_path / "empty"))).pick()
        assert (pick.chosen, pick.passed_over) == (None, ())

    def test_verification_is_on_demand_and_remembered(
        self, out: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The pick verifies only up to the newest committed iteration, each at most once."""
        verified: list[int] = []
        real = catalog_module.verify_checkpoint

        def counting(store, iteration, **kwargs):
            verified.append(iteration)
            return real(store, iteration, **kwargs)

        monkeypatch.setattr(catalog_module, "verify_checkpoint", counting)
        catalog = scan(store_of(out))
        assert verified == []
        assert catalog.pick().chosen.iteration == 8  # type: ignore[union-attr]
        assert catalog.pick().chosen.iteration == 8  # type: ignore[union-attr]
        assert verified == [8]


@pytest.fixture(scope="module")
def pending_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Committed 2, 4, 6, 8 and 10 saved evaluation-pending (tests/validation_runs.py)."""
    out = committed_run(tmp_path_factory.mktemp("pending"), data=False)
    save_pending(out, data=False)
    return out


class TestValidationStates:
    """A durable-validation checkpoint's stage, read from trainer.pt and its visibility
    records at levels size / digest; at level manifest it stays committed."""

    @pytest.fixture
    def run(self, pending_run: Path, tmp_path: Path) -> Path:
        return private_copy(pending_run, tmp_path)

    def stage_store(self, run: Path) -> LocalStore:
        return LocalStore(str(pending_checkpoints(run)))

    @pytest.mark.parametrize("level", ["size", "digest"])
    def test_each_stage(self, run: Path, level: str) -> None:
        """evaluation-pending, then publication-pending (with metrics), then published;
        every one adoptable and picked by resume=auto."""
        assert classify(self.stage_store(run), PENDING, level=level).state is (
            CheckpointState.EVALUATION_PENDING
        )
        write_evaluated(run)
        entry = classify(self.stage_store(run), PENDING, level=level)
        assert (entry.state, entry.metrics) == (CheckpointState.PUBLICATION_PENDING, METRICS)
        write_published(run)
        entry = classify(self.stage_store(run), PENDING, level=level)
        assert (entry.state, entry.metrics) == (CheckpointState.PUBLISHED, METRICS)
        assert entry.state.validation_stage is ValidationStage.PUBLISHED
        pick = scan(self.stage_store(run), level=level).pick()
        assert pick.chosen is not None
        assert (pick.chosen.iteration, pick.chosen.kind) == (PENDING, "checkpoint")

    def test_manifest_level_stays_committed(self, run: Path) -> None:
        """At level manifest (the save machine's observation) a pending checkpoint is
        committed: trainer.pt is not read."""
        entry = classify(self.stage_store(run), PENDING, level="manifest")
        assert entry.state is CheckpointState.COMMITTED

    def test_adoptable_states(self) -> None:
        """Every committed state is adoptable; absent, partial and corrupt are not."""
        adoptable = {s for s in CheckpointState if s.adoptable}
        assert adoptable == {
            CheckpointState.COMMITTED,
            CheckpointState.EVALUATION_PENDING,
            CheckpointState.PUBLICATION_PENDING,
            CheckpointState.PUBLISHED,
        }

    def test_published_without_evaluated_does_not_publish(self, run: Path) -> None:
        """A published record with no evaluated record leaves it evaluation-pending, noted."""
        write_published(run)
        entry = classify(self.stage_store(run), PENDING, level="size")
        assert entry.state is CheckpointState.EVALUATION_PENDING
        assert any("no valid evaluated record" in note for note in entry.notes)

    def test_records_on_a_regular_checkpoint_are_ignored(self, run: Path) -> None:
        """Visibility records beside a checkpoint saved without a pending validation are
        ignored (committed), each noted."""
        write_evaluated(run, 8)
        entry = classify(self.stage_store(run), 8, level="size")
        assert entry.state is CheckpointState.COMMITTED
        assert entry.metrics is None
        assert entry.notes == (
            f"{iter_dirname(8)}/{EVALUATED_RECORD} ignored: {iter_dirname(8)} was saved without "
            "a pending validation",
        )
