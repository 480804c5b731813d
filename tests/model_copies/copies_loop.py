"""A small RL-style loop with a moving old policy and a moving reference, for the
model-copies tests (in process and as a child process that the parent SIGKILLs).

The policy is a real two-layer torch MLP over 4 actions. Each step's loss is a PPO-style
clipped ratio against the old policy plus a KL penalty towards the reference, on a batch drawn
from the step number (so a resumed window sees the same batches). ``Checkpointer.track`` owns
the refreshes: old after every ``OLD_EVERY``-th applied update, the reference after every
``REF_EVERY``-th.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

import statecraft as sc

OLD_EVERY = 3
REF_EVERY = 2
RUN = sc.RunIdentity("proj", "rl", "ppo")


def policy(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 4))


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    obs = torch.randn(32, 6, generator=g)
    actions = torch.randint(0, 4, (32,), generator=g)
    advantages = torch.randn(32, generator=g)
    return obs, actions, advantages


def rl_loss(model: nn.Module, old: nn.Module, ref: nn.Module, step: int) -> torch.Tensor:
    obs, actions, adv = batch(step)
    logp = torch.log_softmax(model(obs), -1)
    with torch.no_grad():
        old_logp = torch.log_softmax(old(obs), -1)
        ref_logp = torch.log_softmax(ref(obs), -1)
    taken = logp.gather(-1, actions[:, None]).squeeze(-1)
    ratio = torch.exp(taken - old_logp.gather(-1, actions[:, None]).squeeze(-1))
    clipped = torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv)
    kl = (logp.exp() * (logp - ref_logp)).sum(-1)
    return -(clipped.mean()) + 0.1 * kl.mean()


def build(
    out: Path,
    knobs: list[str],
    *,
    old: bool = True,
    ref_every: int = REF_EVERY,
    old_every: int = OLD_EVERY,
    old_refresh: Any = None,
) -> tuple[nn.Module, nn.Module, nn.Module, Any, sc.Checkpointer]:
    """What a (re)launched process builds: policy, old and reference copies of its raw init,
    optimizer, and a Checkpointer tracking them."""
    model = policy(7)
    old_policy = copy.deepcopy(model).requires_grad_(False)
    ref = copy.deepcopy(model).requires_grad_(False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-2)
    config = sc.CheckpointConfig.load(None, ["quiet=true", *knobs])
    ckpt = sc.Checkpointer(config, run=RUN, output_root=out)
    ckpt.track(
        model=model,
        optimizer=optimizer,
        reference=ref,
        reference_update_every=ref_every,
        **(
            {"old": old_policy, "old_update_every": old_every, "old_refresh": old_refresh}
            if old
            else {}
        ),
    )
    return model, old_policy, ref, optimizer, ckpt


def window(
    out: Path, until: int, knobs: list[str], **kwargs: Any
) -> tuple[list[float], dict[str, nn.Module], sc.Checkpointer]:
    """One process's window: build, resume, train to ``until``, finalize."""
    model, old_policy, ref, optimizer, ckpt = build(out, knobs, **kwargs)
    start = ckpt.resume()
    losses = []
    for step in range(start.step, until):
        loss = rl_loss(model, old_policy, ref, step)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        ckpt.record(sc.Outcome.APPLIED)
        ckpt.step_end()
        losses.append(loss.item())
    ckpt.finalize()
    ckpt.close()
    return losses, {"model": model, "old": old_policy, "ref": ref}, ckpt


def states(modules: dict[str, nn.Module]) -> dict[str, dict[str, torch.Tensor]]:
    return {name: {k: v.clone() for k, v in m.state_dict().items()} for name, m in modules.items()}


def same(a: dict[str, dict[str, torch.Tensor]], b: dict[str, dict[str, torch.Tensor]]) -> bool:
    return a.keys() == b.keys() and all(
        a[n].keys() == b[n].keys() and all(torch.equal(a[n][k], b[n][k]) for k in a[n]) for n in a
    )


def child_main(argv: list[str]) -> None:
    """The child process: ``out steps result``; prints ``resumed N`` and ``step N <hex>``."""
    torch.set_num_threads(1)
    out, steps, result = Path(argv[0]), int(argv[1]), argv[2]
    model, old_policy, ref, optimizer, ckpt = build(out, ["save_every=1", "save_async=true"])
    start = ckpt.resume()
    print("resumed", start.step, flush=True)
    for step in range(start.step, steps):
        loss = rl_loss(model, old_policy, ref, step)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        ckpt.record(sc.Outcome.APPLIED)
        ckpt.step_end()
        print("step", step, loss.item().hex(), flush=True)
    ckpt.finalize()
    torch.save(states({"model": model, "old": old_policy, "ref": ref}), result)
    print("done", flush=True)


if __name__ == "__main__":
    child_main(sys.argv[1:])
