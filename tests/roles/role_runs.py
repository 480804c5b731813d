"""Helpers of the multi-role tests: a tiny actor-critic pair of real torch objects and a
checkpointer over them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from checkpoint_runs import Cursor

import statecraft as sc
from statecraft.engine.crash import Fault, FaultKind, IoGate
from statecraft.storage.filesystem import OsFilesystem

RUN = sc.RunIdentity("proj", "group", "ppo")
SYNC = ("save_async=false",)


class Pair:
    """An actor and a critic, each with its optimizer (and the actor a scheduler)."""

    def __init__(self, seed: int = 0) -> None:
        torch.manual_seed(seed)
        self.actor = torch.nn.Linear(4, 2)
        self.actor_opt = torch.optim.AdamW(self.actor.parameters(), lr=1e-2)
        self.actor_sched = torch.optim.lr_scheduler.StepLR(self.actor_opt, 2)
        self.critic = torch.nn.Linear(4, 1)
        self.critic_opt = torch.optim.AdamW(self.critic.parameters(), lr=1e-2)
        self.cursor = Cursor()

    def train(self, *, actor: bool) -> None:
        """One outer iteration: the critic always steps, the actor after warm-up."""
        x = torch.randn(8, 4)
        self.critic(x).pow(2).mean().backward()
        self.critic_opt.step()
        self.critic_opt.zero_grad()
        if actor:
            self.actor(x).pow(2).mean().backward()
            self.actor_opt.step()
            self.actor_opt.zero_grad()
            self.actor_sched.step()
        self.cursor.position += 8


def open_roles(
    out: Path, *overrides: str, seed: int = 0, filesystem: Any = None
) -> tuple[sc.Checkpointer, Pair, Any, Any]:
    """A checkpointer tracking a fresh pair as ``policy`` (with the data) and ``critic``."""
    pair = Pair(seed)
    ckpt = sc.Checkpointer(
        sc.CheckpointConfig.load(None, list(overrides)),
        run=RUN,
        output_root=out,
        filesystem=filesystem,
        quiet=True,
    )
    policy = ckpt.track_role(
        "policy", model=pair.actor, optimizer=pair.actor_opt, scheduler=pair.actor_sched,
        data=pair.cursor,
    )  # fmt: skip
    critic = ckpt.track_role("critic", model=pair.critic, optimizer=pair.critic_opt)
    return ckpt, pair, policy, critic


def run_loop(
    ckpt: sc.Checkpointer, pair: Pair, policy: Any, critic: Any, start: int, stop: int,
    *, warmup: int = 2,
) -> None:  # fmt: skip
    """Outer iterations ``start..stop``, a boundary after each."""
    for it in range(start, stop):
        pair.train(actor=it >= warmup)
        critic.record(sc.Outcome.APPLIED)
        if it >= warmup:
            policy.record(sc.Outcome.APPLIED)
        ckpt.save(iteration=it + 1, loop_state={"critic_warmup_iterations": warmup})


def roles_dir(out: Path) -> Path:
    """The attempt's role_checkpoints/ directory (one attempt)."""
    (found,) = list(out.glob("proj/group/ppo/*/role_checkpoints"))
    return found


class PathFaultGate(IoGate):
    """An I/O gate that fails the first ``op`` on a path containing ``needle``."""

    def __init__(self, needle: str, op: str = "open_write") -> None:
        super().__init__()
        self.needle, self.op, self.fired = needle, op, False

    def before_io(self, op: str, target: str) -> Fault | None:
        fault = super().before_io(op, target)
        if not self.fired and op == self.op and self.needle in target:
            self.fired = True
            return Fault(FaultKind.IO_ERROR, self.count - 1)
        return fault


def failing_filesystem(needle: str) -> OsFilesystem:
    return OsFilesystem(gate=PathFaultGate(needle))
