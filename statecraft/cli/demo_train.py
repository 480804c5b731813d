"""The training process that ``statecraft demo`` launches, kills and relaunches.

::

    python -m statecraft.cli.demo_train --out DIR --steps N --save-every K [--validate-every V]
        [--seed S] [--step-sleep SECONDS] [--format consolidated|dcp] [--progress every-rank|rank0]

A small real training run (an MLP with dropout on synthetic regression data, AdamW, a warmup +
cosine ``LambdaLR``, a shuffled data source) checkpointed through the public API with
``save_every=K resume=auto`` and the default knobs: asynchronous saves (``save_async=true``)
and retention (``keep_optim_last=null``: the optimizer state of the newest checkpoint only).
With ``--validate-every V`` the run also validates (``validation.every=V
validation.save_checkpoint=true``): the held-out MSE of a fixed held-out set is evaluated at
every V-th step through the durable validation transaction (an evaluation-pending checkpoint,
then the evaluation, then publication).
Running the same command again after a kill resumes from the newest checkpoint that verifies,
and first finishes its validation when it was pending. The sentinel file
``$SLURM_LOG_DIR/SIGUSR1_RECEIVED``, SIGUSR1 or SIGTERM stops the run at the next step boundary
(an emergency checkpoint, ``DONE.json``, exit 0; the same command resumes). ``--step-sleep``
sleeps after each ``step`` line, before the boundary, so that a parent can act on it first.
Under ``torchrun`` (``WORLD_SIZE`` > 1) every rank joins a gloo group; ``--format dcp``
saves ``checkpoint_format=dcp`` checkpoints (every rank writes its own shards).

Progress protocol: one line per event on stdout (every rank's, or with ``--progress rank0``
rank 0's only: the other ranks are silent), one write each (ranks share a pipe), flushed at
once, so a parent can kill the process at a chosen point and know where it was::

    resumed <step> <source or ->     once, after the resume decision
    step <n>                         after optimizer step n is applied and recorded
    save-begin <n>                   right before the checkpoint of step n is written
    save-staged <n> <blocking>       an asynchronous save returned (its state copied; the
                                     write runs in the background); blocking: the training
                                     thread's seconds in the save call
    save-end <n> <seconds> <blocking> after it is committed (seconds of the write job:
                                     the save and retention), printed when it is joined
    evaluated <n> <val_loss>         the evaluation of step n returns (printed by the evaluation
                                     callable, so before its result is recorded)
    pending <n> <stage>              after the resume decision, when the adopted checkpoint's
                                     validation was pending (finished by resume() since)
    published <n> <val_loss>         after iter n's validation is published
    stopped <n> <kind> <path> <seconds> <reason>
                                     step_end() stopped the run at step n: the emergency
                                     save's kind, run-dir relative path, decision-to-durable
                                     seconds, and the stop reason
    done <step>                      after finalize(); the process then exits 0

The model, data and data source live in :mod:`statecraft.cli.demo_workload` (not in
``examples/``) so that ``statecraft demo`` works from an installed wheel; this module runs them.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import sys
import time
from collections.abc import Sequence
from typing import TextIO

import numpy as np
import torch
from torch import nn

import statecraft as sc
from statecraft.cli.demo_workload import (
    BATCH_SIZE,
    HELDOUT,
    NUM_EXAMPLES,
    WARMUP_STEPS,
    ShuffledBatches,
    build_model,
    heldout_loss,
    make_dataset,
    warmup_cosine,
)

__all__ = [
    "DEMO_RUN",
    "ShuffledBatches",
    "build_model",
    "main",
    "make_dataset",
    "train",
    "warmup_cosine",
]

#: The run identity of every demo process: ``<out>/statecraft-demo/mlp/demo/<RUN_TS>/``.
DEMO_RUN = sc.RunIdentity("statecraft-demo", "mlp", "demo")


def _say(stream: TextIO, *fields: object) -> None:
    stream.write(" ".join(map(str, fields)) + "\n")
    stream.flush()


def train(
    out: str,
    *,
    steps: int,
    save_every: int,
    validate_every: int = 0,
    seed: int = 0,
    stream: TextIO | None = None,
    step_sleep: float = 0.0,
    checkpoint_format: str = "consolidated",
    rank0_progress: bool = False,
) -> int:
    """Train (or resume) the demo run under ``out`` to ``steps`` steps; return the final step.

    Every process-global random stream is seeded first, so an uninterrupted run and a resumed
    one start from the same state (the checkpoint's RNG inventory then carries it across kills).

    Raises:
        ValueError: ``steps`` or ``save_every`` is not a positive int.
        CheckpointError: a save or a resume failed (see the checkpoint modules).
    """
    if steps < 1 or save_every < 1 or validate_every < 0:
        raise ValueError(
            f"steps and save_every must be >= 1 and validate_every >= 0, got {steps}, "
            f"{save_every} and {validate_every}"
        )
    stream = stream or sys.stdout
    dist_up = torch.distributed.is_available() and torch.distributed.is_initialized()
    if rank0_progress and dist_up and torch.distributed.get_rank() != 0:
        stream = io.StringIO()  # one progress line per event: rank 0 speaks for the job
    torch.set_num_threads(1)  # determinism and no oversubscription on small machines
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)

    x, y = make_dataset(seed)
    model = build_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(WARMUP_STEPS, steps))
    identity = sc.SchedulerIdentity("warmup_cosine", 1, {"warmup": WARMUP_STEPS, "total": steps})
    data = ShuffledBatches(NUM_EXAMPLES, BATCH_SIZE, seed=seed)

    config = sc.CheckpointConfig.load(
        None,
        overrides=[
            f"save_every={save_every}",
            "resume=auto",
            f"checkpoint_format={checkpoint_format}",
            *(
                [f"validation.every={validate_every}", "validation.save_checkpoint=true"]
                if validate_every
                else []
            ),
        ],
    )
    ckpt = sc.Checkpointer(config, run=DEMO_RUN, output_root=out)
    ckpt.track(
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        data=data,
        scheduler_identity=identity,
    )
    held_x, held_y = (t[:HELDOUT] for t in make_dataset(seed + 1))

    def evaluate(step: int) -> dict[str, float]:
        loss = heldout_loss(model, held_x, held_y)
        _say(stream, "evaluated", step, f"{loss:.6f}")
        return {"val_loss": loss}

    if validate_every:
        ckpt.validate_with(evaluate, source=f"demo-heldout-{HELDOUT}")
    start = ckpt.resume()
    _say(stream, "resumed", start.step, start.source or "-")
    if start.validation_stage.value in ("evaluation_pending", "publication_pending"):
        _say(stream, "pending", start.step, start.validation_stage.value)
        _say(stream, "published", start.step, f"{(start.metrics or {})['val_loss']:.6f}")

    model.train()
    for step in range(start.step, steps):
        batch = data.next_indices()
        loss = nn.functional.mse_loss(model(x[batch]), y[batch])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        ckpt.record(sc.Outcome.APPLIED)
        _say(stream, "step", step + 1)
        if step_sleep:
            time.sleep(step_sleep)
        saves_before = len(ckpt.saves)
        validating = validate_every > 0 and (step + 1) % validate_every == 0
        if (step + 1) % save_every == 0 or validating:
            _say(stream, "save-begin", step + 1)
        end = ckpt.step_end()
        _report(stream, ckpt, end, saves_before)
        if end:
            if end.emergency is not None:
                e = end.emergency
                _say(
                    stream,
                    "stopped",
                    e.step,
                    e.kind.value,
                    e.path,
                    f"{e.seconds_to_durable:.4f}",
                    e.reason,
                )
            break
    final_save_due = ckpt.step > 0 and ckpt.last_saved_step != ckpt.step
    if final_save_due:
        _say(stream, "save-begin", ckpt.step)
    saves_before = len(ckpt.saves)
    ckpt.finalize()
    if ckpt.final is not None:
        _report(stream, ckpt, ckpt.final, saves_before)
    _say(stream, "done", ckpt.step)
    return ckpt.step


def _report(stream: TextIO, ckpt: sc.Checkpointer, end: sc.StepEnd, saves_before: int) -> None:
    # In the order it happened: the earlier saves joined first, then this boundary's staged
    # save, then (finalize() joins its own final save) that save's end.
    staged = end.saved if isinstance(end.saved, sc.PendingSave) else None
    joined = ckpt.saves[saves_before:]
    for report in joined:
        if staged is None or report.iteration < staged.iteration:
            _save_end(stream, report)
    if staged is not None:
        _say(stream, "save-staged", staged.iteration, f"{staged.blocking_seconds:.4f}")
        for report in joined:
            if report.iteration >= staged.iteration:
                _save_end(stream, report)
    if end.validation is not None and end.metrics is not None:
        _say(stream, "published", ckpt.step, f"{end.metrics['val_loss']:.6f}")


def _save_end(stream: TextIO, report: sc.SaveReport) -> None:
    _say(
        stream, "save-end", report.iteration, f"{report.seconds:.4f} {report.blocking_seconds:.4f}"
    )


def _die_with_launcher() -> None:
    """Linux: SIGKILL this rank when its launcher dies (``PR_SET_PDEATHSIG``). torchrun starts
    each rank in its own session, so a SIGKILL of the launcher's process group (the demo's
    kill) would otherwise leave the ranks training on; elsewhere a no-op."""
    import ctypes
    import ctypes.util
    import signal

    name = ctypes.util.find_library("c")
    if not sys.platform.startswith("linux") or name is None:
        return
    parent = os.getppid()
    ctypes.CDLL(name, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the launcher died before the call: follow it now
        os.kill(os.getpid(), signal.SIGKILL)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m statecraft.cli.demo_train``."""
    parser = argparse.ArgumentParser(
        prog="python -m statecraft.cli.demo_train", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--out", required=True, help="output root of the run")
    parser.add_argument("--steps", type=_positive, required=True, help="optimizer steps in total")
    parser.add_argument("--save-every", type=_positive, required=True, help="checkpoint cadence")
    parser.add_argument(
        "--validate-every", type=int, default=0, help="validation cadence (0: no validation)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of data, init and dropout")
    parser.add_argument(
        "--step-sleep", type=float, default=0.0, help="seconds to sleep after each step line"
    )
    parser.add_argument(
        "--format",
        choices=("consolidated", "dcp"),
        default="consolidated",
        help="checkpoint_format (dcp: per-rank DCP shards; run it under torchrun)",
    )
    parser.add_argument(
        "--progress",
        choices=("every-rank", "rank0"),
        default="every-rank",
        help="which ranks print progress lines (rank0: one line per event for the whole job)",
    )
    args = parser.parse_args(argv)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:  # torchrun (or RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT by hand)
        _die_with_launcher()
        import torch.distributed as dist

        dist.init_process_group("gloo")
    try:
        train(
            args.out,
            steps=args.steps,
            save_every=args.save_every,
            validate_every=args.validate_every,
            seed=args.seed,
            step_sleep=args.step_sleep,
            checkpoint_format=args.format,
            rank0_progress=args.progress == "rank0",
        )
        if distributed:
            dist.barrier()  # no rank tears the group down while another still needs it
    finally:
        if distributed:
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
