"""Real parts for the init_from tests: a tiny GPT-2 built from a config (no download; dropout off,
so a forward is a pure function of the weights), a LoRA wrapper with peft's exact naming (peft
is not installed in this environment: the wrapper reproduces the entry names and the cold
``lora_B = 0`` start a ``peft.get_peft_model`` LoRA has), and a committed statecraft base run.
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


class LoraLayer(nn.Module):
    """peft's ``lora.Linear`` layout over a GPT-2 ``Conv1D``: ``base_layer`` plus
    ``lora_A.default`` / ``lora_B.default`` (B zero: the adapter starts as a no-op)."""

    def __init__(self, base: nn.Module, rank: int = 4, *, with_b: bool = True) -> None:
        super().__init__()
        n_in, n_out = base.weight.shape  # Conv1D stores (in, out)
        self.base_layer = base
        self.lora_A = nn.ModuleDict({"default": nn.Linear(n_in, rank, bias=False)})
        self.lora_B = nn.ModuleDict(
            {"default": nn.Linear(rank, n_out, bias=False)} if with_b else {}
        )
        if with_b:
            nn.init.zeros_(self.lora_B["default"].weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base_layer(x)
        if "default" in self.lora_B:
            out = out + self.lora_B["default"](self.lora_A["default"](x))
        return out


class _LoraModel(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model


class PeftLike(nn.Module):
    """``PeftModel`` naming: ``base_model.model.<...>``; LoRA on every ``attn.c_attn``."""

    def __init__(self, model: Any, *, with_b: bool = True) -> None:
        super().__init__()
        for block in model.transformer.h:
            block.attn.c_attn = LoraLayer(block.attn.c_attn, with_b=with_b)
        self.base_model = _LoraModel(model)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.base_model.model(ids).logits


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
