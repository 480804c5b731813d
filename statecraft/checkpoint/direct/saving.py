"""The direct object-store primary save (``checkpoint_store.backend=object_store``): one
iteration written straight into ``s3://<bucket>/<prefix>`` by the ``direct_save`` machine
(``machines/direct_save.toml``), on every rank.

Every rank extracts its model and optimizer state (:mod:`statecraft.checkpoint.state.dcp_state`:
``get_model_state_dict`` / ``get_optimizer_state_dict``, the probe of a never-stepped optimizer
rolled back) and writes its own shards through DCP
(``dcp.save`` over :class:`DirectStorageWriter`, our ``StoreStorageWriter``: one PUT per shard,
per-item xxh3 digests); DCP's coordinator writes each component's ``.metadata`` after every
rank's shards; every rank's file records are gathered for the manifest. Rank 0 then writes the
control generation (``trainer.pt``, ``data.pt``), the manifest by If-None-Match, and latest
through the lease's fenced pointer write. The call returns only once all of that is durable
(a completed PUT is durable: there is no asynchronous direct save).

::

    report = save_direct_checkpoint(tracked, root, collective=c, rng=rng, data=None, step=100,
                                    lease=lease)
    report.location      # s3://ckpt-bucket/<prefix>/iter_000000100

Failure modes (raised on every rank; nothing committed is changed): ``WriterLeaseError`` (the
lease was taken over, or latest changed under this writer), ``PlanDriftError`` (the iteration
is committed with another plan), ``IterationCommittedError``, ``CheckpointCorruptError`` (a
committed manifest names a missing object), ``DirectSaveError`` (latest names a newer
iteration), ``ObjectRequestError`` / ``StoreError`` (a request failed: retry the save; an
iteration holding objects but no manifest is never adopted and is written over by the retry),
``UnsafeStateError`` (a value would not load back; nothing written).
"""

from __future__ import annotations

import io
import logging
import os
import socket
import time
from collections.abc import Mapping
from typing import Any, Protocol

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import SavePlan

from statecraft._version import __version__
from statecraft.checkpoint.direct.bindings import (
    DirectPlan,
    DirectSaveContext,
)
from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.checkpoint.kernel.loading import dcp_optimizer_payload
from statecraft.checkpoint.kernel.machines import shipped_machine
from statecraft.checkpoint.kernel.validation_records import ValidationState
from statecraft.checkpoint.save.saving import SaveReport
from statecraft.checkpoint.state import DataState
from statecraft.checkpoint.state.capture import capture_trainer
from statecraft.parallel.collectives import Collective
from statecraft.parallel.coordinated import rank_zero_effects
from statecraft.parallel.rank0 import on_rank_zero
from statecraft.storage.base import FileRecord, Store
from statecraft.storage.digest import Digest
from statecraft.writers.dcp_failures import unwrap_checkpoint_exception
from statecraft.writers.dcp_store_writer import StoreStorageWriter

__all__ = [
    "DirectStorageWriter",
    "RootLike",
    "component_states",
    "direct_save_context",
    "save_direct_checkpoint",
]

log = logging.getLogger("statecraft")


class RootLike(Protocol):
    """What the save needs of a direct root (``DirectRoot``): the store rooted at the
    checkpoints prefix and its ``s3://`` URI."""

    @property
    def store(self) -> Store: ...

    @property
    def uri(self) -> str: ...


class DirectStorageWriter(StoreStorageWriter):
    """``StoreStorageWriter`` for the direct primary: an iteration is committed by its
    manifest, not by ``.metadata``, so a ``.metadata`` left by a crashed save of an
    uncommitted iteration (no manifest; the machine observed that before any write) is
    written over instead of refused. The machine never reaches this writer for an iteration
    that holds a manifest."""

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        return plan


def _torch_bytes(payload: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    return buffer.getvalue()


def component_states(tracked: Any) -> dict[str, dict[str, Any]]:
    """The DCP state of each component (:mod:`statecraft.checkpoint.state.dcp_state`, the same
    rules as the local DCP save): ``model`` (this rank's shards under FSDP2, the replicated
    tensors otherwise) and, when an optimizer is tracked, ``optim`` (its state with DCP's probe
    rolled back; a never-stepped optimizer saves only its param-group options,
    :func:`~statecraft.checkpoint.kernel.loading.dcp_optimizer_payload`)."""
    from statecraft.checkpoint.state import dcp_state

    states: dict[str, dict[str, Any]] = {"model": dcp_state.model_state_for_save(tracked.model)}
    if tracked.optimizer is not None:
        states["optim"] = dcp_optimizer_payload(
            dcp_state.optimizer_state_for_save(tracked.model, tracked.optimizer)
        )
    return states


def _shapes(value: Any, path: str, out: list[str]) -> None:
    if isinstance(value, torch.Tensor):
        out.append(f"{path}:{tuple(value.shape)}:{value.dtype}")
    elif isinstance(value, Mapping):
        for key in sorted(value, key=str):
            _shapes(value[key], f"{path}/{key}", out)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _shapes(item, f"{path}/{i}", out)
    else:
        out.append(f"{path}:{type(value).__name__}")


def state_layout(state: Mapping[str, Any]) -> str:
    """A digest of ``state``'s keys, tensor shapes and dtypes (the plan's ``layout``): two
    saves of one iteration from different models differ here."""
    lines: list[str] = []
    _shapes(state, "", lines)
    return str(Digest.of("\n".join(lines).encode()))


def _shard_writer(states: Mapping[str, dict[str, Any]], collective: Collective) -> Any:
    def write(ctx: DirectSaveContext) -> Mapping[str, FileRecord]:
        mine: dict[str, FileRecord] = {}
        for component in ctx.plan.components:
            writer = DirectStorageWriter(ctx.store, f"{ctx.iter_dir}/{component}")
            try:
                dcp.save(dict(states[component]), storage_writer=writer)
            except BaseException as exc:  # DCP wraps every rank's error in its own
                raise unwrap_checkpoint_exception(exc) from None
            mine.update(writer.records)
        if collective.world_size == 1:
            return mine
        merged: dict[str, FileRecord] = {}
        for records in collective.all_gather(mine):
            merged.update(records)
        return merged

    return write


def direct_save_context(
    tracked: Any,
    store: Store,
    *,
    collective: Collective,
    rng: Any,
    data: DataState | None,
    step: int,
    lease: Any,
    validation: ValidationState | None = None,
    write_pointer: Any = None,
) -> DirectSaveContext:
    """The ``direct_save`` machine's context for saving iteration ``step`` of ``tracked`` into
    the root ``store`` (every rank builds its own; the one place it is built: the facade's
    save and the crash harness's). Arguments as :func:`save_direct_checkpoint`.

    Raises:
        UnsafeStateError: a value would not load back (nothing written).
    """
    states = component_states(tracked)  # first: trainer.pt then records the pristine marker
    trainer = capture_trainer(tracked, rng=rng, data=data, validation=validation)
    control = {"trainer.pt": _torch_bytes(trainer.to_payload())}
    if data is not None:
        control["data.pt"] = _torch_bytes(data.to_payload())
    plan = DirectPlan(
        iteration=step,
        world_size=collective.world_size,
        components=tuple(states),
        control=tuple(control),
        layout=tuple(state_layout(states[c]) for c in states),
    )
    ctx = DirectSaveContext(
        store=store,
        plan=plan,
        control=control if collective.rank == 0 else {},
        write_shards=_shard_writer(states, collective),
        lease=lease,
        lease_generation=getattr(lease, "generation", None),
        writer=_writer_info(lease),
    )
    if write_pointer is not None:
        ctx.write_pointer = write_pointer
    elif lease is not None:
        ctx.write_pointer = _fenced_pointer
    return ctx


def save_direct_checkpoint(
    tracked: Any,
    root: RootLike,
    *,
    collective: Collective,
    rng: Any,
    data: DataState | None,
    step: int,
    lease: Any,
    validation: ValidationState | None = None,
    write_pointer: Any = None,
) -> SaveReport:
    """Save iteration ``step`` of ``tracked`` into the direct root (every rank calls it).

    Args:
        tracked: the tracked objects (``Tracked``: model, optimizer, clocks...).
        root: the direct root (``DirectRoot``: ``store``, ``uri``).
        collective: the ranks; coordinator effects run on rank 0.
        rng / data: every rank's RNG streams / data state (gathered by the caller).
        lease: the writer lease (``ObjectStoreLease``; ``None``: tools and tests only).
        write_pointer: how latest is written under the lease (default: the lease's fenced
            If-Match write when a lease is given, a plain PUT otherwise).

    Returns:
        the report (``retried_commit``: the iteration was found committed and latest only
        completed or confirmed).

    Raises:
        see the module docstring.
    """
    started = time.perf_counter()
    ctx = direct_save_context(
        tracked,
        root.store,
        collective=collective,
        rng=rng,
        data=data,
        step=step,
        lease=lease,
        validation=validation,
        write_pointer=write_pointer,
    )
    machine = shipped_machine("direct_save")
    label = on_rank_zero(collective, lambda: machine.observe(ctx))
    result = machine.run(
        ctx,
        start=machine.table.recover[label],
        observed=label,
        call=rank_zero_effects(collective, machine.bindings.roles),
    )
    result.raise_for_failure()
    seconds = time.perf_counter() - started
    written = sum(r.size for r in ctx.records.values()) + sum(
        r.size for r in ctx.control_records.values()
    )
    location = f"{root.uri.rstrip('/')}/{iter_dirname(step)}"
    report = SaveReport(
        iteration=step,
        location=location,
        bytes_written=written,
        seconds=seconds,
        retried_commit=label in ("committed", "manifest_committed"),
        effects=tuple((e.effect, e.duration_s) for e in result.trace),
        blocking_seconds=seconds,
    )
    log.info(
        "saved iter %d directly: %.3f MiB in %.3f s (%d rank%s)%s -> %s",
        step, written / 2**20, seconds, collective.world_size,
        "" if collective.world_size == 1 else "s",
        " (found committed: latest completed)" if report.retried_commit else "", location,
    )  # fmt: skip
    if getattr(root, "keep_last", 0) > 0:
        on_rank_zero(collective, lambda: _retain(root, lease))
    return report


def _retain(root: Any, lease: Any) -> None:
    """``checkpoint_store.keep_last`` after a committed save (rank 0). Best effort: the save
    is durable, so a failed request is one WARNING (the next save's pass finishes a removal
    this one left); a lease taken over is raised (this writer must stop)."""
    from statecraft.checkpoint.direct.retention import retain_direct
    from statecraft.errors import WriterLeaseError

    try:
        retain_direct(root, lease=lease)
    except WriterLeaseError:
        raise
    except Exception as exc:
        log.warning(
            "retention of %s (checkpoint_store.keep_last=%d) failed; the save is committed and "
            "an iteration being removed is whole or uncommitted (the next save finishes it): %s",
            root.uri, root.keep_last, exc,
        )  # fmt: skip


def _writer_info(lease: Any) -> dict[str, Any]:
    info: dict[str, Any] = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "statecraft": __version__,
    }
    if lease is not None:
        info["owner"] = getattr(lease, "owner", "")
    return info


def _fenced_pointer(store: Store, lease: Any, path: str, data: bytes) -> None:
    """Latest through the lease's fenced write (``write_pointer_fenced``)."""
    from statecraft.checkpoint.fencing.object_lease import write_pointer_fenced

    write_pointer_fenced(store, lease, path, data)  # type: ignore[arg-type]
