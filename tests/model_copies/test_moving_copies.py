"""A moving old policy (``old.pt``, derived from the policy at refresh-aligned checkpoints) and
a moving reference (``ref.pt``), through the real Checkpointer and a small RL-style loop
(:mod:`copies_loop`): exact resume is bit-exact at aligned and off-cadence checkpoints, the
aligned checkpoint really omits old's tensors, and a doctored marker or a changed cadence
fails before anything is loaded."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import xxhash
from copies_loop import OLD_EVERY, REF_EVERY, build, policy, rl_loss, same, states, window

import statecraft as sc
from statecraft.errors import TrackingError, TrainerStateError

STEPS = 8
KNOBS = ["save_every=1", "save_async=false"]


def iter_dir(out: Path, step: int) -> Path:
    (found,) = out.rglob(f"iter_{step:09d}")
    return found


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[float], dict[str, Any]]:
    losses, modules, _ = window(tmp_path_factory.mktemp("whole"), STEPS, KNOBS)
    return losses, states(modules)


@pytest.mark.parametrize("split", [OLD_EVERY, OLD_EVERY + 1], ids=["aligned", "off-cadence"])
def test_resume_is_bit_exact_at_aligned_and_off_cadence_checkpoints(
    whole: tuple[list[float], dict[str, Any]], tmp_path: Path, split: int
) -> None:
    first, _, _ = window(tmp_path, split, KNOBS)
    second, modules, _ = window(tmp_path, STEPS, KNOBS)
    assert len(second) == STEPS - split  # resumed at the split, not a fresh start
    assert first + second == whole[0]  # the objective, bit for bit
    assert same(states(modules), whole[1])  # policy, old and reference alike


def test_the_aligned_checkpoint_omits_old_and_records_the_marker(tmp_path: Path) -> None:
    _, modules, _ = window(tmp_path, OLD_EVERY + 1, KNOBS)
    aligned, off = iter_dir(tmp_path, OLD_EVERY), iter_dir(tmp_path, OLD_EVERY + 1)
    manifest = json.loads((aligned / ".posttrain-manifest.json").read_text())
    assert not (aligned / "old.pt").exists()
    assert "old.pt" not in manifest["files"]
    assert "ref.pt" in manifest["files"]  # a moving reference is always saved whole
    roles = torch.load(aligned / "trainer.pt", weights_only=True)["stateful"]["model_roles"]
    assert roles["old_storage"] == {
        "version": 1,
        "mode": "derived_from_policy",
        "step": OLD_EVERY,
        "update_every": OLD_EVERY,
    }
    assert (roles["version"], roles["old_refreshed_at"]) == (2, OLD_EVERY)
    # off cadence: old differs from the policy, and old.pt holds its tensors exactly
    saved_old = torch.load(off / "old.pt", weights_only=True)
    saved_model = torch.load(off / "model.pt", weights_only=True)
    live_old = modules["old"].state_dict()
    assert all(torch.equal(saved_old[k], live_old[k]) for k in live_old)
    assert not all(torch.equal(saved_old[k], saved_model[k]) for k in live_old)
    off_roles = torch.load(off / "trainer.pt", weights_only=True)["stateful"]["model_roles"]
    assert off_roles["old_storage"]["mode"] == "full"
    ref = torch.load(off / "ref.pt", weights_only=True)
    assert all(torch.equal(ref[k], modules["ref"].state_dict()[k]) for k in ref)


def doctor_marker(directory: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite ``trainer.pt``'s old-storage marker and re-digest it in the manifest (a
    consistent checkpoint whose marker lies)."""
    trainer = torch.load(directory / "trainer.pt", weights_only=True)
    edit(trainer["stateful"]["model_roles"]["old_storage"])
    torch.save(trainer, directory / "trainer.pt")
    data = (directory / "trainer.pt").read_bytes()
    path = directory / ".posttrain-manifest.json"
    manifest = json.loads(path.read_text())
    manifest["files"]["trainer.pt"] = {
        "size": len(data),
        "digest": {"algorithm": "xxh3_128", "value": xxhash.xxh3_128_hexdigest(data)},
    }
    path.write_text(json.dumps(manifest, sort_keys=True, indent=1) + "\n")


def _set(**values: Any) -> Callable[[dict[str, Any]], None]:
    return lambda marker: marker.update(values)


@pytest.mark.parametrize(
    ("step", "edit", "words"),
    [
        (OLD_EVERY, _set(step=OLD_EVERY - 1), "step 2 is not the checkpoint's step 3"),
        (OLD_EVERY, _set(mode="full"), "'full' but the checkpoint holds no old.pt"),
        (OLD_EVERY, _set(version=9), "version 9"),
        (OLD_EVERY, _set(update_every=1), "update_every 1, this run 3"),
        (OLD_EVERY + 1, _set(mode="derived_from_policy"), "off its cadence 3"),
        (OLD_EVERY + 1, _set(mode="ema"), "neither"),
    ],
    ids=["step", "mode-full", "version", "cadence", "off-cadence-derived", "unknown-mode"],
)
def test_a_doctored_marker_fails_before_anything_is_loaded(
    tmp_path: Path, step: int, edit: Any, words: str
) -> None:
    window(tmp_path, step, KNOBS)
    doctor_marker(iter_dir(tmp_path, step), edit)
    model, old, ref, optimizer, ckpt = build(tmp_path, KNOBS)
    before = states({"model": model, "old": old, "ref": ref})
    with pytest.raises(TrainerStateError, match=f"storage marker.*{words}.*init_from"):
        ckpt.resume()
    assert same(states({"model": model, "old": old, "ref": ref}), before)
    assert optimizer.state_dict()["state"] == {}
    ckpt.close()


@pytest.mark.parametrize(
    ("changed", "words"),
    [
        ({"old_every": OLD_EVERY + 1}, "old_update_every: saved 3, this run 4"),
        ({"ref_every": REF_EVERY + 1}, "reference_update_every: saved 2, this run 3"),
        ({"old": False}, "old: saved 'moving', this run 'none'"),
        ({"ref_every": 0}, "reference: saved 'moving', this run 'frozen'"),
    ],
    ids=["old-cadence", "ref-cadence", "old-dropped", "ref-frozen"],
)
def test_a_changed_cadence_or_copy_fails_closed_naming_init_from(
    tmp_path: Path, changed: dict[str, Any], words: str
) -> None:
    window(tmp_path, 2, KNOBS)
    model, old, ref, _, ckpt = build(tmp_path, KNOBS, **changed)
    before = states({"model": model, "old": old, "ref": ref})
    with pytest.raises(TrainerStateError, match=f"{words}.*init_from"):
        ckpt.resume()
    assert same(states({"model": model, "old": old, "ref": ref}), before)
    ckpt.close()


def test_an_old_policy_added_on_resume_fails_closed(tmp_path: Path) -> None:
    window(tmp_path, 2, KNOBS, old=False)
    *_, ckpt = build(tmp_path, KNOBS)
    with pytest.raises(TrainerStateError, match=r"old: saved 'none', this run 'moving'.*init_from"):
        ckpt.resume()
    ckpt.close()


def test_the_old_policy_refreshes_only_after_applied_updates(tmp_path: Path) -> None:
    model, old, ref, _optimizer, ckpt = build(tmp_path, ["save_every=0"], ref_every=1, old_every=1)
    ckpt.resume()
    with torch.no_grad():
        next(model.parameters()).add_(1.0)  # the policy moved, but no update was applied
    ckpt.record(sc.Outcome.SKIPPED)
    ckpt.step_end()
    assert not torch.equal(next(old.parameters()), next(model.parameters()))
    ckpt.record(sc.Outcome.APPLIED)
    ckpt.step_end()
    assert torch.equal(next(old.parameters()), next(model.parameters()))
    assert torch.equal(next(ref.parameters()), next(model.parameters()))
    ckpt.close()


def test_bad_copy_arguments_are_refused_at_track(tmp_path: Path) -> None:
    ckpt = sc.Checkpointer(sc.CheckpointConfig(), run="bad", output_root=tmp_path)
    model = policy(1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(TrackingError, match=r"old_update_every=0.*int >= 1"):
        ckpt.track(model=model, optimizer=optimizer, old=policy(2))
    with pytest.raises(TrackingError, match="without old="):
        ckpt.track(model=model, optimizer=optimizer, old_update_every=2)
    with pytest.raises(TrackingError, match="callable"):
        ckpt.track(model=model, optimizer=optimizer, old=policy(2), old_update_every=2,
                   old_refresh=3)  # fmt: skip
    with pytest.raises(TrackingError, match="frozen reference is never refreshed"):
        ckpt.track(model=model, optimizer=optimizer, reference=policy(2),
                   reference_refresh=lambda p, c: None)  # fmt: skip
    dcp = sc.Checkpointer(
        sc.CheckpointConfig.load(None, ["checkpoint_format=dcp"]), run="dcp", output_root=tmp_path
    )
    with pytest.raises(sc.errors.NotSupportedYetError, match=r"old\.pt / ref\.pt"):
        dcp.track(model=model, optimizer=optimizer, reference=policy(2), reference_update_every=1)


def test_a_user_refresh_function_rebuilds_the_derived_old_policy(tmp_path: Path) -> None:
    """The refresh the loop gives (here: old takes half the policy's weights) is what builds
    old at every refresh and what rebuilds it from a derived checkpoint."""
    calls: list[int] = []

    def half(policy_module: Any, old_module: Any) -> None:
        calls.append(1)
        old_module.load_state_dict({k: v / 2 for k, v in policy_module.state_dict().items()})

    def run(until: int) -> tuple[dict[str, Any], int]:
        model, old, _, _, ckpt = build(tmp_path, KNOBS, old_refresh=half)
        start = ckpt.resume()
        for _ in range(start.step, until):
            ckpt.record(sc.Outcome.APPLIED)
            ckpt.step_end()
        ckpt.close()
        return states({"model": model, "old": old}), start.step

    run(OLD_EVERY)
    calls.clear()
    got, step = run(OLD_EVERY)
    assert step == OLD_EVERY
    assert calls == [1]
    assert all(torch.equal(got["old"][k], got["model"][k] / 2) for k in got["old"])


def test_the_identity_record_reads_version_1_and_refuses_a_malformed_refresh_step() -> None:
    from statecraft.checkpoint.init_from import ModelCopies

    frozen = ModelCopies.of(policy(1), 0).identity()
    frozen.load_state_dict({"version": 1, "reference": "frozen", "reference_update_every": 0})
    moving = ModelCopies.of(policy(1), 2, old=policy(2), old_update_every=3).identity()
    saved = moving.state_dict()
    with pytest.raises(TrainerStateError, match=r"old: saved 'none', this run 'moving'"):
        moving.load_state_dict({"version": 1, "reference": "moving", "reference_update_every": 2})
    with pytest.raises(TrainerStateError, match=r"old_refreshed_at: saved 'x', not a step"):
        moving.load_state_dict({**saved, "old_refreshed_at": "x"})


def test_an_emergency_save_at_an_aligned_step_stores_old_whole_and_resumes_exactly(
    whole: tuple[list[float], dict[str, Any]], tmp_path: Path
) -> None:
    sentinels = tmp_path / "sentinels"
    sentinels.mkdir()
    knobs = ["save_every=100", "save_async=false", f"termination.sentinel_dir={sentinels}"]
    model, old, ref, optimizer, ckpt = build(tmp_path / "run", knobs)
    ckpt.resume()
    losses = []
    for step in range(STEPS):
        loss = rl_loss(model, old, ref, step)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        ckpt.record(sc.Outcome.APPLIED)
        losses.append(loss.item())
        if step + 1 == OLD_EVERY:  # the stop arrives during the aligned step
            (sentinels / "SIGUSR1_RECEIVED").touch()
        if ckpt.step_end():
            break
    ckpt.finalize()
    ckpt.close()
    saved = iter_dir(tmp_path / "run", OLD_EVERY)
    assert (saved / "old.pt").exists()  # an emergency checkpoint stores old whole
    roles = torch.load(saved / "trainer.pt", weights_only=True)["stateful"]["model_roles"]
    assert roles["old_storage"]["mode"] == "full"
    rest, modules, _ = window(tmp_path / "run", STEPS, knobs)
    assert losses + rest == whole[0]
    assert same(states(modules), whole[1])
