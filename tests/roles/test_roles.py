"""Multi-role boundaries through the public API (``Checkpointer.track_role``, ``save(iteration=,
loop_state=)``, ``resume()``, ``committed_loop_state()``) over real torch objects on the real
disk: the layout, per-role counters during critic warm-up, the bad inputs (a role tracked twice,
roles that differ at resume, doctored ``_SUCCESS`` markers, a bad ``loop_state``), the
config-time refusals and one role's failed write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from role_runs import SYNC, Pair, failing_filesystem, open_roles, roles_dir, run_loop

import statecraft as sc
from statecraft.errors import (
    ConfigError,
    IterationCommittedError,
    ResumeError,
    RoleWriteError,
    TrackingError,
)


def committed(out: Path, iterations: int, *overrides: str, warmup: int = 2) -> Pair:
    ckpt, pair, policy, critic = open_roles(out, *SYNC, *overrides)
    ckpt.resume()
    run_loop(ckpt, pair, policy, critic, 0, iterations, warmup=warmup)
    ckpt.finalize()
    ckpt.close()
    return pair


def in_background_failing(out: Path, needle: str, iterations: int) -> sc.Checkpointer:
    """A save_async run of ``iterations`` boundaries whose role writes under ``needle`` fail;
    the failure is not joined yet."""
    ckpt, pair, policy, critic = open_roles(out, filesystem=failing_filesystem(needle))
    ckpt.resume()
    run_loop(ckpt, pair, policy, critic, 0, iterations)
    return ckpt


def marker(out: Path, iteration: int) -> Path:
    return roles_dir(out) / f"iter_{iteration:09d}" / "_SUCCESS"


class TestTrackRole:
    def test_a_role_tracked_twice_is_refused(self, tmp_path: Path) -> None:
        """The second track_role of one name names the role."""
        ckpt, pair, _, _ = open_roles(tmp_path)
        with pytest.raises(TrackingError, match="'critic' is tracked already"):
            ckpt.track_role("critic", model=pair.critic, optimizer=pair.critic_opt)

    def test_track_and_track_role_do_not_mix(self, tmp_path: Path) -> None:
        """A loop tracks one model with track() or several roles, not both (either order)."""
        ckpt, pair, _, _ = open_roles(tmp_path / "a")
        with pytest.raises(TrackingError, match=r"track\(\) after track_role\(\)"):
            ckpt.track(model=pair.actor, optimizer=pair.actor_opt)
        other = sc.Checkpointer(sc.CheckpointConfig(), run="x", output_root=tmp_path / "b")
        other.track(model=pair.actor, optimizer=pair.actor_opt)
        with pytest.raises(TrackingError, match=r"after track\(\)"):
            other.track_role("policy", model=pair.actor, optimizer=pair.actor_opt)

    @pytest.mark.parametrize("name", ["Policy", "", "1st", "a/b", "_SUCCESS", 3])
    def test_a_bad_role_name_is_refused(self, tmp_path: Path, name: object) -> None:
        """A role name is a lowercase identifier (it names a directory of every boundary)."""
        ckpt = sc.Checkpointer(sc.CheckpointConfig(), run="x", output_root=tmp_path)
        model = torch.nn.Linear(1, 1)
        with pytest.raises(TrackingError, match="a role name is lowercase"):
            ckpt.track_role(name, model=model, optimizer=torch.optim.SGD(model.parameters()))  # type: ignore[arg-type]

    def test_data_goes_with_the_first_role(self, tmp_path: Path) -> None:
        """The data cursor is stored with the first role: data= on a later one is refused."""
        ckpt = sc.Checkpointer(sc.CheckpointConfig(), run="x", output_root=tmp_path)
        pair = Pair()
        ckpt.track_role("policy", model=pair.actor, optimizer=pair.actor_opt)
        with pytest.raises(TrackingError, match=r"pass data= to track_role\('policy'"):
            ckpt.track_role(
                "critic", model=pair.critic, optimizer=pair.critic_opt, data=pair.cursor
            )

    def test_an_object_without_state_dict_is_refused(self, tmp_path: Path) -> None:
        ckpt = sc.Checkpointer(sc.CheckpointConfig(), run="x", output_root=tmp_path)
        with pytest.raises(TrackingError, match=r"'policy', optimizer=.*has no state_dict"):
            ckpt.track_role("policy", model=torch.nn.Linear(1, 1), optimizer=object())

    def test_one_role_is_not_a_multi_role_boundary(self, tmp_path: Path) -> None:
        """Resume with a single role names the fix (another role, or track())."""
        ckpt = sc.Checkpointer(sc.CheckpointConfig(), run="x", output_root=tmp_path)
        pair = Pair()
        ckpt.track_role("policy", model=pair.actor, optimizer=pair.actor_opt)
        with pytest.raises(TrackingError, match="needs two or more roles"):
            ckpt.resume()

    def test_track_role_after_resume_is_refused(self, tmp_path: Path) -> None:
        ckpt, pair, _, _ = open_roles(tmp_path, *SYNC)
        ckpt.resume()
        with pytest.raises(TrackingError, match=r"after resume\(\)"):
            ckpt.track_role("value", model=pair.critic, optimizer=pair.critic_opt)
        ckpt.close()

    @pytest.mark.parametrize("call", ["record", "step_end"])
    def test_single_model_calls_are_refused(self, tmp_path: Path, call: str) -> None:
        """record() / step_end() of a multi-role loop name the role handle and save()."""
        ckpt, _, _, _ = open_roles(tmp_path, *SYNC)
        ckpt.resume()
        with pytest.raises(TrackingError, match=r"critic\.record\(.*ckpt\.save\(iteration="):
            ckpt.record(sc.Outcome.APPLIED) if call == "record" else ckpt.step_end()
        ckpt.close()


class TestConfigRefusals:
    @pytest.mark.parametrize(
        ("override", "path"),
        [
            ("checkpoint_components=[model]", "checkpoint_components"),
            ("emergency_checkpoint_components=run", "emergency_checkpoint_components"),
            ("checkpoint_format=dcp", "checkpoint_format"),
        ],
    )
    def test_what_a_multi_role_loop_cannot_honour(
        self, tmp_path: Path, override: str, path: str
    ) -> None:
        """A partial plan, the emergency knob run (and DCP) are refused at track_role, naming
        the knob and the rule; nothing is written."""
        config = sc.CheckpointConfig.load(None, [override])
        ckpt = sc.Checkpointer(config, run="x", output_root=tmp_path / "out")
        model = torch.nn.Linear(1, 1)
        with pytest.raises(ConfigError) as info:
            ckpt.track_role("policy", model=model, optimizer=torch.optim.SGD(model.parameters()))
        assert [issue.path for issue in info.value.issues] == [path]
        assert "multi-role" in str(info.value)
        assert not (tmp_path / "out").exists()

    def test_an_object_store_primary_is_refused(self, tmp_path: Path) -> None:
        """Several roles require the local primary store: the refusal names the fix, with the
        DCP format the object-store primary needs; nothing is written."""
        config = sc.CheckpointConfig.load(
            None,
            ["checkpoint_store.backend=object_store", "checkpoint_store.bucket=b",
             "checkpoint_format=dcp"],
        )  # fmt: skip
        ckpt = sc.Checkpointer(config, run="x", output_root=tmp_path / "out")
        model = torch.nn.Linear(1, 1)
        with pytest.raises(ConfigError) as info:
            ckpt.track_role("policy", model=model, optimizer=torch.optim.SGD(model.parameters()))
        paths = [issue.path for issue in info.value.issues]
        assert paths == ["checkpoint_store.backend", "checkpoint_format"]
        assert "require the local primary store" in str(info.value)
        assert not (tmp_path / "out").exists()


class TestBoundaries:
    def test_layout_and_counters_during_critic_warmup(self, tmp_path: Path) -> None:
        """iter_N/<role>/ units with their manifests, data.pt with the first role, and
        _SUCCESS recording each role's own counter and loop_state verbatim."""
        committed(tmp_path, 4)
        here = roles_dir(tmp_path) / "iter_000000004"
        assert sorted(p.name for p in here.iterdir()) == ["_SUCCESS", "critic", "policy"]
        assert sorted(p.name for p in (here / "policy").iterdir()) == [
            ".statecraft-role.json", "data.pt", "model.pt", "optim.pt", "role.pt",
        ]  # fmt: skip
        assert not (here / "critic" / "data.pt").exists()
        record = json.loads((here / "_SUCCESS").read_text())
        assert record["schema"] == "statecraft.roles-success.v1"
        assert record["roles"] == ["policy", "critic"]
        assert record["counters"] == {"policy": 2, "critic": 4}
        assert record["loop_state"] == {"critic_warmup_iterations": 2}

    def test_resume_restores_every_role_exactly(self, tmp_path: Path) -> None:
        """The resumed roles equal the saved ones (weights, moments, scheduler, cursor,
        counters); ResumeResult reports each role's counter; committed_loop_state is verbatim."""
        pair = committed(tmp_path, 4)
        ckpt, fresh, policy, critic = open_roles(tmp_path, *SYNC, seed=1)
        result = ckpt.resume()
        assert result.step == 4
        assert result.roles == {"policy": 2, "critic": 4}
        assert (result.rng, result.data) == ("restored", "restored")
        assert (policy.optimizer_step, critic.optimizer_step) == (2, 4)
        state = ckpt.committed_loop_state()
        assert state == {"critic_warmup_iterations": 2}
        assert type(state["critic_warmup_iterations"]) is int
        for a, b in ((pair.actor, fresh.actor), (pair.critic, fresh.critic)):
            assert all(
                torch.equal(x, y)
                for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
            )
        assert fresh.actor_opt.state_dict()["state"][0]["step"] == 2
        assert fresh.actor_sched.state_dict() == pair.actor_sched.state_dict()
        assert fresh.cursor.position == pair.cursor.position == 32
        ckpt.close()

    def test_fresh_start_reports_zero_counters(self, tmp_path: Path) -> None:
        ckpt, _, _, _ = open_roles(tmp_path, *SYNC)
        with pytest.raises(TrackingError, match="call resume"):
            ckpt.committed_loop_state()
        result = ckpt.resume()
        assert (result.step, result.source, result.roles) == (0, None, {"policy": 0, "critic": 0})
        assert ckpt.committed_loop_state() is None
        ckpt.close()

    def test_async_boundaries_are_joined_by_finalize(self, tmp_path: Path) -> None:
        """With save_async (the default) every boundary is durable once finalize() returns."""
        ckpt, pair, policy, critic = open_roles(tmp_path)
        ckpt.resume()
        run_loop(ckpt, pair, policy, critic, 0, 3)
        ckpt.finalize()
        assert sorted(p.name for p in roles_dir(tmp_path).iterdir()) == [
            "iter_000000001", "iter_000000002", "iter_000000003",
        ]  # fmt: skip
        assert all((d / "_SUCCESS").exists() for d in roles_dir(tmp_path).iterdir())
        ckpt.close()

    def test_wait_joins_the_boundary_in_flight(self, tmp_path: Path) -> None:
        """wait() joins the background boundary: its role's failure is raised there, once."""
        ckpt = in_background_failing(tmp_path, "iter_000000001/critic/", 1)
        with pytest.raises(RoleWriteError, match="role 'critic'"):
            ckpt.wait()
        assert ckpt.wait() == []
        ckpt.close()

    @pytest.mark.parametrize(
        ("loop_state", "problem"),
        [
            ({"nested": [1]}, "a list is not a JSON scalar"),
            ({"x": float("nan")}, "not a finite number"),
            ({3: 1}, "key 3 is not a non-empty str"),
            ([("a", 1)], "expects a mapping"),
        ],
    )
    def test_a_bad_loop_state_is_refused(self, tmp_path: Path, loop_state, problem) -> None:
        """loop_state holds JSON scalars under str keys; anything else is refused before a
        byte is written."""
        ckpt, _, _, _ = open_roles(tmp_path, *SYNC)
        ckpt.resume()
        with pytest.raises(TrackingError, match=problem):
            ckpt.save(iteration=1, loop_state=loop_state)
        assert list(roles_dir(tmp_path).iterdir()) == []
        ckpt.close()

    @pytest.mark.parametrize("iteration", [-1, "3", 2.0, None])
    def test_a_bad_iteration_is_refused(self, tmp_path: Path, iteration: object) -> None:
        ckpt, _, _, _ = open_roles(tmp_path, *SYNC)
        ckpt.resume()
        with pytest.raises(TrackingError, match="outer iteration as an int"):
            ckpt.save(iteration=iteration)  # type: ignore[arg-type]
        ckpt.close()

    def test_a_committed_boundary_is_never_saved_again(self, tmp_path: Path) -> None:
        committed(tmp_path, 2)
        ckpt, _, _, _ = open_roles(tmp_path, *SYNC)
        ckpt.resume()
        before = marker(tmp_path, 2).read_bytes()
        with pytest.raises(IterationCommittedError, match="committed boundary"):
            ckpt.save(iteration=2)
        assert marker(tmp_path, 2).read_bytes() == before
        ckpt.close()


def _doctor(out: Path, iteration: int, change) -> None:
    path = marker(out, iteration)
    data = change(json.loads(path.read_text()))
    path.write_bytes(data if isinstance(data, bytes) else json.dumps(data).encode())


class TestPassedOver:
    @pytest.mark.parametrize(
        ("change", "reason"),
        [
            (lambda m: b"{not json", "is not valid JSON"),
            (lambda m: {**m, "schema": "statecraft.roles-success.v9"}, "roles-success.v9"),
            (lambda m: {**m, "counters": {"policy": 2, "critic": 5}}, "critic counter 5"),
            (
                lambda m: {
                    **m,
                    "roles": [*m["roles"], "value"],
                    "counters": {**m["counters"], "value": 4},
                },
                "role 'value' is not committed",
            ),
            (lambda m: {k: v for k, v in m.items() if k != "counters"}, "roles disagree"),
            (lambda m: {**m, "iteration": 9}, "names iteration 9"),
        ],
    )
    def test_a_doctored_marker_is_passed_over(self, tmp_path: Path, change, reason) -> None:
        """An unparsable, unknown-version, wrong-counter or extra-role _SUCCESS (or one
        without counters over roles that disagree) is passed over with its reason."""
        committed(tmp_path, 4)
        _doctor(tmp_path, 4, change)
        ckpt, _, _, _ = open_roles(tmp_path, *SYNC, seed=1)
        result = ckpt.resume()
        assert (result.step, result.roles) == (3, {"policy": 1, "critic": 3})
        (passed,) = result.passed_over
        assert passed.name == "iter_000000004"
        assert passed.reason.startswith("damaged"), passed.reason
        assert reason in passed.reason, passed.reason
        ckpt.close()

    def test_a_marker_without_counters_over_agreeing_roles_is_adopted(self, tmp_path: Path) -> None:
        """The older rule: without per-role counters, roles that agree are adopted."""
        committed(tmp_path, 3, warmup=0)
        _doctor(tmp_path, 3, lambda m: {k: v for k, v in m.items() if k != "counters"})
        ckpt, _, _, _ = open_roles(tmp_path, *SYNC, seed=1)
        result = ckpt.resume()
        assert (result.step, result.roles, result.passed_over) == (
            3,
            {"policy": 3, "critic": 3},
            (),
        )
        ckpt.close()

    def test_a_boundary_without_marker_is_a_partial(self, tmp_path: Path) -> None:
        committed(tmp_path, 4)
        marker(tmp_path, 4).unlink()
        ckpt, _, _, _ = open_roles(tmp_path, *SYNC, seed=1)
        result = ckpt.resume()
        assert result.step == 3
        (passed,) = result.passed_over
        assert passed.reason.startswith("partial: no _SUCCESS marker")
        assert "['critic', 'policy']" in passed.reason
        ckpt.close()

    @pytest.mark.parametrize(
        ("names", "missing", "extra"),
        [(("policy", "critic", "value"), "none", "['value']"),
         (("policy",  "value"), "['critic']", "['value']"),
         (("critic", "policy"), "none", "none")],
    )  # fmt: skip
    def test_roles_that_differ_at_resume_are_refused(
        self, tmp_path: Path, names, missing, extra
    ) -> None:
        """A boundary holding other roles (or another order) than the run tracks is refused
        naming both sides; nothing is loaded."""
        committed(tmp_path, 2)
        ckpt = sc.Checkpointer(
            sc.CheckpointConfig.load(None, list(SYNC)),
            run=sc.RunIdentity("proj", "group", "ppo"),
            output_root=tmp_path,
        )
        models = {name: torch.nn.Linear(4, 2) for name in names}
        before = {n: m.weight.clone() for n, m in models.items()}
        for name in names:
            opt = torch.optim.AdamW(models[name].parameters())
            ckpt.track_role(name, model=models[name], optimizer=opt)
        with pytest.raises(ResumeError) as info:
            ckpt.resume()
        message = str(info.value)
        assert f"not tracked: {missing}" in message
        assert f"not in the boundary: {extra}" in message
        assert all(torch.equal(models[n].weight, before[n]) for n in names)
        ckpt.close()


class TestRoleWriters:
    def test_a_failed_role_write_fails_the_boundary_naming_the_role(self, tmp_path: Path) -> None:
        """The critic's write fails: RoleWriteError names it, no _SUCCESS is written, and the
        next resume passes the partial over for the previous boundary."""
        committed(tmp_path, 2)
        ckpt, pair, policy, critic = open_roles(
            tmp_path, *SYNC, filesystem=failing_filesystem("iter_000000003/critic/")
        )
        ckpt.resume()
        with pytest.raises(RoleWriteError) as info:
            run_loop(ckpt, pair, policy, critic, 2, 3)
        assert info.value.fields["role"] == "critic"
        assert "role 'critic' failed" in str(info.value)
        assert not marker(tmp_path, 3).exists()
        ckpt.close()
        again, _, _, _ = open_roles(tmp_path, *SYNC, seed=1)
        result = again.resume()
        assert result.step == 2
        assert result.passed_over[0].name == "iter_000000003"
        again.close()

    def test_an_async_role_failure_is_raised_at_finalize(self, tmp_path: Path) -> None:
        """In the background: the failure of one role's writer is raised once at the join."""
        ckpt = in_background_failing(tmp_path, "iter_000000002/policy/", 2)
        with pytest.raises(RoleWriteError) as info:
            ckpt.finalize()
        assert info.value.fields["role"] == "policy"
        assert marker(tmp_path, 1).exists()
        assert not marker(tmp_path, 2).exists()
        ckpt.close()
