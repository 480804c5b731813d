"""``statecraft.init_from`` on a tiny GPT-2 (built from a config) from every kind of source: a
statecraft run, checkpoint and artifact (digests verified), a torch state dict file, a DCP
directory, a safetensors file, a Hugging Face directory (single and sharded); the key and shape
rule (one error listing every difference, nothing changed) and its two opt-ins."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from init_from_models import base_run, gpt2, lora, same_weights, tokens

import statecraft as sc
from statecraft.errors import CheckpointCorruptError, InitFromError


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An output root holding one committed base run (iterations 1 and 2) and ``final.pt``."""
    out = tmp_path_factory.mktemp("base")
    base_run(out)
    return out


def _attempt(job: Path) -> Path:
    """The job's one attempt directory (``<RUN_TS>``; the job also holds the launch lock)."""
    (attempt,) = (p for p in job.iterdir() if p.is_dir() and p.name.isdigit())
    return attempt


def _base_model(base: Path) -> torch.nn.Module:
    model = gpt2(99)
    model.load_state_dict(torch.load(base / "final.pt", weights_only=True))
    return model


def test_a_statecraft_run_initializes_the_weights_and_nothing_else(base: Path) -> None:
    model = gpt2(1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    assert not same_weights(model, _base_model(base))
    report = sc.init_from(model, base / "proj" / "base" / "pretrain")
    assert same_weights(model, _base_model(base))
    assert (report.kind, report.iteration, report.targets) == ("checkpoint", 2, 1)
    assert report.entries == len(model.state_dict())
    assert optimizer.state_dict()["state"] == {}  # never the source's optimizer


def test_an_iteration_a_torch_file_and_an_output_root(base: Path) -> None:
    attempt = _attempt(base / "proj" / "base" / "pretrain")
    iter1 = attempt / "checkpoints" / "iter_000000001"
    model = gpt2(1)
    assert sc.init_from(model, iter1).iteration == 1
    assert not same_weights(model, _base_model(base))  # iteration 1, not the final weights
    for source in (base / "final.pt", base / "proj" / "base" / "pretrain"):
        model = gpt2(1)
        sc.init_from(model, source)
        assert same_weights(model, _base_model(base))


def test_a_damaged_checkpoint_is_refused_before_any_tensor_changes(
    base: Path, tmp_path: Path
) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(base / "proj", copy / "proj")
    attempt = _attempt(copy / "proj" / "base" / "pretrain")
    model_pt = attempt / "checkpoints" / "iter_000000002" / "model.pt"
    data = bytearray(model_pt.read_bytes())
    data[len(data) // 2] ^= 0x01  # same size, other bytes: only the digest sees it
    model_pt.write_bytes(bytes(data))
    model = gpt2(1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointCorruptError, match="iter_000000002"):
        sc.init_from(model, attempt / "checkpoints" / "iter_000000002")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_dcp_safetensors_and_hugging_face_directories(base: Path, tmp_path: Path) -> None:
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import save_file

    source = _base_model(base)
    dcp.save(dict(source.state_dict()), checkpoint_id=str(tmp_path / "dcp"), no_dist=True)
    state = {k: v.contiguous() for k, v in source.state_dict().items() if k != "lm_head.weight"}
    save_file(state, str(tmp_path / "weights.safetensors"))  # lm_head is tied to wte
    source.save_pretrained(tmp_path / "hf")
    source.save_pretrained(tmp_path / "hf_sharded", max_shard_size="40KB")
    assert (tmp_path / "hf" / "model.safetensors").is_file()
    assert (tmp_path / "hf_sharded" / "model.safetensors.index.json").is_file()
    expected = {
        "dcp": "dcp",
        "weights.safetensors": "safetensors",
        "hf": "safetensors",
        "hf_sharded": "safetensors",
    }
    for name, kind in expected.items():
        model = gpt2(1)
        assert sc.init_from(model, tmp_path / name).kind == kind
        assert same_weights(model, source), name
        ids = tokens(2, 3)
        assert torch.equal(model(ids).logits, source(ids).logits), name


def test_a_model_that_does_not_fit_lists_every_difference_and_is_unchanged(
    base: Path,
) -> None:
    model = gpt2(1, n_embd=16, n_layer=3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(InitFromError) as raised:
        sc.init_from(model, base / "final.pt")
    error = raised.value
    assert "transformer.h.2.attn.c_attn.weight" in error.missing
    assert "transformer.wte.weight: source (64, 32) != model (64, 16)" in error.shapes
    assert error.unexpected == []
    assert "missing from the source" in str(error)
    assert "shape differs" in str(error)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    with pytest.raises(InitFromError) as raised:  # a source with more entries than the model
        sc.init_from(gpt2(1, n_layer=1), base / "final.pt")
    assert "transformer.h.1.mlp.c_fc.weight" in raised.value.unexpected


def test_a_compile_prefix_is_stripped_only_when_asked(base: Path, tmp_path: Path) -> None:
    compiled = torch.compile(_base_model(base))  # state_dict names: _orig_mod.<...>
    torch.save(compiled.state_dict(), tmp_path / "compiled.pt")
    with pytest.raises(InitFromError, match="strip_prefix"):
        sc.init_from(gpt2(1), tmp_path / "compiled.pt")
    model = gpt2(1)
    sc.init_from(model, tmp_path / "compiled.pt", strip_prefix="_orig_mod.")
    assert same_weights(model, _base_model(base))
    with pytest.raises(InitFromError, match="only"):
        sc.init_from(gpt2(1), tmp_path / "compiled.pt", strip_prefix="model.")


def test_target_only_lora_adapters_need_the_opt_in_and_a_complete_inventory(
    base: Path, tmp_path: Path
) -> None:
    with pytest.raises(InitFromError, match="lora=True"):
        sc.init_from(lora(gpt2(1)), base / "final.pt")
    tuned = lora(gpt2(1))
    report = sc.init_from(tuned, base / "final.pt", lora=True)
    assert len(report.kept) == 4  # lora_A and lora_B of both blocks' c_attn
    assert all(".lora_" in k for k in report.kept)
    ids = tokens(2, 5)
    assert torch.equal(tuned(ids).logits, _base_model(base)(ids).logits)  # cold adapters: the base
    # a source that already holds LoRA entries, and a model whose inventory is incomplete
    torch.save(tuned.state_dict(), tmp_path / "tuned.pt")
    bigger = lora(gpt2(1), targets=("c_attn", "c_fc"))
    with pytest.raises(InitFromError, match="only when the source holds none"):
        sc.init_from(bigger, tmp_path / "tuned.pt", lora=True)
    with pytest.raises(InitFromError, match="LoRA partner"):
        sc.init_from(lora(gpt2(1), with_b=False), base / "final.pt", lora=True)


def test_copies_are_checked_first_and_loaded_alike(base: Path) -> None:
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    model, reference = gpt2(1), gpt2(2)
    ema = AveragedModel(gpt2(3), multi_avg_fn=get_ema_multi_avg_fn(0.9))
    sc.init_from(model, base / "final.pt", copies={"reference": reference, "ema": ema})
    for module in (model, reference, ema.module):
        assert same_weights(module, _base_model(base))
    wrong = gpt2(4, n_layer=1)
    kept = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(InitFromError, match="into the reference"):
        sc.init_from(gpt2(5), base / "final.pt", copies={"reference": wrong})
    assert all(torch.equal(kept[k], v) for k, v in model.state_dict().items())


def test_missing_and_foreign_sources_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(InitFromError, match="no such file"):
        sc.init_from(gpt2(1), tmp_path / "nowhere")
    (tmp_path / "notes.txt").write_text("not weights")
    with pytest.raises(InitFromError, match="weights_only"):
        sc.init_from(gpt2(1), tmp_path / "notes.txt")
    torch.save({"model": gpt2(1).state_dict(), "step": 3}, tmp_path / "wrapped.pt")
    with pytest.raises(InitFromError, match="not a state dict"):
        sc.init_from(gpt2(1), tmp_path / "wrapped.pt")


def test_a_dcp_format_run_is_verified_against_its_manifest(tmp_path: Path) -> None:
    model = gpt2(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    knobs = ["save_every=1", "save_async=false", "checkpoint_format=dcp", "quiet=true"]
    ckpt = sc.Checkpointer(sc.CheckpointConfig.load(None, knobs), run="dcp", output_root=tmp_path)
    ckpt.track(model=model, optimizer=optimizer)
    ckpt.resume()
    ids = tokens(4, 7)
    model(ids, labels=ids).loss.backward()
    optimizer.step()
    ckpt.record(sc.Outcome.APPLIED)
    ckpt.step_end()
    ckpt.close()
    target = gpt2(1)
    report = sc.init_from(target, tmp_path)
    assert (report.kind, report.iteration) == ("checkpoint", 1)
    assert same_weights(target, model)
    (shard,) = tmp_path.glob("**/iter_000000001/model/*.distcp")
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    fresh = gpt2(1)
    before = {k: v.clone() for k, v in fresh.state_dict().items()}
    with pytest.raises(CheckpointCorruptError, match="does not match the manifest"):
        sc.init_from(fresh, shard.parent.parent)
    assert all(torch.equal(before[k], v) for k, v in fresh.state_dict().items())
