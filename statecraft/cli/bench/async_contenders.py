"""The contenders of ``statecraft bench async``: a running ``Checkpointer`` (async or sync),
step timing, a spawned writer process (its own copy of the state, a synchronous
``Checkpointer``) and ``torch.distributed.checkpoint.async_save``."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

from statecraft.errors import StatecraftError

__all__ = ["Saver", "WriterProcess", "dcp_async_save", "timed_steps"]


class Saver:
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


def timed_steps(step: Callable[[], None], until: Callable[[int], bool]) -> list[float]:
    times: list[float] = []
    while not until(len(times)):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return times


def _writer_process(conn: Any, output_root: str, nbytes: int) -> None:
    """The writer process (``spawn``): its own copy of the benchmark state and a synchronous
    ``Checkpointer``; one save per ``"save"`` message, answered with its seconds."""
    from statecraft.cli.bench.sweep import _quiet_statecraft_logger, build_training_state

    with _quiet_statecraft_logger():
        model, optimizer = build_training_state(nbytes)
        saver = Saver(output_root, model, optimizer, save_async=False)
        conn.send("ready")
        while conn.recv() == "save":
            conn.send(saver.save()[0])
        saver.close()


class WriterProcess:
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
        times = timed_steps(step, lambda n: n >= 1 and bool(self.conn.poll()))
        self.conn.recv()
        return times

    def close(self) -> None:
        self.conn.send("stop")
        self.process.join(60)
        if self.process.is_alive():  # pragma: no cover - the child answers "stop"
            self.process.kill()


def dcp_async_save(state: dict[str, Any], where: str) -> tuple[float, float]:
    """(blocking seconds, seconds to durable) of one ``dcp.async_save`` into ``where``."""
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        started = time.perf_counter()
        future: Any = dcp.async_save(state, checkpoint_id=where)
        blocking = time.perf_counter() - started
        getattr(future, "upload_completion", future).result()  # a Future, or a response
    return blocking, time.perf_counter() - started
