"""Train a small character-level GPT on a text file, with crash-consistent checkpoints.

    python examples/gpt/train.py --data input.txt --out runs --max-iters 2000

Kill it at any moment (SIGKILL included, even in the middle of a save) and run the same
command again: it continues from the newest checkpoint that verifies, and the weights, the
optimizer, the loop's own values and every printed ``step N: loss X`` line are bit for bit those
of a run that was never interrupted. ``sample.py`` then writes text from the newest checkpoint.

Every line that talks to statecraft is marked ``# ckpt``.
"""

from __future__ import annotations

import argparse
import math
import random

import numpy as np
import torch
from model import GPT, GPTConfig  # the example's own module, beside this file

import statecraft as sc


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="a UTF-8 text file to learn")
    p.add_argument("--out", required=True, help="output root for checkpoints")
    p.add_argument("--name", default="gpt-char", help="the run's name under --out")
    p.add_argument("--max-iters", type=int, default=2000, help="optimizer steps in all")
    p.add_argument("--save-every", type=int, default=250)
    p.add_argument("--eval-interval", type=int, default=250)
    p.add_argument("--eval-iters", type=int, default=20)
    p.add_argument("--log-interval", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--grad-accum", type=int, default=2, help="microbatches per optimizer step")
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup-iters", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's own)")
    return p.parse_args(argv)


def cosine_with_warmup(warmup: int, total: int, min_ratio: float):
    """The LR factor at optimizer step ``s``: linear warmup, then cosine decay to
    ``min_ratio``."""

    def factor(s: int) -> float:
        if s < warmup:
            return (s + 1) / (warmup + 1)
        progress = min(1.0, (s - warmup) / max(1, total - warmup))
        return min_ratio + 0.5 * (1.0 - min_ratio) * (1.0 + math.cos(math.pi * progress))

    return factor


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    # Seed every random stream for a reproducible fresh start; a resume restores them all.
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    with open(args.data, encoding="utf-8") as f:
        text = f.read()
    vocab = "".join(sorted(set(text)))
    stoi = {ch: i for i, ch in enumerate(vocab)}
    data = torch.tensor([stoi[ch] for ch in text], dtype=torch.long)
    split = int(0.9 * len(data))
    splits = {"train": data[:split], "val": data[split:]}

    def get_batch(which: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Random windows of the split (torch's global generator draws the offsets)."""
        source = splits[which]
        ix = torch.randint(len(source) - args.block_size - 1, (args.batch_size,))
        x = torch.stack([source[i : i + args.block_size] for i in ix])
        y = torch.stack([source[i + 1 : i + 1 + args.block_size] for i in ix])
        return x, y

    model_args = {
        "vocab_size": len(vocab),
        "block_size": args.block_size,
        "n_layer": args.n_layer,
        "n_head": args.n_head,
        "n_embd": args.n_embd,
        "dropout": args.dropout,
        "bias": True,
    }
    model = GPT(GPTConfig(**model_args))
    optimizer = model.configure_optimizer(
        lr=args.lr, weight_decay=args.weight_decay, betas=(0.9, 0.95)
    )
    schedule = {"warmup": args.warmup_iters, "total": args.max_iters}
    schedule["min_ratio"] = args.min_lr / args.lr
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, cosine_with_warmup(**schedule))

    @torch.no_grad()
    def estimate_loss() -> dict[str, float]:
        model.eval()
        out = {}
        for which in ("train", "val"):
            losses = torch.zeros(args.eval_iters)
            for k in range(args.eval_iters):
                _, loss = model(*get_batch(which))
                losses[k] = loss.item()
            out[which] = losses.mean().item()
        model.train()
        return out

    knobs = [f"save_every={args.save_every}"]  # ckpt: async saves and retention by default
    config = sc.CheckpointConfig.load(None, knobs)  # ckpt
    run = sc.RunIdentity.named(args.name)  # ckpt: project and group default to "default"
    ckpt = sc.Checkpointer(config, run=run, output_root=args.out)  # ckpt
    ckpt.track(  # ckpt
        model=model,  # ckpt
        optimizer=optimizer,  # ckpt
        scheduler=scheduler,  # ckpt
        scheduler_identity=sc.SchedulerIdentity("cosine_with_warmup", 1, schedule),  # ckpt
    )  # ckpt
    start = ckpt.resume()  # ckpt: model, optimizer, scheduler, RNG streams, clocks, loop state
    state = ckpt.loop_state  # ckpt: restored by resume(); saved with every checkpoint
    if start.resumed:  # ckpt
        X, Y = state["batch"]  # ckpt: drawn before the save; drawing it again is not exact
        best_val_loss = state["best_val_loss"]  # ckpt
    else:
        X, Y = get_batch("train")  # the first prefetch
        best_val_loss = float("inf")
        state.update(model_args=model_args, config=vars(args), vocab=vocab)  # ckpt
    print(f"start at step {start.step}: {start.reason}", flush=True)

    model.train()
    for step in range(start.step, args.max_iters):
        for micro in range(args.grad_accum):
            _, loss = model(X, Y)
            loss = loss / args.grad_accum
            X, Y = get_batch("train")  # prefetch the next microbatch while this one runs
            loss.backward()
            if micro < args.grad_accum - 1:
                ckpt.record(sc.Outcome.ACCUMULATING)  # ckpt: a microbatch, no update yet
        if args.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        ckpt.record(sc.Outcome.APPLIED)  # ckpt: once per optimizer step
        done = step + 1
        if done % args.log_interval == 0:
            print(f"step {done}: loss {loss.item() * args.grad_accum!r}", flush=True)
        if done % args.eval_interval == 0:
            losses = estimate_loss()
            best_val_loss = min(best_val_loss, losses["val"])
            train_loss, val_loss = losses["train"], losses["val"]
            print(f"step {done}: train loss {train_loss!r}, val loss {val_loss!r}", flush=True)
        state["batch"], state["best_val_loss"] = (X, Y), best_val_loss  # ckpt
        if ckpt.step_end().stop:  # ckpt: saves when due; stop means the job must end now
            break
    ckpt.finalize()  # ckpt: the final step is saved even off cadence
    print(f"done at step {ckpt.step}; best val loss {best_val_loss!r}", flush=True)


if __name__ == "__main__":
    main()
