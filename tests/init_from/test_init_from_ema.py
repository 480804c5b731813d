"""The maintained EMA (``track(ema=AveragedModel(...))``) of a tiny GPT-2 fine-tune started with
``init_from`` a committed base run: initialized from the base, advanced by
``record(Outcome.APPLIED)`` only, saved in ``model.pt`` under ``@ema.``, restored bit-exact on
a resumed window, and its mode and decay recorded in the versioned ``model_roles`` record that
exact resume compares before anything is read.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from init_from_models import base_run, gpt2, same_weights, tokens
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

import statecraft as sc
from statecraft.checkpoint.init_from import RolesIdentity
from statecraft.errors import NotSupportedYetError, ResumeError, TrackingError, TrainerStateError

RUN = sc.RunIdentity("proj", "ema", "tune")
STEPS = 6


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return base_run(tmp_path_factory.mktemp("base"))


def ema_of(model: Any, decay: float = 0.9) -> AveragedModel:
    return AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay))


def _step(model: Any, optimizer: Any, step: int) -> float:
    ids = tokens(4, 100 + step)
    loss = model(ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return float(loss.item())


def window(
    out: Path, until: int, *, base: Path, ema: bool = True, decay: float = 0.9
) -> tuple[list[float], Any, Any, sc.Checkpointer]:
    """One process's window: build (raw init), track, resume, train to ``until``."""
    model = gpt2(11)
    averaged = ema_of(model, decay) if ema else None
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    knobs = ["save_every=1", "save_async=false", "quiet=true", f"init_from={base}"]
    ckpt = sc.Checkpointer(sc.CheckpointConfig.load(None, knobs), run=RUN, output_root=out)
    ckpt.track(model=model, optimizer=optimizer, ema=averaged)
    start = ckpt.resume()
    losses = []
    for step in range(start.step, until):
        losses.append(_step(model, optimizer, step))
        ckpt.record(sc.Outcome.APPLIED)
        ckpt.step_end()
    ckpt.close()
    return losses, model, averaged, ckpt


def _latest_model_pt(out: Path) -> dict[str, Any]:
    (pointer,) = out.rglob("latest_checkpoint.txt")
    iteration = pointer.read_text().strip()
    state: dict[str, Any] = torch.load(pointer.parent / iteration / "model.pt", weights_only=True)
    return state


def test_a_fresh_start_initializes_the_ema_from_the_base(base: Path, tmp_path: Path) -> None:
    model = gpt2(11)
    averaged = ema_of(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    config = sc.CheckpointConfig.load(None, [f"init_from={base}", "quiet=true"])
    ckpt = sc.Checkpointer(config, run=RUN, output_root=tmp_path)
    ckpt.track(model=model, optimizer=optimizer, ema=averaged)
    ckpt.resume()
    want = gpt2(99)
    sc.init_from(want, base)
    assert same_weights(averaged.module, want)  # the EMA starts at the base, not the raw init
    assert int(averaged.n_averaged) == 0
    assert ckpt.init_report is not None
    assert ckpt.init_report.targets == 2
    _step(model, optimizer, 0)
    ckpt.record(sc.Outcome.APPLIED)
    assert int(averaged.n_averaged) == 1
    assert same_weights(averaged.module, model)  # the first update takes the policy whole
    ckpt.close()


def test_the_ema_resumes_bit_exact_from_model_pt(base: Path, tmp_path: Path) -> None:
    whole, whole_model, whole_ema, _ = window(tmp_path / "whole", STEPS, base=base)
    first, _, _, _ = window(tmp_path / "split", 3, base=base)
    second, split_model, split_ema, ckpt = window(tmp_path / "split", STEPS, base=base)
    assert ckpt.init_report is None  # resumed: the checkpoint wins for the model and the EMA
    assert first + second == whole
    assert same_weights(split_model, whole_model)
    assert same_weights(split_ema, whole_ema)  # n_averaged too
    assert int(split_ema.n_averaged) == STEPS
    assert not same_weights(split_ema.module, split_model)  # an average, not a copy
    saved = _latest_model_pt(tmp_path / "split")
    ema_keys = {k for k in saved if k.startswith("@ema.")}
    assert ema_keys == {"@ema." + k for k in split_ema.state_dict()}
    assert torch.equal(saved["@ema.n_averaged"], split_ema.n_averaged)
    reader = gpt2(5)
    sc.load_weights(reader, tmp_path / "split")  # the model's entries only
    assert same_weights(reader, split_model)
    again = gpt2(6)
    sc.init_from(again, tmp_path / "split")  # a checkpoint with an EMA is a source of net
    assert same_weights(again, split_model)


def test_an_ema_added_or_dropped_or_a_changed_decay_fails_before_anything_loads(
    base: Path, tmp_path: Path
) -> None:
    window(tmp_path / "without", 2, base=base, ema=False)
    with pytest.raises(ResumeError, match=r"model_roles.*maintained EMA.*init_from"):
        window(tmp_path / "without", 4, base=base)
    window(tmp_path / "with", 2, base=base)
    with pytest.raises(ResumeError, match=r"track\(ema=\.\.\.\).*init_from"):
        window(tmp_path / "with", 4, base=base, ema=False)
    with pytest.raises(TrainerStateError, match=r"ema: saved .*'decay': 0\.9.*0\.99.*init_from"):
        window(tmp_path / "with", 4, base=base, decay=0.99)


def test_a_refused_resume_leaves_the_model_and_the_ema_untouched(
    base: Path, tmp_path: Path
) -> None:
    window(tmp_path / "run", 2, base=base)
    model = gpt2(11)
    averaged = ema_of(model, 0.5)
    before = gpt2(11)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    config = sc.CheckpointConfig.load(None, ["quiet=true", f"init_from={base}"])
    ckpt = sc.Checkpointer(config, run=RUN, output_root=tmp_path / "run")
    ckpt.track(model=model, optimizer=optimizer, ema=averaged)
    with pytest.raises(TrainerStateError, match="init_from"):
        ckpt.resume()
    assert same_weights(model, before)
    assert same_weights(averaged.module, before)
    assert int(averaged.n_averaged) == 0
    assert optimizer.state_dict()["state"] == {}
    ckpt.close()


def test_a_version_1_record_reads_as_ema_disabled() -> None:
    v1 = {"version": 1, "reference": "frozen", "reference_update_every": 0}
    RolesIdentity("frozen", 0).load_state_dict(v1)  # no EMA: the same identity
    enabled = {"mode": "enabled", "averaging": "get_ema_multi_avg_fn", "decay": 0.9}
    with pytest.raises(TrainerStateError, match=r"ema: saved \{'mode': 'disabled'\}.*init_from"):
        RolesIdentity("frozen", 0, {**enabled, "use_buffers": False}).load_state_dict(v1)
    mine = RolesIdentity("none", 0, {**enabled, "use_buffers": False})
    assert mine.state_dict()["version"] == 2
    mine.load_state_dict(mine.state_dict())


def test_only_an_applied_update_advances_the_ema(tmp_path: Path) -> None:
    model = gpt2(11)
    averaged = ema_of(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ckpt = sc.Checkpointer(
        sc.CheckpointConfig.load(None, ["quiet=true"]), run=RUN, output_root=tmp_path
    )
    ckpt.track(model=model, optimizer=optimizer, ema=averaged)
    ckpt.resume()
    _step(model, optimizer, 0)
    ckpt.record(sc.Outcome.APPLIED)
    after_first = {k: v.clone() for k, v in averaged.state_dict().items()}
    _step(model, optimizer, 1)
    ckpt.record(sc.Outcome.ACCUMULATING)
    ckpt.record(sc.Outcome.SKIPPED)  # a non-finite / AMP-skipped window: the EMA stays
    assert all(torch.equal(v, after_first[k]) for k, v in averaged.state_dict().items())
    ckpt.record(sc.Outcome.APPLIED)
    assert int(averaged.n_averaged) == 2
    averaged.update_parameters(model)  # the loop updating it as well: refused, nothing changes
    step = ckpt.step
    with pytest.raises(TrackingError, match=r"remove the loop's ema\.update_parameters"):
        ckpt.record(sc.Outcome.APPLIED)
    assert ckpt.step == step
    assert int(averaged.n_averaged) == 3
    ckpt.close()


def test_an_ema_the_loop_never_updates_is_not_saved_and_warned_once(tmp_path: Path) -> None:
    model = gpt2(11)
    averaged = ema_of(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    knobs = ["save_every=1", "save_async=false", "quiet=true"]
    ckpt = sc.Checkpointer(sc.CheckpointConfig.load(None, knobs), run=RUN, output_root=tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ckpt.track(model=model, optimizer=optimizer, ema=averaged, ema_updates=False)
        ckpt.resume()
        for step in range(2):
            _step(model, optimizer, step)
            ckpt.record(sc.Outcome.APPLIED)
            ckpt.step_end()
        ckpt.close()
    said = [w for w in caught if "ema_updates=False" in str(w.message)]
    assert len(said) == 1
    assert "not saved" in str(said[0].message)
    assert int(averaged.n_averaged) == 0  # statecraft did not advance it
    saved = _latest_model_pt(tmp_path)
    assert not [k for k in saved if k.startswith("@ema.")]
    assert set(saved) == set(model.state_dict())


def test_what_cannot_be_maintained_is_refused_at_track(tmp_path: Path) -> None:
    model = gpt2(11)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ckpt = sc.Checkpointer(
        sc.CheckpointConfig.load(None, ["quiet=true"]), run=RUN, output_root=tmp_path
    )
    with pytest.raises(TrackingError, match="AveragedModel"):
        ckpt.track(model=model, optimizer=optimizer, ema=gpt2(3))
    with pytest.raises(TrackingError, match="ema_updates"):
        ckpt.track(model=model, optimizer=optimizer, ema=ema_of(model), ema_updates=1)
    dcp = sc.CheckpointConfig.load(None, ["quiet=true", "checkpoint_format=dcp"])
    other = sc.Checkpointer(dcp, run=RUN, output_root=tmp_path / "dcp")
    with pytest.raises(NotSupportedYetError, match="consolidated"):
        other.track(model=model, optimizer=optimizer, ema=ema_of(model))
    ckpt.close()
    other.close()
