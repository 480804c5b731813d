"""``statecraft bench async``: what an asynchronous save costs the training thread, and what
a write in flight costs the training step, in one process.

For a model + AdamW state of ``--size-mib`` (the ``bench save --sizes`` state: a third
parameters, two thirds moments), each repeat times, in a rotating order:

- **copy_ floor**: ``copy_`` of every state tensor into preallocated buffers (the physical
  floor of any snapshot);
- **clone**: ``clone()`` of every state tensor (fresh allocations each time);
- **statecraft async**: the training-thread time of one ``Checkpointer(save_async=true).save()``
  (join the previous write, produce the payloads, copy them into the role's reused staging
  buffers, prove the copy isolated, hand the write job to the role's slot), from the second
  save on; and its time to durable (``PendingSave.durable``: the save machine committed);
- **dcp.async_save**: ``torch.distributed.checkpoint.async_save`` of the same state dicts (no
  process group: one process), its blocking time and its time to durable;
- **sync save**: ``Checkpointer(save_async=false).save()`` of the same state.

The step slowdown: a fixed matmul step (calibrated to about a fortieth of a sync save) is
timed back to back while a background write runs on the role's slot (a thread), then as many
steps with no write; the slowdown is the ratio of the medians (and of the means, which show
stalls). For comparison the same steps are timed while a **writer process** (``spawn``,
started once, holding its own copy of the state) runs a synchronous ``Checkpointer.save()``:
the same bytes written without sharing the training process's GIL, so the thread's extra
slowdown over the process's is the GIL's share (the rest is CPU, memory bandwidth and disk).
A *forked* writer is not measured: it deadlocks on the commit thread pool it inherits
(``statecraft.storage.deferred``).

Both saves are real ``Checkpointer.save()`` calls (``save_async`` on and off, each with its
own output root, ``keep_model_last=2`` so retention rides every write job). Nothing asserts
a speed; ``tests/cli/test_bench_async.py`` checks the shape.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from statecraft.cli.bench.async_contenders import (
    Saver,
    WriterProcess,
    dcp_async_save,
    timed_steps,
)
from statecraft.cli.bench.common import MIB, bench_root, check_positive, scratch
from statecraft.cli.bench.figures import Figure, FigureRun, Measured, paired, size_text
from statecraft.cli.bench.targets import (
    ASYNC_BLOCKING_TARGET,
    ASYNC_DURABLE_TARGET,
    ASYNC_STEP_TARGET,
)

__all__ = [
    "ASYNC_BLOCKING_TARGET",
    "ASYNC_DURABLE_TARGET",
    "ASYNC_STEP_TARGET",
    "measure_async",
    "run_bench_async",
]


def _row(samples: list[float]) -> dict[str, Any]:
    return {
        "median_s": statistics.median(samples),
        "min_s": min(samples),
        "max_s": max(samples),
        "samples_s": samples,
    }


def _state_tensors(model: Any, optimizer: Any) -> list[Any]:
    import torch

    moments = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    return [p.detach() for p in model.parameters()] + moments


def _matmul_step(target_s: float) -> tuple[Callable[[], None], dict[str, Any]]:
    """A fixed step of ``k`` 256x256 matmuls lasting about ``target_s`` seconds."""
    import torch

    a, b = torch.randn(256, 256), torch.randn(256, 256)
    out = torch.empty(256, 256)
    timings = []
    for _ in range(20):
        started = time.perf_counter()
        torch.mm(a, b, out=out)
        timings.append(time.perf_counter() - started)
    one = min(timings)  # the uncontended cost: bursts of load elsewhere only lengthen it
    k = max(1, round(target_s / one))

    def step() -> None:
        for _ in range(k):
            torch.mm(a, b, out=out)

    return step, {"matmuls": k, "n": 256, "target_s": target_s}


def _until_done(pending: Any) -> Callable[[int], bool]:
    """Stop once the write is done and at least one step ran during it."""
    return lambda n: bool(pending.done) and n >= 1


def _until_count(count: int) -> Callable[[int], bool]:
    return lambda n: n >= count


def measure_async(
    *, size_mib: int, repeat: int, directory: str | None = None, others: bool = True
) -> dict[str, Any]:
    """Measure the async save's blocking time, time to durable and step slowdown; without
    ``others``, only statecraft against its baselines (no ``clone()``, ``dcp.async_save`` or
    writer process: the quick figures of the one table).

    Returns:
        ``{"size_mib", "state_bytes", "repeat", "torch_threads", "writer", "blocking",
        "durable", "step", "first_save", "ratios", "targets"}``; ``blocking`` and ``durable``
        hold a row (median, min, max, samples) per contender, ``step`` the step times with no
        write and during a thread / process write (``step_rounds``: their medians per
        round), ``ratios`` the medians' ratios.

    Raises:
        ConfigError: ``size_mib`` or ``repeat`` is not a positive integer.
    """
    import torch

    from statecraft.cli.bench.sweep import _quiet_statecraft_logger, build_training_state

    check_positive("statecraft bench async", size_mib=size_mib, repeat=repeat)
    model, optimizer = build_training_state(size_mib * MIB)
    tensors = _state_tensors(model, optimizer)
    floor_buffers = [torch.empty_like(t) for t in tensors]
    dcp_state = {"model": model.state_dict(), "optim": optimizer.state_dict()}
    blocking: dict[str, list[float]] = {"copy_floor": [], "clone": [], "statecraft": [], "dcp": []}
    durable: dict[str, list[float]] = {"statecraft": [], "sync": [], "dcp": []}
    with bench_root(directory) as root, _quiet_statecraft_logger():
        ours = Saver(tempfile.mkdtemp(dir=root), model, optimizer, save_async=True)
        sync = Saver(tempfile.mkdtemp(dir=root), model, optimizer, save_async=False)
        try:
            first_blocking, _, _ = ours.save_async()  # allocates the staging buffers
            ours.ckpt.wait()
            sync_warm, _ = sync.save()
            writer = WriterProcess(tempfile.mkdtemp(dir=root), size_mib * MIB) if others else None
            if others:
                dcp_async_save(dcp_state, tempfile.mkdtemp(prefix="dcp-", dir=root))  # warm-up
            step, step_info = _matmul_step(min(0.02, max(0.0005, sync_warm / 40)))

            def floor() -> None:
                started = time.perf_counter()
                for buf, t in zip(floor_buffers, tensors, strict=True):
                    buf.copy_(t)
                blocking["copy_floor"].append(time.perf_counter() - started)

            def clone() -> None:
                started = time.perf_counter()
                copies = [t.clone() for t in tensors]
                blocking["clone"].append(time.perf_counter() - started)
                del copies

            def statecraft_async() -> None:
                seconds, _, to_durable = ours.save_async()
                ours.ckpt.wait()  # the write job's retention too: nothing in flight after
                blocking["statecraft"].append(seconds)
                durable["statecraft"].append(to_durable)

            def statecraft_sync() -> None:
                durable["sync"].append(sync.save()[0])

            def dcp() -> None:
                with scratch(root, "dcp") as where:
                    seconds, total = dcp_async_save(dcp_state, where)
                blocking["dcp"].append(seconds)
                durable["dcp"].append(total)

            contenders = [floor, clone, statecraft_async, statecraft_sync, dcp]
            if not others:
                contenders = [floor, statecraft_async, statecraft_sync]
            steps: dict[str, list[float]] = {"baseline": [], "thread": [], "process": []}
            rounds: list[dict[str, float]] = []
            for i in range(repeat):
                n = len(contenders)
                for run in contenders[i % n :] + contenders[: i % n]:
                    run()
                    gc.collect()
                _, pending = ours.save()
                during = timed_steps(step, _until_done(pending))
                ours.ckpt.wait()
                alone = timed_steps(step, _until_count(max(len(during), 5)))
                steps["thread"] += during
                steps["baseline"] += alone
                rounds.append(
                    {"thread": statistics.median(during), "baseline": statistics.median(alone)}
                )
                if writer is not None:
                    steps["process"] += writer.steps_during_save(step)
            if writer is not None:
                writer.close()
        finally:
            ours.close()
            sync.close()
    return _result(
        size_mib=size_mib,
        repeat=repeat,
        state_bytes=sum(t.numel() * t.element_size() for t in tensors),
        blocking=blocking,
        durable=durable,
        steps={**steps, "rounds": rounds},
        step_info=step_info,
        first={"blocking_s": first_blocking},
    )


def _result(
    *,
    size_mib: int,
    repeat: int,
    state_bytes: int,
    blocking: dict[str, list[float]],
    durable: dict[str, list[float]],
    steps: dict[str, Any],
    step_info: dict[str, Any],
    first: dict[str, Any],
) -> dict[str, Any]:
    import torch

    b = {name: _row(values) for name, values in blocking.items() if values}
    d = {name: _row(values) for name, values in durable.items() if values}
    rounds = steps.pop("rounds")
    s = {name: _row(values) if values else None for name, values in steps.items()}
    med = {name: row["median_s"] for name, row in b.items()}

    def over(rows: dict[str, Any], name: str, base: str) -> float | None:
        return rows[name]["median_s"] / rows[base]["median_s"] if name in rows else None

    base = s["baseline"]

    def slowdown(name: str, key: str) -> float | None:
        row = s[name]
        if row is None or base is None:
            return None
        if key == "mean":
            return statistics.fmean(row["samples_s"]) / statistics.fmean(base["samples_s"]) - 1
        return row["median_s"] / base["median_s"] - 1

    return {
        "size_mib": size_mib,
        "state_bytes": state_bytes,
        "repeat": repeat,
        "torch_threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "writer": "thread",
        "blocking": b,
        "durable": d,
        "step": {**s, **step_info},
        "step_rounds": rounds,
        "first_save": first,
        "ratios": {
            "blocking_vs_copy_floor": med["statecraft"] / med["copy_floor"],
            "clone_vs_copy_floor": over(b, "clone", "copy_floor"),
            "dcp_blocking_vs_copy_floor": over(b, "dcp", "copy_floor"),
            "durable_vs_sync": d["statecraft"]["median_s"] / d["sync"]["median_s"],
            "dcp_durable_vs_sync": over(d, "dcp", "sync"),
            "step_slowdown_thread": slowdown("thread", "median"),
            "step_slowdown_thread_mean": slowdown("thread", "mean"),
            "step_slowdown_process": slowdown("process", "median"),
            "step_slowdown_process_mean": slowdown("process", "mean"),
        },
        "targets": {
            "blocking_vs_copy_floor_max": ASYNC_BLOCKING_TARGET,
            "step_slowdown_max": ASYNC_STEP_TARGET,
            "durable_vs_sync_max": ASYNC_DURABLE_TARGET,
        },
    }


def run_bench_async(args: argparse.Namespace) -> int:
    """``statecraft bench async``: print :func:`measure_async` as a table or JSON."""
    from statecraft.cli.bench.report import format_async
    from statecraft.cli.envelope import emit

    data = measure_async(size_mib=args.size_mib, repeat=args.repeat, directory=args.dir)
    return emit("bench async", as_json=args.json, data=data, text=format_async(data))


def _async_figure(key: str) -> Callable[[FigureRun], Measured]:
    """One figure of a quick :func:`measure_async` run (shared by the three): per round the
    blocking / ``copy_`` floor, time to durable / sync save, or step time during / without a
    background write."""

    def run(ctx: FigureRun) -> Measured:
        mib = ctx.size_mib(16, 64)
        data = ctx.once(
            f"async:{mib}",
            lambda: measure_async(
                size_mib=mib, repeat=ctx.repeat, directory=ctx.root, others=False
            ),
        )
        b, d = data["blocking"], data["durable"]
        if key == "blocking":
            values = paired(b["statecraft"]["samples_s"], b["copy_floor"]["samples_s"])
        elif key == "durable":
            values = paired(d["statecraft"]["samples_s"], d["sync"]["samples_s"])
        else:
            rounds = data["step_rounds"]
            values = paired([r["thread"] for r in rounds], [r["baseline"] for r in rounds])
        return Measured(values, size_text(mib))

    return run


FIGURES = [
    Figure("async blocking (2nd save on)", "copy_ into reused buffers", ASYNC_BLOCKING_TARGET,
           "lower", _async_figure("blocking")),
    Figure("async time to durable", "synchronous save", ASYNC_DURABLE_TARGET, "lower",
           _async_figure("durable")),
    Figure("step time during an async write", "step time, no write", 1 + ASYNC_STEP_TARGET,
           "lower", _async_figure("step")),
]  # fmt: skip
