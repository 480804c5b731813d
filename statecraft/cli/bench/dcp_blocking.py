"""The blocking part of ``statecraft bench dcp``: how long a DCP save holds the training thread.

On each rank of the bench's gloo group, two ``Checkpointer`` objects track the same FSDP2 model
and optimizer (``checkpoint_format=dcp save_every=1``, each in its own output root): one with
``save_async=false``, one with ``save_async=true``. Each round, in an order that alternates,
times (barrier to barrier: the slowest rank) three things on the training thread:

- ``sync``: ``step_end()`` of the synchronous checkpointer (the whole save, retention included);
- ``async``: ``step_end()`` of the asynchronous one (stage into reused CPU buffers, hand-off);
  its previous save was joined beforehand by an untimed ``wait()``, so no round pays for
  another's write;
- ``copy``: a bare ``copy_`` of every tensor of the same state into preallocated CPU buffers
  (the floor an asynchronous save cannot go under).

Reported: median, min and max of each over the rounds, and the ratios async / sync and
async / copy. The machine may be shared: the figures are ratios within one run.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

__all__ = ["format_blocking", "measure_blocking", "summarize_blocking"]


def measure_blocking(
    model: Any, optimizer: Any, scratch: str, rounds: int
) -> dict[str, list[float]]:
    """Run the rounds on this rank (every rank calls it); return the seconds of each kind."""
    import torch
    import torch.distributed as dist

    import statecraft as sc
    from statecraft.checkpoint.state import dcp_state

    def checkpointer(save_async: bool) -> Any:
        knobs = ["save_every=1", "checkpoint_format=dcp", f"save_async={str(save_async).lower()}"]
        knobs.append(f"save_async_dcp={str(save_async).lower()}")
        name = "async" if save_async else "sync"
        ckpt = sc.Checkpointer(
            sc.CheckpointConfig.load(None, knobs),
            run=sc.RunIdentity("bench", "dcp", name),
            output_root=f"{scratch}/blocking-{name}",
        )
        ckpt.track(model=model, optimizer=optimizer)
        ckpt.resume()
        return ckpt

    sync, asynchronous = checkpointer(False), checkpointer(True)
    state = {
        "model": dcp_state.model_state_for_save(model),
        "optim": dcp_state.optimizer_state_for_save(model, optimizer).state,
    }
    tensors = _tensors(state)
    buffers = [torch.empty_like(getattr(t, "_local_tensor", t), device="cpu") for t in tensors]

    def copy() -> None:
        for src, dst in zip(tensors, buffers, strict=True):
            dst.copy_(getattr(src, "_local_tensor", src))

    def save(ckpt: Any) -> None:
        ckpt.record(sc.Outcome.APPLIED)
        ckpt.step_end()

    actions = {"sync": lambda: save(sync), "async": lambda: save(asynchronous), "copy": copy}
    times: dict[str, list[float]] = {k: [] for k in actions}
    try:
        for i in range(rounds + 1):  # round 0 warms up (first allocation of the buffers)
            order = list(actions) if i % 2 == 0 else list(reversed(actions))
            for kind in order:
                dist.barrier()
                began = time.perf_counter()
                actions[kind]()
                dist.barrier()
                if i > 0:
                    times[kind].append(time.perf_counter() - began)
                if kind == "async":
                    asynchronous.wait()  # untimed: the next round starts with nothing in flight
    finally:
        asynchronous.close()
        sync.close()
    return times


def _tensors(obj: Any) -> list[Any]:
    import torch

    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _tensors(v)]
    return []


def summarize_blocking(times: dict[str, list[float]]) -> dict[str, Any]:
    """Median, min and max per kind, and the ratios of the medians."""
    stats = {
        k: {"median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v)}
        for k, v in times.items()
    }
    med = {k: s["median"] for k, s in stats.items()}
    return {
        "seconds": stats,
        "async_over_sync": med["async"] / med["sync"] if med["sync"] > 0 else None,
        "async_over_copy": med["async"] / med["copy"] if med["copy"] > 0 else None,
    }


def format_blocking(data: dict[str, Any]) -> list[str]:
    """The report's lines."""
    s = data["seconds"]

    def cell(kind: str) -> str:
        k = s[kind]
        return f"{k['median']:.4f} s [{k['min']:.4f}..{k['max']:.4f}]"

    ratio_sync = data["async_over_sync"] or 0.0
    ratio_copy = data["async_over_copy"] or 0.0
    return [
        f"  training-thread blocking, median [range] of {s['async']['n']} interleaved rounds "
        "(a shared machine: compare the ratios):",
        f"    sync DCP save {cell('sync')}  async DCP save {cell('async')}  bare copy_ "
        f"{cell('copy')}",
        f"    async / sync {ratio_sync:.3f}x, async / copy {ratio_copy:.2f}x",
    ]
