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
import warnings
from collections.abc import Callable
from typing import Any

from statecraft.cli.bench.common import MIB, bench_root, check_positive, scratch
from statecraft.cli.bench.targets import (
    ASYNC_BLOCKING_TARGET,
    ASYNC_DURABLE_TARGET,
    ASYNC_STEP_TARGET,
)
from statecraft.errors import StatecraftError

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


class _Saver:
    """A running ``Checkpointer`` over the benchmark state (resumed once, then one save per
    call at the next iteration), ``save_async`` on or off; retention keeps the newest two
    checkpoints (``keep_model_last=2``), so the disk holds at most three."""

    def __init__(self, output_root: str, model: Any, optimizer: Any, *, save_async: bool) -> None:
        from statecraft import CheckpointConfig, Checkpointer, RunIdentity

        config = CheckpointConfig.from_dict(
            {
                "resume": "auto",
                "save_every": 0,
                "save_async": save_async,
                "keep_optim_last": 0,
                "keep_model_last": 2,
            }
        )
        kind = "async" if save_async else "sync"
        self.ckpt = Checkpointer(
            config, run=RunIdentity("bench", kind, "run"), output_root=output_root
        )
        self.ckpt.track(model=model, optimizer=optimizer)
        self.ckpt.resume()

    def save(self) -> tuple[float, Any]:
        """(seconds of the ``save()`` call, what it returned: a ``PendingSave`` or a report)."""
        from statecraft import Outcome

        self.ckpt.record(Outcome.APPLIED)
        started = time.perf_counter()
        result = self.ckpt.save()
        seconds = time.perf_counter() - started
        if result is None:  # pragma: no cover - single process is rank 0
            raise StatecraftError("bench async: Checkpointer.save returned nothing on rank 0")
        return seconds, result

    def save_async(self) -> tuple[float, Any, float]:
        """(blocking seconds, the ``PendingSave``, its time to durable): waits until the save
        committed (retention may still run; the next save joins it)."""
        from statecraft import PendingSave

        started = time.perf_counter()
        seconds, pending = self.save()
        if not isinstance(pending, PendingSave):
            raise StatecraftError(
                "bench async: Checkpointer.save wrote synchronously (see the INFO line "
                "'writing iter_N synchronously: ...' with --verbose)"
            )
        pending.durable.wait()
        return seconds, pending, time.perf_counter() - started

    def close(self) -> None:
        self.ckpt.close()


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


def _timed_steps(step: Callable[[], None], until: Callable[[int], bool]) -> list[float]:
    times: list[float] = []
    while not until(len(times)):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return times


def _until_done(pending: Any) -> Callable[[int], bool]:
    """Stop once the write is done and at least one step ran during it."""
    return lambda n: bool(pending.done) and n >= 1


def _until_count(count: int) -> Callable[[int], bool]:
    return lambda n: n >= count


def _writer_process(conn: Any, output_root: str, nbytes: int) -> None:
    """The writer process (``spawn``): its own copy of the benchmark state and a synchronous
    ``Checkpointer``; one save per ``"save"`` message, answered with its seconds."""
    from statecraft.cli.bench.sweep import _quiet_statecraft_logger, build_training_state

    with _quiet_statecraft_logger():
        model, optimizer = build_training_state(nbytes)
        saver = _Saver(output_root, model, optimizer, save_async=False)
        conn.send("ready")
        while conn.recv() == "save":
            conn.send(saver.save()[0])
        saver.close()


class _WriterProcess:
    """A spawned writer process, started once (its start-up is not timed)."""

    def __init__(self, output_root: str, nbytes: int) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(
            target=_writer_process, args=(child, output_root, nbytes), daemon=True
        )
        self.process.start()
        if not self.conn.poll(300) or self.conn.recv() != "ready":
            self.process.kill()
            raise StatecraftError("bench async: the writer process did not start in 300 s")

    def steps_during_save(self, step: Callable[[], None]) -> list[float]:
        """Step times while the writer process saves once."""
        self.conn.send("save")
        times = _timed_steps(step, lambda n: n >= 1 and bool(self.conn.poll()))
        self.conn.recv()
        return times

    def close(self) -> None:
        self.conn.send("stop")
        self.process.join(60)
        if self.process.is_alive():  # pragma: no cover - the child answers "stop"
            self.process.kill()


def _dcp_save(state: dict[str, Any], where: str) -> tuple[float, float]:
    """(blocking seconds, seconds to durable) of one ``dcp.async_save`` into ``where``."""
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        started = time.perf_counter()
        future: Any = dcp.async_save(state, checkpoint_id=where)
        blocking = time.perf_counter() - started
        getattr(future, "upload_completion", future).result()  # a Future, or a response
    return blocking, time.perf_counter() - started


def measure_async(*, size_mib: int, repeat: int, directory: str | None = None) -> dict[str, Any]:
    """Measure the async save's blocking time, time to durable and step slowdown.

    Returns:
        ``{"size_mib", "state_bytes", "repeat", "torch_threads", "writer", "blocking",
        "durable", "step", "first_save", "ratios", "targets"}``; ``blocking`` and ``durable``
        hold a row (median, min, max, samples) per contender, ``step`` the step times with no
        write and during a thread / process write, ``ratios`` the medians' ratios.

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
        ours = _Saver(tempfile.mkdtemp(dir=root), model, optimizer, save_async=True)
        sync = _Saver(tempfile.mkdtemp(dir=root), model, optimizer, save_async=False)
        try:
            first_blocking, _, _ = ours.save_async()  # allocates the staging buffers
            ours.ckpt.wait()
            sync_warm, _ = sync.save()
            writer = _WriterProcess(tempfile.mkdtemp(dir=root), size_mib * MIB)
            _dcp_save(dcp_state, tempfile.mkdtemp(prefix="dcp-", dir=root))  # warm-up
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
                    seconds, total = _dcp_save(dcp_state, where)
                blocking["dcp"].append(seconds)
                durable["dcp"].append(total)

            contenders = [floor, clone, statecraft_async, statecraft_sync, dcp]
            steps: dict[str, list[float]] = {"baseline": [], "thread": [], "process": []}
            for i in range(repeat):
                for run in contenders[i % 5 :] + contenders[: i % 5]:
                    run()
                    gc.collect()
                _, pending = ours.save()
                during = _timed_steps(step, _until_done(pending))
                ours.ckpt.wait()
                steps["thread"] += during
                steps["baseline"] += _timed_steps(step, _until_count(max(len(during), 5)))
                steps["process"] += writer.steps_during_save(step)
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
        steps=steps,
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
    steps: dict[str, list[float]],
    step_info: dict[str, Any],
    first: dict[str, Any],
) -> dict[str, Any]:
    import torch

    b = {name: _row(values) for name, values in blocking.items()}
    d = {name: _row(values) for name, values in durable.items()}
    s = {name: _row(values) if values else None for name, values in steps.items()}
    med = {name: row["median_s"] for name, row in b.items()}
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
        "first_save": first,
        "ratios": {
            "blocking_vs_copy_floor": med["statecraft"] / med["copy_floor"],
            "clone_vs_copy_floor": med["clone"] / med["copy_floor"],
            "dcp_blocking_vs_copy_floor": med["dcp"] / med["copy_floor"],
            "durable_vs_sync": d["statecraft"]["median_s"] / d["sync"]["median_s"],
            "dcp_durable_vs_sync": d["dcp"]["median_s"] / d["sync"]["median_s"],
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
