"""Retention: the plan from the knobs, the pure decision (its safety rules as hypothesis
properties), and one pass over real checkpoints on a real filesystem (order, report, decision
record, idempotent rerun, pending validations and artifacts untouched, a failed removal)."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
from checkpoint_runs import NoLockStore
from hypothesis import given, settings
from hypothesis import strategies as st

from statecraft.checkpoint.config import CheckpointConfig
from statecraft.checkpoint.config.schema import UploadConfig
from statecraft.checkpoint.fencing.lease import LEASE_NAME, LEASE_SCHEMA, LeaseRecord, acquire_lease
from statecraft.checkpoint.kernel.machines import load_machine, machine_bindings
from statecraft.checkpoint.kernel.retention_records import (
    INVALIDATED_MARKER,
    RETENTION_DECISION,
    UPLOADED_MARKER,
    WEIGHTS_ONLY_MARKER,
    InvalidatedRecord,
    RetentionAction,
    read_decision,
    read_weights_only,
)
from statecraft.checkpoint.retention.bindings import RetentionContext, plan_rows
from statecraft.checkpoint.retention.policies import (
    AnyOf,
    BestN,
    EveryNSteps,
    KeepFn,
    LatestN,
    RetentionCandidate,
)
from statecraft.checkpoint.retention.run import (
    RetentionPlan,
    RetentionReport,
    decide_retention,
    run_retention,
)
from statecraft.checkpoint.retention.scan import RetentionScan, ScanKind, ScannedIteration
from statecraft.engine import Bindings, Machine
from statecraft.errors import ConfigError, RetentionError, WriterLeaseError
from statecraft.proofs.save.scenarios import save_context, shipped_machine
from statecraft.proofs.validation.scenarios import save_evaluation_pending
from statecraft.storage.filesystem import OsFilesystem
from statecraft.storage.local import LocalStore

KEEP, WEIGHTS_ONLY, DELETE = (
    RetentionAction.KEEP,
    RetentionAction.WEIGHTS_ONLY,
    RetentionAction.DELETE,
)


def actions(rows) -> dict[int, RetentionAction]:
    return {r.iteration: r.action for r in rows}


def candidates(*iterations: int, uploaded: tuple[int, ...] = ()) -> list[RetentionCandidate]:
    return [RetentionCandidate(i, None, i in uploaded) for i in iterations]


# --------------------------------------------------------------------------- the plan
class TestRetentionPlan:
    def test_defaults_resolve_keep_optim_last_to_one(self) -> None:
        """keep_optim_last=null on a local primary is LatestN(1); keep_model_last=0 keeps all."""
        plan = RetentionPlan.from_config(CheckpointConfig())
        assert plan == RetentionPlan(optimizer=LatestN(1), model=None, require_uploaded=False)
        assert plan.active
        assert plan.describe() == "optimizer: latest 1; model: keep all"

    def test_zero_keeps_everything(self) -> None:
        """keep_optim_last=0 and keep_model_last=0 give an inactive plan."""
        plan = RetentionPlan.from_config(CheckpointConfig(keep_optim_last=0))
        assert plan == RetentionPlan()
        assert not plan.active

    def test_counts_and_upload_gate(self) -> None:
        """N becomes LatestN(N) for each knob; upload.enabled turns on require_uploaded."""
        config = CheckpointConfig(
            keep_optim_last=2, keep_model_last=3, upload=UploadConfig(enabled=True)
        )
        plan = RetentionPlan.from_config(config)
        assert plan == RetentionPlan(LatestN(2), LatestN(3), require_uploaded=True)
        assert plan.describe() == "optimizer: latest 2; model: latest 3; require uploaded"

    def test_a_non_policy_is_refused_when_built(self) -> None:
        """A plan whose policy is not a RetentionPolicy is a ConfigError naming the field."""
        with pytest.raises(ConfigError, match=r"optimizer: got 'latest 1'; expected a retention"):
            RetentionPlan(optimizer="latest 1")  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match=r"require_uploaded: got 'yes'"):
            RetentionPlan(require_uploaded="yes")  # type: ignore[arg-type]

    def test_bad_knob_values_are_refused_at_config_time(self) -> None:
        """Negative knobs never reach a pass: the config refuses them."""
        with pytest.raises(ConfigError, match="keep_optim_last"):
            CheckpointConfig(keep_optim_last=-1)
        with pytest.raises(ConfigError, match="keep_model_last"):
            CheckpointConfig(keep_model_last=-2)


# --------------------------------------------------------------------------- the decision
class TestDecideRetention:
    def test_keep_optim_last_one_over_three(self) -> None:
        """Only the newest keeps its optimizer; the others become weights-only."""
        rows = decide_retention(
            candidates(2, 4, 6), RetentionPlan(optimizer=LatestN(1)), newest=6, latest=6
        )
        assert [r.iteration for r in rows] == [6, 4, 2]
        assert actions(rows) == {6: KEEP, 4: WEIGHTS_ONLY, 2: WEIGHTS_ONLY}
        assert rows[1].reason == "optimizer state not kept by latest 1"
        assert "newest committed" in rows[0].kept_by
        assert "latest 1" in rows[0].kept_by

    def test_keep_model_last_one_deletes_all_but_the_newest(self) -> None:
        """The model policy deletes every iteration it does not keep, never the newest."""
        plan = RetentionPlan(optimizer=LatestN(1), model=LatestN(1))
        rows = decide_retention(candidates(2, 4, 6), plan, newest=6, latest=6)
        assert actions(rows) == {6: KEEP, 4: DELETE, 2: DELETE}
        assert rows[2] == rows[2].__class__(2, DELETE, (), "not kept by latest 1")

    def test_latest_is_kept_whole_even_when_older(self) -> None:
        """The iteration latest names is never pruned, even if a policy would."""
        plan = RetentionPlan(optimizer=LatestN(1), model=LatestN(1))
        rows = decide_retention(candidates(2, 4, 6), plan, newest=6, latest=4)
        assert actions(rows) == {6: KEEP, 4: KEEP, 2: DELETE}
        assert "named by latest" in rows[1].kept_by

    def test_require_uploaded_keeps_the_only_copy(self) -> None:
        """With require_uploaded an iteration without .uploaded is kept whole."""
        plan = RetentionPlan(optimizer=LatestN(1), model=LatestN(1), require_uploaded=True)
        rows = decide_retention(candidates(2, 4, 6, uploaded=(2,)), plan, newest=6, latest=6)
        assert actions(rows) == {6: KEEP, 4: KEEP, 2: DELETE}
        assert rows[1].kept_by == ("not uploaded",)

    def test_weights_only_stay_weights_only_or_go(self) -> None:
        """A weights-only candidate is judged by the model policy only and never kept whole."""
        rows = decide_retention(
            candidates(2, 4, 6),
            RetentionPlan(optimizer=LatestN(3), model=LatestN(2)),
            newest=6,
            latest=6,
            weights_only=(2, 4),
        )
        assert actions(rows) == {6: KEEP, 4: WEIGHTS_ONLY, 2: DELETE}
        assert rows[1].reason == "optimizer state already removed"

    def test_newest_with_optimizer_is_kept_when_the_newest_is_weights_only(self) -> None:
        """If the newest committed lost its optimizer (by hand), the newest that holds one is
        kept whole: an exact-resume checkpoint always remains."""
        plan = RetentionPlan(optimizer=LatestN(1), model=LatestN(1))
        rows = decide_retention(candidates(2, 4, 6), plan, newest=6, latest=6, weights_only=(6,))
        assert actions(rows) == {6: WEIGHTS_ONLY, 4: KEEP, 2: DELETE}
        assert rows[1].kept_by == ("newest with optimizer", "latest 1")

    def test_any_of_names_the_member_that_keeps(self) -> None:
        """A composite names each member that keeps an iteration (inspect's kept-by column)."""
        metrics = {2: 0.1, 4: 0.5, 6: 0.9}
        cands = [RetentionCandidate(i, {"val_loss": m}) for i, m in metrics.items()]
        model = AnyOf((LatestN(1), BestN(1, "val_loss")))
        rows = decide_retention(cands, RetentionPlan(model=model), newest=6, latest=6)
        assert actions(rows) == {6: KEEP, 4: DELETE, 2: KEEP}
        assert rows[2].kept_by == ("best 1 by val_loss (min)",)

    def test_keep_fn_sees_iteration_names(self) -> None:
        """KeepFn receives iter_<9 digits> names, newest first, and its set is honoured."""
        seen: list[list[str]] = []

        def keep(names: list[str]) -> set[str]:
            seen.append(names)
            return {"iter_000000002"}

        rows = decide_retention(
            candidates(2, 4, 6), RetentionPlan(optimizer=KeepFn(keep)), newest=6, latest=6
        )
        assert seen == [["iter_000000006", "iter_000000004", "iter_000000002"]]
        assert actions(rows) == {6: KEEP, 4: WEIGHTS_ONLY, 2: KEEP}

    def test_keep_fn_bad_result_is_refused(self) -> None:
        """A keep_fn returning something other than a set of names is a ConfigError naming it."""
        plan = RetentionPlan(optimizer=KeepFn(lambda names: 3, label="my_keep"))
        with pytest.raises(ConfigError, match=r"my_keep\(\.\.\.\) result: got 3"):
            decide_retention(candidates(2, 4), plan, newest=4, latest=4)

    def test_no_candidates_no_rows(self) -> None:
        """Nothing counted, nothing decided."""
        assert (
            decide_retention([], RetentionPlan(optimizer=LatestN(1)), newest=0, latest=None) == ()
        )


_POLICIES = st.one_of(
    st.none(),
    st.integers(1, 4).map(LatestN),
    st.integers(1, 5).map(EveryNSteps),
    st.tuples(st.integers(1, 3), st.sampled_from(["min", "max"])).map(
        lambda t: BestN(t[0], "val_loss", mode=t[1])
    ),
    st.integers(1, 3).map(lambda n: AnyOf((LatestN(n), BestN(1, "val_loss")))),
)


@st.composite
def _situations(draw):
    iterations = draw(st.lists(st.integers(0, 40), min_size=1, max_size=8, unique=True))
    cands = [
        RetentionCandidate(
            i,
            draw(st.one_of(st.none(), st.floats(0, 10).map(lambda v: {"val_loss": v}))),
            draw(st.booleans()),
        )
        for i in iterations
    ]
    marked = draw(st.sets(st.sampled_from(iterations)))
    plan = RetentionPlan(draw(_POLICIES), draw(_POLICIES), draw(st.booleans()))
    latest = draw(st.one_of(st.none(), st.sampled_from(iterations)))
    return cands, marked, plan, latest


class TestDecisionProperties:
    @settings(max_examples=200, deadline=None)
    @given(_situations())
    def test_safety_rules_hold_for_every_plan(self, situation) -> None:
        """For any candidates and plan: one row each; the newest, the newest with optimizer,
        latest and (gated) un-uploaded ones are never deleted nor newly pruned; only the model
        policy deletes; only the optimizer policy prunes; what the policies keep survives."""
        cands, marked, plan, latest = situation
        newest = max(c.iteration for c in cands)
        rows = decide_retention(cands, plan, newest=newest, latest=latest, weights_only=marked)
        got = actions(rows)
        assert sorted(got) == sorted(c.iteration for c in cands)
        assert [r.iteration for r in rows] == sorted(got, reverse=True)
        holders = [c.iteration for c in cands if c.iteration not in marked]
        protected = {newest, *([max(holders)] if holders else []), latest}
        if plan.require_uploaded:
            protected |= {c.iteration for c in cands if not c.uploaded}
        for it in protected - {None}:
            assert got[it] is not DELETE
            assert got[it] is (WEIGHTS_ONLY if it in marked else KEEP)
        for it in marked:
            assert got[it] is not KEEP  # a weights-only iteration never becomes whole again
        if plan.model is None:
            assert DELETE not in got.values()
        else:
            for it in plan.model.keep(cands):
                assert got[it] is not DELETE
        if plan.optimizer is None:
            assert all(got[it] in (KEEP, DELETE) for it in got if it not in marked)
        else:
            survivors = [c for c in cands if got[c.iteration] is not DELETE]
            whole = [c for c in survivors if c.iteration not in marked]
            for it in plan.optimizer.keep(whole):
                assert got[it] is KEEP
        for row in rows:
            assert bool(row.kept_by) == (row.action is not DELETE)


# --------------------------------------------------------------------------- a real pass
def commit(store: LocalStore, iteration: int) -> None:
    ctx = save_context(store, iteration, with_data=False, salt=0)
    shipped_machine("save").recover(ctx).raise_for_failure()


def commit_pending(store: LocalStore, iteration: int, root: str) -> None:
    save_evaluation_pending(store, iteration, salt=0, location=root)


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def files_of(snapshot: dict[str, bytes], iteration: int) -> dict[str, bytes]:
    prefix = f"iter_{iteration:09d}/"
    return {k: v for k, v in snapshot.items() if k.startswith(prefix)}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "run" / "checkpoints"
    path.mkdir(parents=True)
    artifacts = tmp_path / "run" / "checkpoint_artifacts" / "iter_000000003"
    artifacts.mkdir(parents=True)
    (artifacts / "model.pt").write_bytes(b"an artifact")
    return path


class TestRunRetention:
    def test_a_pass_prunes_deletes_sweeps_and_records(self, root: Path) -> None:
        """keep_optim_last=1, keep_model_last=2 over four checkpoints and a partial leftover:
        iter 8 whole, 6 weights-only, 4 and 2 deleted, the partial swept, the decision
        recorded, kept bytes unchanged, artifacts untouched."""
        store = LocalStore(root)
        for it in (2, 4, 6, 8):
            commit(store, it)
        (root / "iter_000000005").mkdir()
        (root / "iter_000000005" / "model.pt").write_bytes(b"half")
        before = tree(root)
        artifacts = tree(root.parent / "checkpoint_artifacts")
        plan = RetentionPlan(optimizer=LatestN(1), model=LatestN(2))
        report = run_retention(store, plan, saved_iteration=8, lease=None)
        assert isinstance(report, RetentionReport)
        assert (report.weights_only, report.deleted, report.garbage) == (
            (6,),
            (4, 2),
            ("iter_000000005",),
        )
        after = tree(root)
        assert files_of(after, 8) == files_of(before, 8)
        assert sorted(p.name for p in root.iterdir()) == [
            RETENTION_DECISION,
            "iter_000000006",
            "iter_000000008",
            "latest_checkpoint.txt",
        ]
        assert not (root / "iter_000000006" / "optim.pt").exists()
        for name in ("model.pt", "trainer.pt", ".posttrain-manifest.json"):
            key = f"iter_000000006/{name}"
            assert after[key] == before[key]
        assert read_weights_only(store, 6).policy == "latest 1"
        decision = read_decision(store)
        assert decision == report.decision
        assert decision is not None
        assert decision.policy == plan.describe()
        assert tree(root.parent / "checkpoint_artifacts") == artifacts

    def test_a_rerun_changes_nothing(self, root: Path) -> None:
        """A second pass with the same plan removes nothing and leaves every checkpoint byte as it
        was (only the decision record is rewritten, with the same action per iteration)."""
        store = LocalStore(root)
        for it in (2, 4, 6):
            commit(store, it)
        plan = RetentionPlan(optimizer=LatestN(1), model=LatestN(2))
        run_retention(store, plan, saved_iteration=6, lease=None)
        settled = tree(root)
        again = run_retention(store, plan, saved_iteration=6, lease=None)
        assert not again.changed
        now = tree(root)
        assert now.pop(RETENTION_DECISION)
        assert settled.pop(RETENTION_DECISION)
        assert now == settled
        assert actions(again.decision.rows) == {6: KEEP, 4: WEIGHTS_ONLY}

    def test_pending_validation_is_never_touched(self, root: Path) -> None:
        """A checkpoint whose validation is pending is neither counted nor touched."""
        store = LocalStore(root)
        commit(store, 2)
        commit_pending(store, 4, str(root))
        commit(store, 6)
        before = tree(root)
        report = run_retention(
            store, RetentionPlan(LatestN(1), LatestN(1)), saved_iteration=6, lease=None
        )
        assert report.deleted == (2,)
        assert files_of(tree(root), 4) == files_of(before, 4)
        row = next(r for r in report.decision.rows if r.iteration == 4)
        assert (row.action, row.kept_by) == (KEEP, ("validation pending",))

    def test_inactive_plan_still_finishes_invalidated_and_garbage(self, root: Path) -> None:
        """With no policy, a pass records nothing but finishes an invalidated leftover and
        removes an older partial directory; committed iterations are untouched."""
        store = LocalStore(root)
        for it in (2, 4):
            commit(store, it)
        store.create_exclusive(
            f"iter_000000002/{INVALIDATED_MARKER}", InvalidatedRecord(2, "latest 1").encode()
        )
        (root / "iter_000000003").mkdir()
        before = tree(root)
        report = run_retention(store, RetentionPlan(), saved_iteration=4, lease=None)
        assert (report.deleted, report.garbage) == ((2,), ("iter_000000003",))
        assert not (root / RETENTION_DECISION).exists()
        assert files_of(tree(root), 4) == files_of(before, 4)
        assert sorted(p.name for p in root.iterdir()) == ["iter_000000004", "latest_checkpoint.txt"]

    def test_nothing_to_do_is_a_no_op(self, root: Path) -> None:
        """An inactive plan over whole checkpoints writes nothing and reports nothing."""
        store = LocalStore(root)
        commit(store, 2)
        before = tree(root)
        report = run_retention(store, RetentionPlan(), saved_iteration=2, lease=None)
        assert not report.changed
        assert report.decision.rows == ()
        assert tree(root) == before

    def test_require_uploaded_prunes_only_uploaded(self, root: Path) -> None:
        """Only iterations holding .uploaded are pruned; the others stay whole."""
        store = LocalStore(root)
        for it in (2, 4, 6):
            commit(store, it)
        (root / "iter_000000002" / UPLOADED_MARKER).write_bytes(b"uploaded\n")
        before = tree(root)
        plan = RetentionPlan(optimizer=LatestN(1), require_uploaded=True)
        report = run_retention(store, plan, saved_iteration=6, lease=None)
        assert report.weights_only == (2,)
        assert files_of(tree(root), 4) == files_of(before, 4)

    def test_a_failed_removal_names_the_path_and_keeps_the_save(self, root: Path) -> None:
        """A removal the filesystem refuses raises RetentionError naming the file, saying the
        saved iteration is committed and durable and the fix; the iteration is left marked
        weights-only and everything committed and kept is unchanged; a later pass finishes."""

        class RefusingUnlink(OsFilesystem):
            def unlink(self, path: str) -> None:
                if path.endswith("/optim.pt"):
                    raise PermissionError(errno.EACCES, "Permission denied", path)
                super().unlink(path)

        for it in (2, 4):
            commit(LocalStore(root), it)
        before = tree(root)
        store = LocalStore(root, fs=RefusingUnlink())
        with pytest.raises(RetentionError) as caught:
            run_retention(store, RetentionPlan(optimizer=LatestN(1)), saved_iteration=4, lease=None)
        message = str(caught.value)
        assert f"{root}/iter_000000002/optim.pt" in message
        assert "PermissionError" in message
        assert "iter_000000004 is committed and durable and latest names it" in message
        assert "keep_optim_last=0 and keep_model_last=0" in message
        assert caught.value.iteration == 4
        after = tree(root)
        assert files_of(after, 4) == files_of(before, 4)
        assert after["latest_checkpoint.txt"] == before["latest_checkpoint.txt"]
        marker = json.loads(after[f"iter_000000002/{WEIGHTS_ONLY_MARKER}"])
        assert marker["policy"] == "latest 1"
        assert (root / "iter_000000002" / "optim.pt").exists()
        report = run_retention(
            LocalStore(root), RetentionPlan(optimizer=LatestN(1)), saved_iteration=4, lease=None
        )
        assert report.weights_only == (2,)
        assert not (root / "iter_000000002" / "optim.pt").exists()


class TestRetentionRefusals:
    def test_a_lease_taken_over_stops_the_pass_before_any_removal(self, root: Path) -> None:
        """When another process took the attempt over, the pass raises WriterLeaseError and
        removes nothing (not even a marker is published)."""
        store = LocalStore(root)
        for it in (2, 4):
            commit(store, it)
        lease = acquire_lease(NoLockStore(LocalStore(root.parent)))
        lease.check()
        thief = LeaseRecord(
            LEASE_SCHEMA, "other:1:abc", "elsewhere", 12345, 2, "2026-01-01T00:00:00+00:00"
        )
        (root.parent / LEASE_NAME).write_bytes(thief.encode())
        before = tree(root)
        with pytest.raises(WriterLeaseError, match="taken over by owner other:1:abc"):
            run_retention(
                store, RetentionPlan(LatestN(1), LatestN(1)), saved_iteration=4, lease=lease
            )
        assert tree(root) == before

    def test_the_fence_refuses_a_path_the_decision_did_not_give(self, root: Path) -> None:
        """An effect that would remove a kept iteration is refused by the fence with a
        RetentionError naming the path; nothing changes."""
        store = LocalStore(root)
        for it in (2, 4):
            commit(store, it)

        def sweep_the_newest(ctx) -> None:
            ctx.fenced.delete_tree("iter_000000004")

        merged = machine_bindings("retention").merged(
            Bindings(effects={"sweep_garbage": sweep_the_newest})
        )
        broken = Machine(load_machine("retention").table, merged)
        before = tree(root)
        with pytest.raises(RetentionError) as caught:
            run_retention(
                store, RetentionPlan(optimizer=LatestN(5)), saved_iteration=4, lease=None,
                machine=broken,
            )  # fmt: skip
        assert f"{root}/iter_000000004: retention refused to touch it" in str(caught.value)
        assert "did not give it to retention. Nothing was changed" in str(caught.value)
        assert caught.value.iteration == 4
        assert tree(root) == before


@st.composite
def _scans(draw):
    iterations = draw(st.lists(st.integers(0, 30), min_size=1, max_size=8, unique=True))
    kinds = [draw(st.sampled_from(list(ScanKind))) for _ in iterations]
    entries = tuple(
        ScannedIteration(i, k, uploaded=draw(st.booleans()))
        for i, k in sorted(zip(iterations, kinds, strict=True), reverse=True)
    )
    plan = RetentionPlan(draw(_POLICIES), draw(_POLICIES), draw(st.booleans()))
    return RetentionScan(entries, draw(st.one_of(st.none(), st.sampled_from(iterations)))), plan


class TestPassDecisionProperties:
    @settings(max_examples=200, deadline=None)
    @given(_scans())
    def test_only_counted_iterations_are_pruned(self, drawn) -> None:
        """For any disk: a pending validation is never pruned nor deleted (a KEEP row saying
        why), a partial, corrupt or unread directory gets no row, an invalidated leftover is
        always finished, and the newest committed is never pruned."""
        scan, plan = drawn
        ctx = RetentionContext(None, plan, max(e.iteration for e in scan.entries))  # type: ignore[arg-type]
        got = {r.iteration: r for r in plan_rows(ctx, scan)}
        for e in scan.entries:
            if e.kind is ScanKind.PENDING:
                assert (
                    (e.iteration not in got) if not plan.active else got[e.iteration].action is KEEP
                )
            elif e.kind in (ScanKind.PARTIAL, ScanKind.OTHER, ScanKind.UNREAD):
                assert e.iteration not in got
            elif e.kind is ScanKind.INVALIDATED:
                assert got[e.iteration].action is DELETE
        if plan.active and scan.committed:
            newest = max(scan.committed)
            if newest in got:
                assert got[newest].action is not DELETE
                kind = next(e.kind for e in scan.entries if e.iteration == newest)
                assert got[newest].action is (
                    WEIGHTS_ONLY if kind is ScanKind.WEIGHTS_ONLY else KEEP
                )
