"""Real parts for the init_from tests: a tiny GPT-2 built from a config (no download; dropout off,
so a forward is a pure function of the weights), a real ``peft`` LoRA of it, and a committed
statecraft base run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

import statecraft as sc

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

VOCAB = 64
SEQ = 8
BASE_RUN = sc.RunIdentity("proj", "base", "pretrain")


def gpt2(seed: int, *, n_embd: int = 32, n_layer: int = 2) -> Any:
    """A GPT-2 language model from a config, its weights drawn from ``seed``."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=VOCAB,
        n_positions=SEQ,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=2,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return GPT2LMHeadModel(config)


def tokens(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (n, SEQ), generator=torch.Generator().manual_seed(seed))


def _logp(model: Any, ids: torch.Tensor) -> torch.Tensor:
    out = model(ids)
    logits = (out if isinstance(out, torch.Tensor) else out.logits)[:, :-1]
    return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1).sum(-1)


def dpo_loss(
    model: Any, reference: Any, chosen: torch.Tensor, rejected: torch.Tensor, beta: float = 0.5
) -> torch.Tensor:
    """A DPO loss: the policy's log-ratio margin over the frozen reference's."""
    with torch.no_grad():
        ref_chosen, ref_rejected = _logp(reference, chosen), _logp(reference, rejected)
    margin = (_logp(model, chosen) - ref_chosen) - (_logp(model, rejected) - ref_rejected)
    return -torch.nn.functional.logsigmoid(beta * margin).mean()


def same_weights(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def lora(model: Any, *, targets: tuple[str, ...] = ("c_attn",), with_b: bool = True) -> Any:
    """``peft.get_peft_model`` with a rank-4 LoRA on ``targets`` (GPT-2's ``Conv1D``:
    ``fan_in_fan_out``): peft's naming (``base_model.model.<...>.base_layer``,
    ``lora_A.default`` / ``lora_B.default``) and its cold start (``lora_B = 0``: the adapted
    model starts as the base). ``with_b=False`` removes every ``lora_B``: an incomplete
    inventory."""
    import peft

    config = peft.LoraConfig(
        r=4, lora_alpha=8, target_modules=list(targets), fan_in_fan_out=True, lora_dropout=0.0
    )
    tuned = peft.get_peft_model(model, config)
    if not with_b:
        for module in tuned.modules():
            if isinstance(getattr(module, "lora_B", None), nn.ModuleDict):
                del module.lora_B["default"]
    return tuned


def base_run(out: Path, *, steps: int = 2) -> Path:
    """A committed statecraft run of :func:`gpt2` (seed 0) trained ``steps`` steps; returns
    its job dir. The model's final weights are saved beside it as ``final.pt``."""
    model = gpt2(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ckpt = sc.Checkpointer(
        sc.CheckpointConfig.load(None, ["save_every=1", "save_async=false", "quiet=true"]),
        run=BASE_RUN,
        output_root=out,
    )
    ckpt.track(model=model, optimizer=optimizer)
    ckpt.resume()
    ids = tokens(4, 7)
    for _ in range(steps):
        model(ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        ckpt.record(sc.Outcome.APPLIED)
        ckpt.step_end()
    ckpt.finalize()
    ckpt.close()
    torch.save(model.state_dict(), out / "final.pt")
    return BASE_RUN.job_dir(out)
