"""The DCP writer: ``model/`` and ``optim/`` as ``torch.distributed.checkpoint`` directories.

A DCP checkpoint (``checkpoint_format=dcp``) holds its bulk components as DCP directories of
per-rank shards plus ``.metadata`` (the layout: :mod:`statecraft.writers.dcp_storage`; our
durability and item digests: :mod:`~statecraft.writers.dcp_store_writer` and
:mod:`~statecraft.writers.dcp_store_reader`) and its control state (``trainer.pt``,
``data.pt``) as ``torch.save`` files, like the consolidated format. Sharding and resharding are
DCP's own (``DefaultSavePlanner`` / ``DefaultLoadPlanner``); statecraft writes no sharding
format of its own.

Call order of one save (the ``dcp_save`` machine, ``machines/dcp_save.toml``):

- :func:`save_dcp_state` — **every rank**, once per DCP component, the same component in the
  same order on every rank (it is collective): each rank writes its own shards, the coordinator
  ``.metadata``; returns every rank's :class:`~statecraft.storage.base.FileRecord` on every
  rank (gathered), keyed by store path.
- :meth:`DcpWriter.write` — **coordinator**, the control files (``torch.save``).

Loading: :func:`load_dcp_state` — **every rank**, into a target state dict shaped by the live
objects (DCP reads only the items this rank's target needs, by range, each verified).
:meth:`DcpWriter.read` of a DCP directory returns its parsed DCP ``Metadata`` (what
verification proves loadable without a target); of a control file, its payload.
"""

from __future__ import annotations

import warnings
from typing import Any, Protocol, TypeVar

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from statecraft.errors import CheckpointError
from statecraft.storage.base import FileRecord, Store
from statecraft.writers.consolidated import ConsolidatedWriter
from statecraft.writers.dcp_failures import unwrap_checkpoint_exception
from statecraft.writers.dcp_store_reader import StoreStorageReader
from statecraft.writers.dcp_store_writer import StoreStorageWriter

__all__ = ["DcpWriter", "Gathering", "is_dcp_directory", "load_dcp_state", "save_dcp_state"]

_T = TypeVar("_T")

#: A state dict as DCP takes it: tensors, ``Stateful`` objects, numbers and nested containers
#: under string keys (DCP's own ``STATE_DICT_TYPE`` is this with ``Any`` too: its values are
#: whatever the model and the optimizer hold).
StateDict = dict[str, Any]


class Gathering(Protocol):
    """What :func:`save_dcp_state` needs of a collective
    (:class:`~statecraft.parallel.collectives.Collective` has it; the writers sit beside the
    parallel layer and do not import it)."""

    def all_gather(self, value: _T) -> list[_T]:
        """Every rank's ``value`` (each rank passes one of the same type), indexed by rank."""


def _no_dist() -> bool:
    """True when no default process group exists (DCP then runs as a world of one)."""
    return not (dist.is_available() and dist.is_initialized())


def save_dcp_state(
    store: Store,
    path: str,
    state_dict: StateDict,
    *,
    collective: Gathering,
    files_per_rank: int = 1,
) -> dict[str, FileRecord]:
    """Write ``state_dict`` as the DCP directory ``path`` of ``store`` (every rank calls it
    with its own shard of the state; it is collective).

    Each rank's shards are durable before the coordinator writes ``.metadata``; ``.metadata`` is
    durable when this returns. DCP's own collectives run over ``collective.process_group``
    when it has one (the dedicated group of an asynchronous save's background thread), else
    over the default group.

    Returns:
        every rank's file records (``iter_N/model/__<rank>_<k>.distcp`` and
        ``iter_N/model/.metadata``), the same mapping on every rank.

    Raises:
        CheckpointError: ``path`` already holds a ``.metadata`` (never overwritten).
        StoreError / DiskFullError: a rank's shard or the metadata was not made durable (on
            every rank: DCP shares the failure).
    """
    writer = StoreStorageWriter(store, path, files_per_rank=files_per_rank)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
            dcp_save(
                state_dict,
                storage_writer=writer,
                no_dist=_no_dist(),
                process_group=getattr(collective, "process_group", None),
            )
    except BaseException as exc:  # DCP wraps every failure in CheckpointException
        inner = unwrap_checkpoint_exception(exc)
        if inner is exc:
            raise
        raise inner from None
    merged: dict[str, FileRecord] = {}
    for records in collective.all_gather(writer.records):
        merged.update(records)
    return merged


def load_dcp_state(store: Store, path: str, target_state_dict: StateDict) -> None:
    """Fill ``target_state_dict`` in place from the DCP directory ``path`` of ``store``
    (every rank; resharding by DCP's load planner when the world size changed).

    The target should be a scratch state dict (shaped like the live objects, not the live
    tensors themselves) when the load must be all-or-nothing: a failure may leave it half
    filled.

    Raises:
        CheckpointCorruptError: ``.metadata`` missing or unreadable, a shard missing, short or
            with other bytes than its item digests (naming the file).
        CheckpointError: the checkpoint lacks a key the target needs, or shapes differ.
    """
    reader = StoreStorageReader(store, path)
    reader.read_metadata()  # DCP would turn a failed metadata read into an AssertionError
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
            dcp_load(target_state_dict, storage_reader=reader, no_dist=_no_dist())
    except BaseException as exc:
        inner = unwrap_checkpoint_exception(exc)
        if not isinstance(inner, Exception):  # a crash or an interrupt: as it is
            if inner is exc:
                raise
            raise inner from None
        if isinstance(inner, CheckpointError):
            raise inner from None
        raise CheckpointError(
            f"{store.describe()}/{path}: the DCP load failed ({type(inner).__name__}: {inner}); "
            "the checkpoint does not hold the state the live objects need (another model or "
            "optimizer?). Track the same objects as the saving run or resume another checkpoint"
        ) from None


def is_dcp_directory(store: Store, path: str) -> bool:
    """True when ``path`` is a directory (a DCP component), not a ``torch.save`` file."""
    stat = store.stat(path)
    return stat is not None and stat.is_dir


class DcpWriter(ConsolidatedWriter):
    """The writer of ``checkpoint_format=dcp`` checkpoints (see the module doc).

    :meth:`write` serializes the control files (``trainer.pt``, ``data.pt``) as
    :class:`~statecraft.writers.consolidated.ConsolidatedWriter` does; the DCP components are
    written by :func:`save_dcp_state` on every rank (they are collective, which ``write`` is
    not). :meth:`read` parses a DCP directory's ``.metadata`` or loads a control file.
    """

    format_name = "dcp"

    def __repr__(self) -> str:
        return "DcpWriter()"

    def writer_info(self) -> dict[str, str]:
        return {"torch": str(torch.__version__), "dcp": "torch.distributed.checkpoint"}

    # ``-> Any``: DCP ``Metadata`` or whatever a control file holds (see Writer.read).
    def read(self, store: Store, path: str, *, mmap: bool = True) -> Any:
        """A DCP directory: its parsed ``Metadata`` (every item's place and digest; the
        tensors are loaded by :func:`load_dcp_state` into a target). A file: its payload.

        Raises:
            CheckpointCorruptError: ``.metadata`` missing or unreadable; a file not loadable.
        """
        if path.endswith(".pt"):
            return super().read(store, path, mmap=mmap)
        return StoreStorageReader(store, path).read_metadata()
