"""A complete training loop with crash-consistent checkpoints and exact resume.

    python examples/train_loop.py --out runs --steps 200 --save-every 50

Kill it at any moment (even with SIGKILL, even mid-save) and run the same command again: it
continues from the newest checkpoint that verifies, and the result is bit-for-bit the run that
was never interrupted. Run it with a larger ``--steps`` to train further.

Preemption: SIGUSR1, SIGTERM or the sentinel file ``$SLURM_LOG_DIR/SIGUSR1_RECEIVED`` stops it
at the next step boundary with an emergency checkpoint and exit code 0; the same command
resumes there. Under ``torchrun`` (``WORLD_SIZE`` > 1) every rank runs this script in one gloo
process group (see ``examples/slurm/``).
"""

import argparse
import os
import random

import numpy as np
import torch
from torch import nn

import statecraft as sc


class ShuffledData:
    """Mini-batches from a new shuffle every epoch, with a resumable cursor.

    The state is just (epoch, position, seed): the epoch's permutation is recomputed from a
    generator seeded by (seed, epoch), so it never has to be stored.
    """

    def __init__(self, x, y, batch_size, seed):
        self.x, self.y, self.batch_size = x, y, batch_size
        self.seed, self.epoch, self.position = seed, 0, 0

    def permutation(self):
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        return torch.randperm(len(self.x), generator=generator)

    def next_batch(self):
        if self.position + self.batch_size > len(self.x):  # epoch over: next shuffle
            self.epoch, self.position = self.epoch + 1, 0
        idx = self.permutation()[self.position : self.position + self.batch_size]
        self.position += self.batch_size
        return self.x[idx], self.y[idx]

    def state_dict(self):
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed}

    def load_state_dict(self, state):
        self.epoch, self.position, self.seed = state["epoch"], state["position"], state["seed"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="output root for checkpoints")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--save-every", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:  # torchrun's environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
        torch.distributed.init_process_group("gloo")

    # Seed every random stream. Resume restores them from the checkpoint; seeding makes a
    # fresh start reproducible too.
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    # A small regression problem: y = sin(x @ w) + noise, fixed by the seed.
    g = torch.Generator().manual_seed(args.seed + 1)
    x = torch.randn(1024, 16, generator=g)
    y = torch.sin(x @ torch.randn(16, 1, generator=g)) + 0.1 * torch.randn(1024, 1, generator=g)

    model = nn.Sequential(nn.Linear(16, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    warmup = 20
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))
    data = ShuffledData(x, y, batch_size=32, seed=args.seed)

    # Checkpointing: save every K steps; resume=auto (the default) continues the newest attempt.
    # The defaults write in the background (save_async=true) and keep the optimizer state of
    # the newest checkpoint only (keep_optim_last=null -> 1 for a local primary).
    config = sc.CheckpointConfig.load(None, overrides=[f"save_every={args.save_every}"])
    ckpt = sc.Checkpointer(
        config, run=sc.RunIdentity("examples", "regression", "mlp"), output_root=args.out
    )
    # The schedule's identity is checked on resume, so a changed schedule cannot resume silently.
    ckpt.track(
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        data=data,
        scheduler_identity=sc.SchedulerIdentity("linear_warmup", 1, {"warmup": warmup}),
    )
    start = ckpt.resume()  # loads model, optimizer, scheduler, data cursor, RNG and clocks
    print(f"start at step {start.step}: {start.reason}")

    model.train()
    for step in range(start.step, args.steps):
        xb, yb = data.next_batch()
        loss = nn.functional.mse_loss(model(xb), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        ckpt.record(sc.Outcome.APPLIED)  # one optimizer update applied
        if (step + 1) % 10 == 0:
            print(f"step {step + 1}: loss {loss.item():.4f}")
        end = ckpt.step_end()  # saves when due; true means stop now (preemption / timeout)
        if end:
            print(f"stopped at step {ckpt.step}: {end.reason} (emergency checkpoint saved)")
            break
    ckpt.finalize()  # saves the last step if it is not saved yet (after a stop: nothing)

    for save in ckpt.saves:
        print(
            f"saved step {save.iteration}: {save.bytes_written} bytes in {save.seconds:.3f}s "
            f"-> {save.location}"
        )
    print(f"done at step {ckpt.step}")
    if distributed:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
