"""Asynchronous DCP saves (``checkpoint_format=dcp``, ``save_async=true`` and the opt-in
``save_async_dcp=true``).

Call order (every rank, the facade drives it)::

    writes = DcpBackgroundWrites(collective)       # replaces BackgroundWrites for DCP runs
    writes.join(saves)                             # the previous save: joined and agreed
    pending = save_dcp_checkpoint_async(tracked, store, writes=writes, ...)
    ...                                            # training goes on; the shards are written
    writes.join(saves)                             # next save / wait() / finalize() / close()

On the **training thread** each rank captures its payloads (its shard of the model and
optimizer state; rank 0 also ``trainer.pt`` / ``data.pt``) and copies every tensor into
reused CPU buffers (torch's own staging helpers, ``torch.distributed._state_dict_utils``, as
``dcp.async_save``'s ``BlockingAsyncStager`` uses them; rebuilt when the state's shapes change).
Then, on a **background thread** ``statecraft-dcp-write``, the unchanged ``dcp_save`` machine
runs (the same commit order as a synchronous DCP save: every rank's shards durable, then
``.metadata``, the control files, the manifest by exclusive create, then ``latest``; then the
write job on rank 0) with every collective, DCP's own included, over a **dedicated gloo group**
created once by every rank: a collective on the default group from a background thread while
the training thread issues its own on that group could interleave them differently on two
ranks and deadlock; two groups never share a queue.

Why not ``torch.distributed.checkpoint.async_save`` itself: it runs only DCP's write (shards and
``.metadata``) in the background; the manifest and ``latest`` must come after every rank's
shards are durable, which its future alone cannot order without a collective. Running the
whole machine behind one staged snapshot keeps one table, one proof, one commit rule.

Joining is collective (every rank calls :meth:`DcpBackgroundWrites.join` at the same point, on
the training thread): each rank waits for its own thread, then the ranks all-gather their
outcomes on the training collective; when any rank failed, every rank raises (its own error,
or the lowest failing rank's) and ``latest`` still names the previous checkpoint. One save is
in flight per rank: the next save joins the previous one first (its buffers are reused).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from statecraft.checkpoint.async_writes.role_slots import TRAINER_ROLE, BackgroundWrites
from statecraft.checkpoint.async_writes.write_slot import PendingSave
from statecraft.checkpoint.save.dcp_saving import dcp_payloads, save_dcp_checkpoint
from statecraft.errors import CheckpointError
from statecraft.parallel.collectives import Collective, SingleProcess
from statecraft.parallel.rank0 import portable_error, restore_error

__all__ = ["DcpBackgroundWrites", "GroupCollective", "save_dcp_checkpoint_async"]

log = logging.getLogger("statecraft")


class GroupCollective:
    """The :class:`~statecraft.parallel.collectives.Collective` of one ``torch.distributed``
    group (``process_group`` is also what DCP's own collectives use)."""

    def __init__(self, group: Any) -> None:
        import torch.distributed as dist

        self._dist = dist
        self.process_group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self._root = dist.get_global_rank(group, 0)

    def __repr__(self) -> str:
        return f"GroupCollective(rank={self.rank}, world_size={self.world_size})"

    def broadcast(self, value: Any) -> Any:
        box = [value if self.rank == 0 else None]
        self._dist.broadcast_object_list(box, src=self._root, group=self.process_group)
        return box[0]

    def all_gather(self, value: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        self._dist.all_gather_object(out, value, group=self.process_group)
        return out

    def any(self, flag: bool) -> bool:
        return any(self.all_gather(bool(flag)))

    def barrier(self) -> None:
        self._dist.barrier(group=self.process_group)


class CpuStaging:
    """Reused CPU copies of one rank's DCP payloads, one set per entry (``model``,
    ``optim``): the first save (and one whose tensors changed shape, dtype or keys) allocates,
    every later one copies in place."""

    def __init__(self) -> None:
        self._buffers: dict[str, Any] = {}
        self._shapes: dict[str, Any] = {}

    def stage(self, name: str, state: Any) -> Any:
        """A CPU snapshot of ``state`` (tensors copied into this entry's buffers; the
        containers and plain values fresh, so later changes of the live state never reach
        it)."""
        from torch.distributed._state_dict_utils import _copy_state_dict, _create_cpu_state_dict

        shape = _shape(state)
        if self._shapes.get(name) != shape:
            self._buffers[name] = _create_cpu_state_dict(state)
            self._shapes[name] = shape
        staged = _fresh(_copy_state_dict(state, self._buffers[name]))
        live = {_storage(t) for t in _tensors(state)}
        shared = [t for t in _tensors(staged) if _storage(t) in live]
        if shared:  # fail closed: the background write would read a tensor training changes
            raise CheckpointError(
                f"the asynchronous DCP save's snapshot of {name!r} shares memory with the live "
                f"state ({len(shared)} tensors); set save_async_dcp=false and report this"
            )
        return staged


def _local(t: Any) -> Any:
    return getattr(t, "_local_tensor", t)


def _storage(t: Any) -> int:
    return int(_local(t).untyped_storage().data_ptr())


def _tensors(obj: Any) -> list[Any]:
    import torch

    if isinstance(obj, torch.Tensor):
        return [obj] if _local(obj).numel() else []
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _tensors(v)]
    return []


def _shape(obj: Any) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        shapes = (tuple(obj.shape), tuple(_local(obj).shape))
        return ("t", type(obj).__name__, shapes, str(obj.dtype))
    if isinstance(obj, dict):
        return ("d", tuple((str(k), _shape(v)) for k, v in obj.items()))
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, tuple(_shape(v) for v in obj))
    return ("v", type(obj).__name__)


def _fresh(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _fresh(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_fresh(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_fresh(v) for v in obj)
    return obj


class DcpBackgroundWrites(BackgroundWrites):
    """The background writes of a DCP run: one save in flight **per rank** (every rank writes
    its own shards), joined collectively. Consolidated writes never happen in a DCP run, so
    :meth:`for_save` offers no slot (``enabled=False`` to the base class)."""

    def __init__(self, collective: Collective) -> None:
        super().__init__(collective, enabled=False)
        self.staging_cpu = CpuStaging()
        self.pending: PendingSave | None = None
        self._thread: threading.Thread | None = None
        self._background: Collective | None = None

    def __repr__(self) -> str:
        held = "idle" if self.pending is None else self.pending.describe()
        return f"DcpBackgroundWrites({held})"

    def background_collective(self) -> Collective:
        """The dedicated gloo group of the background thread (created on first use: every
        rank calls this at the same point, on the training thread)."""
        if self._background is None:
            if self.collective.world_size == 1:
                self._background = SingleProcess()
            else:
                import torch.distributed as dist

                self._background = GroupCollective(dist.new_group(backend="gloo"))
        return self._background

    def in_flight(self) -> list[PendingSave]:
        return [self.pending] if self.pending is not None else []

    def submit(self, pending: PendingSave, job: Any) -> PendingSave:
        """Run ``job`` on the background thread (nothing may be in flight: join first)."""
        if self.pending is not None:  # pragma: no cover - the facade joins first
            raise AssertionError(f"{self.pending.describe()} was not joined before the next save")
        pending.staged.set()
        thread = threading.Thread(
            target=pending._run, args=(job,), name="statecraft-dcp-write", daemon=False
        )
        self.pending, self._thread = pending, thread
        thread.start()
        return pending

    def join(self, saves: list[Any]) -> None:
        """Wait for this rank's write in flight, then agree with every rank (every rank
        calls it at the same point).

        Raises:
            Exception: when the write failed on any rank, on every rank: its own error (the
                original class, with a note naming the iteration), or the lowest failing
                rank's; ``latest`` still names the previous checkpoint.
        """
        pending, thread = self.pending, self._thread
        self.pending, self._thread = None, None
        error: BaseException | None = None
        if thread is not None:
            thread.join()
        if pending is not None:
            error = pending._undelivered()
            pending._delivered = True
        if self.collective.world_size > 1:
            sent = self.collective.all_gather(None if error is None else portable_error(error))
            if error is None:
                failed = next((r for r, e in enumerate(sent) if e is not None), None)
                if failed is not None:
                    error = restore_error(sent[failed])
                    where = "an earlier save" if pending is None else pending.describe()
                    error.add_note(
                        f"raised by rank {failed}'s background DCP write of {where}; the "
                        "previous checkpoint is intact and latest still names it"
                    )
        if error is not None:
            raise error
        if pending is not None and pending.report is not None and self.collective.rank == 0:
            saves.append(pending.report)

    def close(self) -> None:
        """Wait for the write in flight (an error never joined is logged at ERROR)."""
        pending, thread = self.pending, self._thread
        self.pending, self._thread = None, None
        if thread is not None:
            thread.join()
        error = None if pending is None else pending._undelivered()
        if error is not None and pending is not None:
            pending._delivered = True
            log.error(
                "the background DCP write of %s failed and was never joined: %s: %s; the "
                "previous checkpoint is intact",
                pending.describe(),
                type(error).__name__,
                error,
            )


def save_dcp_checkpoint_async(
    tracked: Any,
    store: Any,
    *,
    writes: DcpBackgroundWrites,
    rng: Any,
    data: Any,
    step: int,
    location: str,
    validation: Any = None,
    **machine: Any,
) -> PendingSave:
    """Stage this rank's payloads on the training thread, then run
    :func:`~statecraft.checkpoint.save.dcp_saving.save_dcp_checkpoint` (``machine`` its other
    keywords: lease, retention, machines, destination) on the background thread over the
    dedicated group. Every rank calls it; the previous save must have been joined. Returns
    this rank's :class:`PendingSave` (its ``durable`` is set once the manifest and ``latest``
    are; the report, on rank 0, reaches ``saves`` at the join)."""
    started = time.perf_counter()
    background = writes.background_collective()
    coordinator = background.rank == 0
    producers = dcp_payloads(
        tracked, coordinator=coordinator, rng=rng, data=data, validation=validation
    )
    staged = {}
    for name, produce in producers.items():  # model, optim first: trainer.pt after them
        value = produce()
        bulk = name in ("model", "optim")
        staged[name] = writes.staging_cpu.stage(name, value) if bulk else value
    pending = PendingSave(iteration=step, location=location, role=TRAINER_ROLE)
    blocking = time.perf_counter() - started

    def job() -> Any:
        return save_dcp_checkpoint(
            tracked,
            store,
            collective=background,
            rng=rng,
            data=data,
            step=step,
            location=location,
            validation=validation,
            staged=staged,
            on_durable=pending.durable.set,
            blocking_seconds=blocking,
            **machine,
        )

    writes.submit(pending, job)
    pending.blocking_seconds = time.perf_counter() - started
    return pending
