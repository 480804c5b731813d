"""A tiny actor-critic (PPO) on a CartPole written in torch, checkpointed as one atomic
multi-role boundary per outer iteration: the policy (with the RNG) and the critic, each with
its own optimizer and counter, and ``loop_state`` recording the configured critic warm-up.

Kill it at any moment (SIGKILL included) and run the same command again: it resumes from the
newest complete boundary and ends bit for bit where an uninterrupted run ends (its last line,
``final <sha256>``, fingerprints every weight and optimizer moment). A SIGTERM (or SIGUSR1, the
sentinel file, the deadline) stops it at the next iteration's ``step_end``: the emergency save
writes that iteration's full boundary, the process exits 0 (``stopped at iteration N``), and
the requeued command continues from it.

::

    python examples/ppo/train.py --out /tmp/ppo --iterations 20 --warmup 4 --save-every 5
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
import time

import torch
from torch import nn

import statecraft as sc

GRAVITY, CART, POLE, HALF_LEN, FORCE, DT = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02


class CartPole:
    """A batch of CartPoles (the classic dynamics), reset from the torch RNG."""

    def __init__(self, envs: int) -> None:
        self.state = self._initial(envs)
        self.t = torch.zeros(envs)

    @staticmethod
    def _initial(n: int) -> torch.Tensor:
        return (torch.rand(n, 4) - 0.5) * 0.1

    def step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, x_dot, theta, theta_dot = self.state.unbind(1)
        force = (action.float() * 2 - 1) * FORCE
        cos, sin = torch.cos(theta), torch.sin(theta)
        total = CART + POLE
        temp = (force + POLE * HALF_LEN * theta_dot**2 * sin) / total
        theta_acc = (GRAVITY * sin - cos * temp) / (HALF_LEN * (4.0 / 3.0 - POLE * cos**2 / total))
        x_acc = temp - POLE * HALF_LEN * theta_acc * cos / total
        self.state = torch.stack(
            [x + DT * x_dot, x_dot + DT * x_acc, theta + DT * theta_dot,
             theta_dot + DT * theta_acc], 1,
        )  # fmt: skip
        self.t += 1
        done = (self.state[:, 0].abs() > 2.4) | (self.state[:, 2].abs() > 0.21) | (self.t >= 200)
        if done.any():
            self.state[done] = self._initial(int(done.sum()))
            self.t[done] = 0
        return torch.ones(len(action)), done.float()


def rollout(env: CartPole, policy: nn.Module, steps: int) -> dict[str, torch.Tensor]:
    obs, actions, logps, rewards, dones = [], [], [], [], []
    with torch.no_grad():
        for _ in range(steps):
            dist = torch.distributions.Categorical(logits=policy(env.state))
            action = dist.sample()
            obs.append(env.state.clone())
            actions.append(action)
            logps.append(dist.log_prob(action))
            reward, done = env.step(action)
            rewards.append(reward)
            dones.append(done)
    returns, running = [], torch.zeros(len(env.state))
    for reward, done in zip(reversed(rewards), reversed(dones), strict=True):
        running = reward + 0.99 * running * (1 - done)
        returns.append(running)
    return {
        "obs": torch.cat(obs), "actions": torch.cat(actions), "logps": torch.cat(logps),
        "returns": torch.cat(list(reversed(returns))),
    }  # fmt: skip


def fingerprint(*objects: nn.Module | torch.optim.Optimizer) -> str:
    digest = hashlib.sha256()
    for obj in objects:
        state = obj.state_dict()
        tensors = state.values() if isinstance(obj, nn.Module) else [
            v for s in state["state"].values() for v in s.values()
        ]  # fmt: skip
        for t in tensors:
            digest.update(torch.as_tensor(t).detach().cpu().numpy().tobytes())
    return digest.hexdigest()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--run", default="ppo-cartpole")
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--warmup", type=int, default=4, help="critic-only iterations first")
    p.add_argument("--envs", type=int, default=16)
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save-every", type=int, default=1, help="boundaries every N iterations")
    p.add_argument("--sleep", type=float, default=0.0, help="seconds per iteration (tests)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)

    actor = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 2))
    critic = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 1))
    actor_opt = torch.optim.AdamW(actor.parameters(), lr=3e-3)
    critic_opt = torch.optim.AdamW(critic.parameters(), lr=1e-2)

    ckpt = sc.Checkpointer(sc.CheckpointConfig(), run=args.run, output_root=args.out)
    policy = ckpt.track_role("policy", model=actor, optimizer=actor_opt)
    value = ckpt.track_role("critic", model=critic, optimizer=critic_opt)
    start = ckpt.resume()
    recorded = ckpt.committed_loop_state()
    if recorded is not None and recorded.get("critic_warmup_iterations") != args.warmup:
        # the loop's own rule: a configured choice no role counter can express
        print(f"this run was started with --warmup {recorded['critic_warmup_iterations']}, "
              f"not {args.warmup}; rerun with that value", file=sys.stderr)  # fmt: skip
        return 2
    print(f"start at iteration {start.step} ({start.reason}); counters {start.roles}", flush=True)

    for it in range(start.step, args.iterations):
        env = CartPole(args.envs)
        batch = rollout(env, actor, args.steps)
        train_actor = it >= args.warmup
        for _ in range(args.epochs):
            values = critic(batch["obs"]).squeeze(1)
            critic_loss = (values - batch["returns"]).pow(2).mean()
            critic_opt.zero_grad()
            critic_loss.backward()
            critic_opt.step()
            value.record(sc.Outcome.APPLIED)
            if train_actor:
                advantage = batch["returns"] - values.detach()
                advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
                dist = torch.distributions.Categorical(logits=actor(batch["obs"]))
                ratio = torch.exp(dist.log_prob(batch["actions"]) - batch["logps"])
                clipped = torch.clamp(ratio, 0.8, 1.2)
                actor_loss = -torch.min(ratio * advantage, clipped * advantage).mean()
                actor_opt.zero_grad()
                actor_loss.backward()
                actor_opt.step()
                policy.record(sc.Outcome.APPLIED)
        loop_state = {"critic_warmup_iterations": args.warmup}
        if (it + 1) % args.save_every == 0:
            ckpt.save(iteration=it + 1, loop_state=loop_state)
        mean_return = float(batch["returns"].mean())
        print(f"iter {it + 1}: policy {policy.optimizer_step} critic {value.optimizer_step} "
              f"return {mean_return:.3f}", flush=True)  # fmt: skip
        if math.isnan(mean_return):  # pragma: no cover - a toy that diverged
            return 1
        time.sleep(args.sleep)
        if ckpt.step_end(iteration=it + 1, loop_state=loop_state):  # a stop: boundary durable
            ckpt.finalize()
            ckpt.close()
            print(f"stopped at iteration {it + 1}", flush=True)
            return 0
    ckpt.finalize()
    ckpt.close()
    print(f"final {fingerprint(actor, critic, actor_opt, critic_opt)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
