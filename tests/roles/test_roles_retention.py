"""Retention of multi-role boundaries: ``keep_model_last`` (or a ``RetentionPlan``'s model
policy) deletes the boundaries it does not keep after each boundary commits, each ``_SUCCESS``
first; the newest boundary is never deleted; a crashed save's partial is swept; a damaged
boundary is left alone; and the crash harness proves ``specs/roles_prune.toml`` and catches
every declared broken variant (roles deleted before the marker among them)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from role_runs import RUN, SYNC, Pair, open_roles, roles_dir, run_loop

import statecraft as sc
from statecraft.cli.crashcheck import crashcheck
from statecraft.engine import load_spec
from statecraft.proofs import ExploreOptions, explore
from statecraft.proofs.roles import prune_broken
from statecraft.resources import spec_path
from statecraft.storage import CrashKind

SPEC = load_spec(spec_path("roles_prune"))
KILL_AND_POWER = ExploreOptions(
    extra_subsets=0, faults=False, kinds=(CrashKind.PROCESS_KILL, CrashKind.POWER_LOSS)
)


def boundaries(out: Path) -> list[str]:
    return sorted(p.name for p in roles_dir(out).iterdir())


def loop(out: Path, start: int, stop: int, *overrides: str, **kwargs: object) -> Pair:
    ckpt, pair, policy, critic = open_roles(out, *SYNC, *overrides, **kwargs)  # type: ignore[arg-type]
    begun = ckpt.resume()
    assert begun.step == start
    run_loop(ckpt, pair, policy, critic, start, stop)
    ckpt.finalize()
    ckpt.close()
    return pair


class TestKeepModelLast:
    def test_keeps_the_newest_n_boundaries(self, tmp_path: Path) -> None:
        """keep_model_last=2 over five boundaries: iter 4 and 5 stay, each whole, and the
        next run adopts 5."""
        loop(tmp_path, 0, 5, "keep_model_last=2")
        assert boundaries(tmp_path) == ["iter_000000004", "iter_000000005"]
        for name in boundaries(tmp_path):
            assert (roles_dir(tmp_path) / name / "_SUCCESS").is_file()
            assert (roles_dir(tmp_path) / name / "critic" / "optim.pt").is_file()
        loop(tmp_path, 5, 6, "keep_model_last=2")
        assert boundaries(tmp_path) == ["iter_000000005", "iter_000000006"]

    def test_keep_model_last_one_keeps_the_saved_boundary(self, tmp_path: Path) -> None:
        """keep_model_last=1: only the newest boundary is left, and it is adoptable."""
        loop(tmp_path, 0, 3, "keep_model_last=1")
        assert boundaries(tmp_path) == ["iter_000000003"]
        loop(tmp_path, 3, 4, "keep_model_last=1")

    def test_async_boundaries_are_pruned_inside_their_write(self, tmp_path: Path) -> None:
        """save_async: the pass runs in the boundary's background write; finalize joins it."""
        ckpt, pair, policy, critic = open_roles(tmp_path, "save_async=true", "keep_model_last=2")
        ckpt.resume()
        run_loop(ckpt, pair, policy, critic, 0, 4)
        ckpt.finalize()
        ckpt.close()
        assert boundaries(tmp_path) == ["iter_000000003", "iter_000000004"]

    def test_default_keeps_every_boundary(self, tmp_path: Path) -> None:
        """keep_model_last=0 (the default): every boundary stays; keep_optim_last does not
        apply to boundaries (kept whole or deleted whole)."""
        loop(tmp_path, 0, 3, "keep_optim_last=1")
        assert boundaries(tmp_path) == [f"iter_00000000{i}" for i in (1, 2, 3)]
        for name in boundaries(tmp_path):
            assert (roles_dir(tmp_path) / name / "policy" / "optim.pt").is_file()

    def test_a_retention_plan_model_policy_applies(self, tmp_path: Path) -> None:
        """Checkpointer(retention=RetentionPlan(model=EveryNSteps(2))): the even boundaries
        and the newest stay."""
        pair = Pair()
        ckpt = sc.Checkpointer(
            sc.CheckpointConfig.load(None, list(SYNC)), run=RUN, output_root=tmp_path,
            quiet=True, retention=sc.RetentionPlan(model=sc.EveryNSteps(2)),
        )  # fmt: skip
        policy = ckpt.track_role("policy", model=pair.actor, optimizer=pair.actor_opt)
        critic = ckpt.track_role("critic", model=pair.critic, optimizer=pair.critic_opt)
        ckpt.resume()
        run_loop(ckpt, pair, policy, critic, 0, 5)
        ckpt.close()
        assert boundaries(tmp_path) == ["iter_000000002", "iter_000000004", "iter_000000005"]


class TestLeftovers:
    def test_a_crashed_saves_partial_is_swept_and_a_damaged_one_kept(self, tmp_path: Path) -> None:
        """A partial boundary older than the saved one (a copy without _SUCCESS) is removed
        by the next pass; a boundary whose _SUCCESS does not decode is never touched; a
        partial newer than the saved one is left to its own save."""
        loop(tmp_path, 0, 3)
        root = roles_dir(tmp_path)
        shutil.copytree(root / "iter_000000002", root / "iter_000000000")
        (root / "iter_000000000" / "_SUCCESS").unlink()
        (root / "iter_000000001" / "_SUCCESS").write_text("{not json")
        loop(tmp_path, 3, 4)
        assert boundaries(tmp_path) == [f"iter_00000000{i}" for i in (1, 2, 3, 4)]
        assert (root / "iter_000000001" / "_SUCCESS").read_text() == "{not json"

    def test_never_deletes_the_newest_committed_boundary(self, tmp_path: Path) -> None:
        """A save of an iteration older than the newest committed boundary: the newest stays
        (and the saved one) whatever keep_model_last says."""
        loop(tmp_path, 0, 4, "keep_model_last=1")
        ckpt, _, policy, critic = open_roles(tmp_path, *SYNC, "keep_model_last=1")
        ckpt.resume()
        for role in (policy, critic):
            role.record(sc.Outcome.APPLIED)
        ckpt.save(iteration=2)
        ckpt.close()
        assert boundaries(tmp_path) == ["iter_000000002", "iter_000000004"]


class TestProof:
    def test_crashcheck_proves_every_guarantee_substantively(self) -> None:
        reports, scenario_reports = crashcheck(["roles_prune"], ExploreOptions(extra_subsets=0))
        for report in reports:
            assert report.violations == (), report.violations[0].reproducer()
            assert report.vacuous == ()
        substantive = {g.id: 0 for g in SPEC.guarantees}
        for s in scenario_reports:
            for g_id, n in s.substantive_by_guarantee.items():
                substantive[g_id] += n
        assert all(n > 0 for n in substantive.values()), substantive

    @pytest.mark.parametrize(
        ("variant", "guarantee"),
        [
            (prune_broken.roles_before_marker, "RP-MARKER-WHOLE"),
            (prune_broken.marker_removal_not_durable, "RP-MARKER-WHOLE"),
            (prune_broken.newest_not_protected, "RP-KEPT-UNTOUCHED"),
            (prune_broken.partial_left_standing, "RP-RERUN"),
            (prune_broken.sweep_not_durable, "RP-DURABLE-ON-RETURN"),
        ],
    )
    def test_broken_variant_is_caught(self, variant, guarantee: str) -> None:
        """Each wrong pass violates the guarantee the spec says it does (the roles deleted
        before the marker leave a _SUCCESS over missing roles)."""
        found: set[str] = set()
        for scenario in variant():
            found |= explore(scenario, SPEC, KILL_AND_POWER).violated_guarantees()
        assert guarantee in found
