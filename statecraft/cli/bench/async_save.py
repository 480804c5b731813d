"""``statecraft bench async``: what an asynchronous save costs the training thread, and what
a write in flight costs the training step, in one process.

For a model + AdamW state of ``--size-mib`` (the ``bench save --sizes`` state: a third
parameters, two thirds moments), each repeat times, in a rotating order:

- **copy_ floor**: ``copy_`` of every state tensor into preallocated buffers (the physical
  floor of any snapshot);
- **clone**: ``clone()`` of every state tensor (fresh allocations each time);
- **statecraft async**: the training-thread time of one async save (join the previous write,
  produce the payloads, copy them into the reused :class:`StagingBuffers`, prove the copy
  isolated, hand the write job to the :class:`WriteSlot`), from the second save on; and its
  time to durable (the save machine committed);
- **dcp.async_save**: ``torch.distributed.checkpoint.async_save`` of the same state dicts (no
  process group: one process), its blocking time and its time to durable;
- **sync save**: the same save written on the calling thread (``save_full_checkpoint``).

The step slowdown: a fixed matmul step (calibrated to about a fortieth of a sync save) is
timed back to back while a background write runs on the role's slot (a thread), then as many
steps with no write; the slowdown is the ratio of the medians (and of the means, which show
stalls). ``step.process`` is reserved for a writer process and is ``None`` here: a forked
writer deadlocks on the commit thread pool it inherits (``statecraft.storage.deferred``), so a
writer process needs ``spawn`` and shared-memory staging buffers.

Until the facade's ``Checkpointer(save_async=True)`` lands, the async save is composed here
from the production pieces (staging, isolation proof, write slot, the ``save`` machine), as
the facade does. Nothing asserts a speed; ``tests/test_bench_async.py`` checks the shape.
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
from statecraft.errors import StatecraftError

__all__ = [
    "ASYNC_BLOCKING_TARGET",
    "ASYNC_DURABLE_TARGET",
    "ASYNC_STEP_TARGET",
    "measure_async",
    "run_bench_async",
]

ASYNC_BLOCKING_TARGET = 1.1  # statecraft async blocking / copy_ floor, from the 2nd save on
ASYNC_STEP_TARGET = 0.10  # training-step slowdown while a background write is in flight
ASYNC_DURABLE_TARGET = 1.1  # async time to durable / synchronous save


def _row(samples: list[float]) -> dict[str, Any]:
    return {
        "median_s": statistics.median(samples),
        "min_s": min(samples),
        "max_s": max(samples),
        "samples_s": samples,
    }


class _AsyncSaver:
    """Async and sync saves of one model + optimizer through the production pieces, into a
    checkpoints directory of their own (older iterations removed after each save)."""

    def __init__(self, root: str, model: Any, optimizer: Any) -> None:
        from statecraft.checkpoint.machines import load_machine
        from statecraft.checkpoint.staging import StagingBuffers
        from statecraft.checkpoint.transactions.resume_records import Tracked
        from statecraft.checkpoint.write_slot import WriteSlot
        from statecraft.storage.local import LocalStore

        self.root = root
        self.store = LocalStore(root)
        self.machine = load_machine("save")
        self.staging = StagingBuffers()
        self.slot = WriteSlot()
        self.tracked = Tracked(model=model, optimizer=optimizer)
        self.live = {"model": model, "optimizer": optimizer}
        self.step = 0
        self.kept: list[str] = []

    def _rng(self) -> Any:
        from statecraft.checkpoint.state import gather_rng_inventory

        return gather_rng_inventory(rank=0, world_size=1)

    def snapshot(self) -> Any:
        """Produce the payloads and copy them into the staging buffers (proven isolated)."""
        from statecraft.checkpoint.plan import CHECKPOINT_PLAN
        from statecraft.checkpoint.saving import capture_trainer
        from statecraft.checkpoint.staging import isolation_problem

        trainer = capture_trainer(self.tracked, rng=self._rng(), data=None)
        producers = CHECKPOINT_PLAN.payloads(self.tracked, trainer)
        snap = self.staging.snapshot({name: make() for name, make in producers.items()})
        problem = isolation_problem(snap, self.live)
        if problem is not None:  # pragma: no cover - the staging copy is always isolated
            raise StatecraftError(f"bench async: the snapshot is not isolated: {problem}")
        return snap

    def write_job(self, snap: Any, step: int, on_durable: Callable[[], None]) -> Callable[[], Any]:
        """The job that runs the save machine over ``snap`` for iteration ``step``."""
        from statecraft import __version__
        from statecraft.checkpoint.plan import CHECKPOINT_PLAN
        from statecraft.checkpoint.transactions.save import SaveContext

        plan = CHECKPOINT_PLAN.save_plan(step, with_data=False)

        def job() -> Any:
            ctx = SaveContext(
                store=self.store,
                plan=plan,
                payloads={name: _producer(v) for name, v in snap.payloads.items()},
                writer_info={"statecraft": __version__},
            )
            self.machine.recover(ctx).raise_for_failure()
            on_durable()
            return step

        return job

    def save_async(self) -> tuple[float, Any, list[float]]:
        """One async save: (training-thread seconds, the PendingSave, a list that receives
        the seconds from the call to the commit once the write is durable)."""
        from statecraft.checkpoint.layout import iter_dirname
        from statecraft.checkpoint.write_slot import PendingSave

        started = time.perf_counter()
        self.slot.join()
        self.step += 1
        snap = self.snapshot()
        pending = PendingSave(iteration=self.step, location=f"{self.root}/{self.step}")
        durable_s: list[float] = []

        def on_durable() -> None:
            durable_s.append(time.perf_counter() - started)
            pending.durable.set()

        self.slot.submit(pending, self.write_job(snap, self.step, on_durable))
        pending.blocking_seconds = time.perf_counter() - started
        self._keep(iter_dirname(self.step))
        return pending.blocking_seconds, pending, durable_s

    def save_sync(self) -> float:
        from statecraft.checkpoint.layout import iter_dirname
        from statecraft.checkpoint.saving import save_full_checkpoint

        self.slot.join()
        self.step += 1
        started = time.perf_counter()
        save_full_checkpoint(
            self.tracked,
            self.store,
            rng=self._rng(),
            data=None,
            step=self.step,
            lease=None,
            machine=self.machine,
            location=self.root,
        )
        seconds = time.perf_counter() - started
        self._keep(iter_dirname(self.step))
        return seconds

    def _keep(self, name: str) -> None:
        """Remember ``name``; remove iterations older than the previous one (never one a
        write in flight reads or writes)."""
        import shutil

        self.kept.append(name)
        while len(self.kept) > 2:
            shutil.rmtree(os.path.join(self.root, self.kept.pop(0)), ignore_errors=True)

    def close(self) -> None:
        self.slot.join()
        self.slot.close()


def _producer(value: Any) -> Callable[[], Any]:
    """A zero-argument producer of an already staged payload (what the save machine calls)."""
    return lambda: value


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
        saver = _AsyncSaver(tempfile.mkdtemp(prefix="statecraft-", dir=root), model, optimizer)
        try:
            first_blocking, first, _ = saver.save_async()  # allocates the staging buffers
            first.wait()
            first_alloc = saver.staging.allocated_bytes
            sync_warm = saver.save_sync()
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

            def ours() -> None:
                seconds, pending, durable_s = saver.save_async()
                pending.wait()
                blocking["statecraft"].append(seconds)
                durable["statecraft"].append(durable_s[0])

            def sync() -> None:
                durable["sync"].append(saver.save_sync())

            def dcp() -> None:
                with scratch(root, "dcp") as where:
                    seconds, total = _dcp_save(dcp_state, where)
                blocking["dcp"].append(seconds)
                durable["dcp"].append(total)

            contenders = [floor, clone, ours, sync, dcp]
            steps: dict[str, list[float]] = {"baseline": [], "thread": [], "process": []}
            for i in range(repeat):
                for run in contenders[i % 5 :] + contenders[: i % 5]:
                    run()
                    gc.collect()
                _, pending, _ = saver.save_async()
                during = _timed_steps(step, _until_done(pending))
                pending.wait()
                steps["thread"] += during
                steps["baseline"] += _timed_steps(step, _until_count(max(len(during), 5)))
        finally:
            saver.close()
    return _result(
        size_mib=size_mib,
        repeat=repeat,
        state_bytes=sum(t.numel() * t.element_size() for t in tensors),
        blocking=blocking,
        durable=durable,
        steps=steps,
        step_info=step_info,
        first={"blocking_s": first_blocking, "allocated_bytes": first_alloc},
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
