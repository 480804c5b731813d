"""The asynchronous branch of a full save: produce the payloads on the training thread, copy
them into the role's reused staging buffers, prove the copy isolated, and hand the write job
to the role's background slot.

::

    outcome = stage_async(producers, step=7, staging=buffers, slot=slot, live=live,
                          location="/runs/.../checkpoints/iter_000000007",
                          job=lambda payloads, pending: run_write(...))
    if isinstance(outcome, PendingSave):   # staged: the live state may change now
        ...
    else:                                  # refused: outcome.produced, written synchronously
        ...

The order on the training thread is fixed: the caller has joined the role's previous write
(the buffers are reused, so the next copy may only happen once the previous write finished),
then every payload is *produced* (``state_dict()``, the trainer payload, the data payload),
copied with ``copy_`` into :class:`~statecraft.checkpoint.async_writes.staging.StagingBuffers`, and
the
copy is proven CPU-only and sharing no storage with anything live
(:func:`~statecraft.checkpoint.async_writes.staging.isolation_problem`). Only then is the write job
submitted to the :class:`~statecraft.checkpoint.async_writes.write_slot.WriteSlot`; it runs the
write job
(save machine, then retention) on the slot's thread and sets ``pending.durable`` through the
write job's ``on_durable`` hook once the save machine reached ``committed``.

When the copy cannot be made or is not isolated, nothing is submitted: the caller writes the
already-produced payloads synchronously, and one INFO line says why
(``writing iter_N synchronously: <reason>``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from statecraft.checkpoint.async_writes.staging import (
    SnapshotUnsupported,
    StagingBuffers,
    isolation_problem,
)
from statecraft.checkpoint.async_writes.write_slot import PendingSave, WriteSlot
from statecraft.errors import CheckpointError

__all__ = ["AsyncRefused", "live_state", "stage_async"]

log = logging.getLogger("statecraft")

#: the write job the slot runs: ``job(payloads, pending) -> SaveReport``
WriteJob = Callable[[Mapping[str, Any], PendingSave], Any]


@attrs.frozen
class AsyncRefused:
    """The asynchronous branch was not taken: write ``produced`` synchronously.

    Attributes:
        produced: file name -> the produced payload (references to live state).
        reason: one line naming what could not be copied or shared storage.
    """

    produced: dict[str, Any]
    reason: str


def live_state(tracked: Any, produced: Mapping[str, Any]) -> dict[str, Any]:
    """Everything live a snapshot must not share storage with: the produced payloads (a
    ``state_dict()`` shares the live tensors), the model's parameters and buffers, the
    scheduler, the stateful objects and the loop state."""
    live: dict[str, Any] = {
        "model": produced.get("model.pt"),
        "model parameters": _module_tensors(tracked.model),
        "EMA parameters": _module_tensors(getattr(tracked, "ema", None)),
        "optimizer": produced.get("optim.pt"),
        "trainer": produced.get("trainer.pt"),
        "data": produced.get("data.pt"),
        "loop state": tracked.loop_state,
    }
    if tracked.scheduler is not None:
        live["scheduler"] = tracked.scheduler.state_dict()
    for name, obj in (tracked.stateful or {}).items():
        live[f"stateful {name}"] = obj.state_dict()
    return live


def _module_tensors(model: Any) -> list[Any]:
    tensors: list[Any] = []
    for method in ("parameters", "buffers"):
        collect = getattr(model, method, None)
        if callable(collect):
            tensors.extend(t.data for t in collect())
    return tensors


def stage_async(
    producers: Mapping[str, Callable[[], Any]],
    *,
    tracked: Any,
    step: int,
    location: str,
    staging: StagingBuffers,
    slot: WriteSlot,
    job: WriteJob,
    started: float,
) -> PendingSave | AsyncRefused:
    """Produce, copy and prove the payloads of ``iter_<step>``, then submit the write job.

    Args:
        producers: file name -> zero-argument producer (the plan model's payloads).
        tracked: the tracked objects (what the copy must not share storage with).
        step: the iteration.
        location: ``<checkpoints>/iter_<9 digits>`` (for the pending save).
        staging: the role's reused buffers.
        slot: the role's background slot; the caller joined it (nothing in flight).
        job: ``job(payloads, pending)`` runs the write job with the staged payloads and
            sets ``pending.durable`` when the save committed; its value is ``wait()``'s.
        started: ``time.perf_counter()`` when the save call began (for
            ``blocking_seconds``).

    Returns:
        the submitted :class:`PendingSave` (``staged`` set), or :class:`AsyncRefused` with
        the produced payloads when the snapshot could not be made or is not isolated
        (nothing was submitted; one INFO line logged).

    Raises:
        UnsafeStateError: a produced value would not load back with ``weights_only=True``
            (nothing written).
        CheckpointError: the slot still holds a write (in flight, or finished and not
            joined): raised before anything is produced or copied, since that write may
            still read the staging buffers.
    """
    if slot.in_flight is not None:  # the buffers are about to be overwritten: refuse first
        raise CheckpointError(
            f"cannot stage iter_{step}: the write of {slot.in_flight.describe()} still holds "
            f"the staging buffers of role {slot.role!r}; join the slot first (WriteSlot.join())"
        )
    produced = {name: produce() for name, produce in producers.items()}
    try:
        snapshot = staging.snapshot(produced)
    except SnapshotUnsupported as exc:
        reason: str | None = exc.reason
    else:
        reason = isolation_problem(snapshot, live_state(tracked, produced))
    if reason is not None:
        log.info("writing iter_%d synchronously: %s", step, reason)
        return AsyncRefused(produced, reason)
    payloads = dict(snapshot.payloads)
    pending = PendingSave(iteration=step, location=location, role=slot.role)

    def write() -> Any:
        return job(payloads, pending)

    pending.blocking_seconds = time.perf_counter() - started
    slot.submit(pending, write)
    pending.staged.set()
    return pending
