"""``init_from=`` through the Checkpointer, and the frozen reference of a DPO-style fine-tune.

A tiny GPT-2 is fine-tuned from a committed base run with a DPO loss against a frozen reference
(``track(reference=...)``). The run is restarted cleanly mid-way (a new model at its raw
initialization, a new reference copied from it, a new Checkpointer: what a relaunched process
builds): with statecraft the losses and the final weights are bit-identical to an uninterrupted
run's; with the declared broken variant (the reference skipped on resume) they are not.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
from init_from_models import base_run, dpo_loss, gpt2, same_weights, tokens

import statecraft as sc
from statecraft.checkpoint.init_from import RolesIdentity
from statecraft.errors import InitFromError, ResumeError, TrainerStateError
from statecraft.proofs.init_from import broken

FINE_TUNE = sc.RunIdentity("proj", "dpo", "tune")
STEPS = 6


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("base")
    return base_run(out)


def window(
    out: Path, until: int, *, init_from: Path | None, reference: bool = True
) -> tuple[list[float], Any, sc.Checkpointer]:
    """One process's window of the fine-tune: build, track, resume, train to ``until``."""
    model = gpt2(11)  # the experiment's raw initialization, before init_from
    ref = copy.deepcopy(model).requires_grad_(False) if reference else None
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    knobs = ["save_every=1", "save_async=false", "quiet=true"]
    knobs += [f"init_from={init_from}"] if init_from is not None else []
    ckpt = sc.Checkpointer(sc.CheckpointConfig.load(None, knobs), run=FINE_TUNE, output_root=out)
    ckpt.track(model=model, optimizer=optimizer, reference=ref)
    start = ckpt.resume()
    losses = []
    for step in range(start.step, until):
        anchor = ref if ref is not None else model  # without a reference: a plain run
        loss = dpo_loss(model, anchor, tokens(4, 100 + step), tokens(4, 200 + step))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        ckpt.record(sc.Outcome.APPLIED)
        ckpt.step_end()
        losses.append(loss.item())
    ckpt.close()
    return losses, model, ckpt


def _base_weights(base: Path) -> Any:
    model = gpt2(99)
    sc.init_from(model, base)
    return model


def test_a_fresh_start_takes_the_base_weights_and_nothing_else(base: Path, tmp_path: Path) -> None:
    model = gpt2(11)
    ref = copy.deepcopy(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    config = sc.CheckpointConfig.load(None, [f"init_from={base}", "quiet=true"])
    ckpt = sc.Checkpointer(config, run=FINE_TUNE, output_root=tmp_path)
    ckpt.track(model=model, optimizer=optimizer, reference=ref)
    start = ckpt.resume()
    assert (start.step, start.source) == (0, None)  # the base's clocks are not continued
    assert optimizer.state_dict()["state"] == {}  # nor its optimizer
    assert same_weights(model, _base_weights(base))
    assert same_weights(ref, _base_weights(base))
    report = ckpt.init_report
    assert report is not None
    assert (report.kind, report.iteration, report.targets) == ("checkpoint", 2, 2)
    ckpt.close()


def test_a_resumed_window_keeps_the_checkpoint_and_the_base_reference_exactly(
    base: Path, tmp_path: Path
) -> None:
    whole, whole_model, _ = window(tmp_path / "whole", STEPS, init_from=base)
    first, _, _ = window(tmp_path / "split", 3, init_from=base)
    second, split_model, ckpt = window(tmp_path / "split", STEPS, init_from=base)
    assert ckpt.init_report is not None
    assert ckpt.init_report.targets == 1  # the reference only: the checkpoint won
    assert first + second == whole  # the exact objective, bit for bit
    assert same_weights(split_model, whole_model)
    assert first[0] == pytest.approx(0.6931471805599453)  # model == reference at step 0: log 2


def test_the_broken_variant_skipping_the_reference_on_resume_changes_the_objective(
    base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole, whole_model, _ = window(tmp_path / "whole", STEPS, init_from=base)
    first, _, _ = window(tmp_path / "split", 3, init_from=base)
    monkeypatch.setattr(
        "statecraft.checkpoint.init_from.start.targets_at_start",
        broken.VARIANTS["skip_reference_on_resume"],
    )
    second, split_model, _ = window(tmp_path / "split", STEPS, init_from=base)
    assert first == whole[:3]
    assert second != whole[3:]  # the reference is the raw init: another loss from step 3 on
    assert not same_weights(split_model, whole_model)


def test_a_reference_added_or_dropped_on_resume_fails_closed_naming_init_from(
    base: Path, tmp_path: Path
) -> None:
    window(tmp_path / "with", 2, init_from=base)
    with pytest.raises(ResumeError, match=r"track\(reference=\.\.\.\).*init_from"):
        window(tmp_path / "with", 4, init_from=base, reference=False)
    window(tmp_path / "without", 2, init_from=base, reference=False)
    with pytest.raises(ResumeError, match=r"model_roles.*init_from"):
        window(tmp_path / "without", 4, init_from=base)


def test_the_recorded_cadence_and_version_are_compared_on_resume() -> None:
    mine = RolesIdentity("frozen", 0)
    mine.load_state_dict(mine.state_dict())  # the same: nothing to do
    moved = {**mine.state_dict(), "reference_update_every": 50}
    with pytest.raises(TrainerStateError, match=r"reference_update_every: saved 50.*init_from"):
        mine.load_state_dict(moved)
    with pytest.raises(TrainerStateError, match=r"version 3.*init_from"):
        mine.load_state_dict({**mine.state_dict(), "version": 3})


def test_a_source_that_does_not_fit_fails_the_start(base: Path, tmp_path: Path) -> None:
    model = gpt2(11, n_layer=3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ckpt = sc.Checkpointer(
        sc.CheckpointConfig.load(None, [f"init_from={base}", "quiet=true"]),
        run=FINE_TUNE,
        output_root=tmp_path,
    )
    ckpt.track(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(InitFromError, match=r"transformer\.h\.2\."):
        ckpt.resume()
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    ckpt.close()


def test_a_moving_reference_and_a_bad_cadence_are_refused_at_track(tmp_path: Path) -> None:
    ckpt = sc.Checkpointer(sc.CheckpointConfig(), run=FINE_TUNE, output_root=tmp_path)
    model = gpt2(1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(sc.errors.NotSupportedYetError, match="moving reference"):
        ckpt.track(model=model, optimizer=optimizer, reference=gpt2(2), reference_update_every=5)
    with pytest.raises(sc.errors.TrackingError, match="int >= 0"):
        ckpt.track(model=model, optimizer=optimizer, reference=gpt2(2), reference_update_every=-1)
    with pytest.raises(sc.errors.TrackingError, match="model_roles"):
        ckpt.track(model=model, optimizer=optimizer, stateful={"model_roles": gpt2(3)})
