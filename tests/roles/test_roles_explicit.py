"""An explicit multi-role resume (``resume=<.../role_checkpoints/iter_N>``): the named
committed boundary is verified like ``resume=auto``'s and loaded all or nothing; every bad path
(missing, a file, not an ``iter_*`` directory, a single-role checkpoint directory, a partial or
damaged boundary) is a clear error naming it, and no attempt is minted for it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from role_runs import SYNC, open_roles, roles_dir, run_loop

from statecraft.errors import CheckpointCorruptError, ResumeError


def boundaries_to(out: Path, iterations: int) -> None:
    ckpt, pair, policy, critic = open_roles(out, *SYNC)
    ckpt.resume()
    run_loop(ckpt, pair, policy, critic, 0, iterations)
    ckpt.finalize()
    ckpt.close()


def attempts(out: Path) -> list[str]:
    return sorted(p.name for p in out.glob("proj/group/ppo/*") if p.is_dir())


class TestExplicitBoundary:
    def test_resumes_from_the_named_boundary(self, tmp_path: Path) -> None:
        """Boundaries 1..4; resume=<iter_2>: iteration 2 with its counters and bytes (equal
        to a run stopped at 2), the loop_state of 2, and the loop continues saving."""
        boundaries_to(tmp_path / "ref", 2)
        ref, ref_pair, _, _ = open_roles(tmp_path / "ref", *SYNC)
        ref.resume()
        ref.close()
        boundaries_to(tmp_path / "out", 4)
        named = roles_dir(tmp_path / "out") / "iter_000000002"
        ckpt, pair, policy, critic = open_roles(tmp_path / "other", *SYNC, f"resume={named}")
        start = ckpt.resume()
        assert (start.step, start.roles) == (2, {"policy": 0, "critic": 2})
        assert start.source is not None
        assert start.source.endswith("iter_000000002")
        assert str(named) in start.reason
        assert ckpt.committed_loop_state() == {"critic_warmup_iterations": 2}
        for key, value in pair.critic.state_dict().items():
            assert torch.equal(value, ref_pair.critic.state_dict()[key])
        assert pair.cursor.position == ref_pair.cursor.position
        run_loop(ckpt, pair, policy, critic, 2, 3)
        ckpt.close()
        assert (roles_dir(tmp_path / "other") / "iter_000000003" / "_SUCCESS").is_file()

    @pytest.mark.parametrize("shape", ["missing", "file", "not-iter", "single-role", "outside"])
    def test_bad_paths_are_clear_errors(self, tmp_path: Path, shape: str) -> None:
        """Each bad path names itself and the expected shape; no attempt is minted."""
        boundaries_to(tmp_path / "out", 2)
        base = roles_dir(tmp_path / "out")
        other = tmp_path / "elsewhere"
        other.mkdir()
        paths = {
            "missing": base / "iter_000000009",
            "file": base / "iter_000000002" / "_SUCCESS",
            "not-iter": base / "iter_000000002" / "critic",
            "single-role": base.parent / "checkpoints" / "iter_000000002",
            "outside": other / "iter_000000002",
        }
        paths["single-role"].mkdir(parents=True)
        paths["outside"].mkdir()
        before = attempts(tmp_path / "new")
        ckpt, _, _, _ = open_roles(tmp_path / "new", *SYNC, f"resume={paths[shape]}")
        with pytest.raises(ResumeError, match=r"resume=.*(no such boundary|is not a committed)"):
            ckpt.resume()
        ckpt.close()
        assert attempts(tmp_path / "new") == before

    def test_a_partial_boundary_is_refused(self, tmp_path: Path) -> None:
        boundaries_to(tmp_path / "out", 2)
        named = roles_dir(tmp_path / "out") / "iter_000000002"
        (named / "_SUCCESS").unlink()
        ckpt, _, _, _ = open_roles(tmp_path / "new", *SYNC, f"resume={named}")
        with pytest.raises(ResumeError, match="partial"):
            ckpt.resume()
        ckpt.close()

    def test_a_damaged_boundary_is_refused(self, tmp_path: Path) -> None:
        """A role file whose bytes changed: the digest check refuses, naming the role."""
        boundaries_to(tmp_path / "out", 2)
        named = roles_dir(tmp_path / "out") / "iter_000000002"
        model = named / "critic" / "model.pt"
        data = bytearray(model.read_bytes())
        data[-1] ^= 0xFF
        model.write_bytes(bytes(data))
        ckpt, pair, _, _ = open_roles(tmp_path / "new", *SYNC, f"resume={named}")
        before = {k: v.clone() for k, v in pair.critic.state_dict().items()}
        with pytest.raises(CheckpointCorruptError, match=r"role 'critic'.*digest"):
            ckpt.resume()
        ckpt.close()
        for key, value in pair.critic.state_dict().items():
            assert torch.equal(value, before[key])  # nothing was applied
