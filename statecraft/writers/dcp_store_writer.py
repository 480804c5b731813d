"""DCP's ``StorageWriter`` over a :class:`~statecraft.storage.base.Store`: how one rank's items
become durable shard files, and the coordinator's ``.metadata`` a durable replace.

The layout is :mod:`statecraft.writers.dcp_storage`'s. Write protocol (who calls what, driven by
``dcp.save``):

    1. every rank: :meth:`StoreStorageWriter.prepare_local_plan` creates ``<path>/`` (refuses
       a directory that already holds a ``.metadata``: a committed DCP checkpoint is never
       overwritten);
    2. coordinator: :meth:`~StoreStorageWriter.prepare_global_plan` names each rank's files;
    3. every rank: :meth:`~StoreStorageWriter.write_data` writes its own shard files, each
       through ``store.open_atomic(..., defer_sync=True)`` (temporary + fsync + rename +
       directory fsync locally, one PUT remotely) and settles them before it returns: when its
       future resolves every shard of this rank is durable. Each item's
       :class:`~statecraft.writers.dcp_storage.StoreItemInfo` (the ``WriteResult.storage_data``)
       records its file, offset, length and the xxh3_128 digest of its bytes, computed as they
       were written.
    4. coordinator: :meth:`~StoreStorageWriter.finish` writes ``.metadata`` with
       ``store.write_atomic`` (a replace that never deletes the old one first).

    After ``dcp.save`` returns, :attr:`StoreStorageWriter.records` holds the
    :class:`~statecraft.storage.base.FileRecord` (size, whole-file digest) of every file THIS
    rank wrote, keyed by store path (``iter_000000100/model/__1_0.distcp``), and on the
    coordinator the ``.metadata`` record too; the caller gathers them for the manifest.

``dcp.save`` wraps an exception raised here in a ``CheckpointException`` (a ``BaseException``);
:func:`statecraft.writers.dcp_failures.unwrap_checkpoint_exception` gets ours back.
"""

from __future__ import annotations

import dataclasses
import io
import os
import pickle
import uuid
from typing import IO, Any, cast

import torch
import xxhash
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner, WriteItem, WriteItemType
from torch.distributed.checkpoint.storage import StorageWriter, WriteResult
from torch.futures import Future

from statecraft.errors import CheckpointError
from statecraft.storage.base import AtomicWriter, FileRecord, Store, check_relative_path
from statecraft.storage.digest import SAVE_ALGORITHM
from statecraft.writers.consolidated import _without_zip_crc
from statecraft.writers.dcp_storage import METADATA_NAME, StoreItemInfo, shard_name

__all__ = ["StoreStorageWriter"]


@dataclasses.dataclass(frozen=True)
class _ShardPrefix:
    """A rank's file-name prefix (``__<rank>_``), the ``SavePlan.storage_data`` the
    coordinator assigns in :meth:`StoreStorageWriter.prepare_global_plan`."""

    rank: int


class _ItemStream:
    """Write-through view of an atomic writer that knows its position and hashes each item
    (``torch.save`` uses ``write`` and ``flush`` only)."""

    def __init__(self, writer: AtomicWriter) -> None:
        self._writer = writer
        self.position = 0
        self._hasher = xxhash.xxh3_128()

    def begin(self) -> int:
        self._hasher = xxhash.xxh3_128()
        return self.position

    def digest(self) -> str:
        return f"{SAVE_ALGORITHM}:{self._hasher.hexdigest()}"

    def write(self, data: bytes | bytearray | memoryview) -> int:
        self._hasher.update(data)
        written = int(self._writer.write(data))
        self.position += written
        return written

    def flush(self) -> None:
        self._writer.flush()


def _split(items: list[WriteItem], bins: int) -> list[list[WriteItem]]:
    """Spread ``items`` over ``bins`` files: byte items round robin, tensors largest first
    into the lightest file (torch's ``_split_by_size_and_type``); empty files are dropped."""
    if bins <= 1:
        return [items]
    buckets: list[list[WriteItem]] = [[] for _ in range(bins)]
    sizes = [0] * bins
    byte_items = [i for i in items if i.type == WriteItemType.BYTE_IO]
    tensor_items = [i for i in items if i.type != WriteItemType.BYTE_IO]
    for n, item in enumerate(byte_items):
        buckets[n % bins].append(item)

    def size(item: WriteItem) -> int:
        data = item.tensor_data
        if data is None:
            return 0
        return int(torch.Size(data.size).numel()) * data.properties.dtype.itemsize

    for item in sorted(tensor_items, key=size, reverse=True):
        lightest = min(range(bins), key=sizes.__getitem__)
        buckets[lightest].append(item)
        sizes[lightest] += size(item)
    return [b for b in buckets if b]


class StoreStorageWriter(StorageWriter):
    """DCP ``StorageWriter`` writing the DCP directory ``path`` of ``store`` (see the module
    doc for the protocol, :mod:`statecraft.writers.dcp_storage` for the layout).

    Args:
        store: where the bytes go (its durability is the shards' durability).
        path: the DCP directory, a store path (``iter_000000100/model``).
        files_per_rank: shard files each rank writes (its items spread over them by size).

    Attributes:
        records: after ``dcp.save``: the files this rank wrote (store path -> record).
        item_count: items this rank wrote.

    Raises (through ``dcp.save``, wrapped in its ``CheckpointException``):
        CheckpointError: ``path`` already holds a ``.metadata`` (never overwritten).
        StoreError / DiskFullError: a shard or the metadata could not be made durable
            (nothing is published under its name).
    """

    def __init__(self, store: Store, path: str, *, files_per_rank: int = 1) -> None:
        super().__init__()
        if files_per_rank < 1:
            raise ValueError(f"files_per_rank must be >= 1, got {files_per_rank}")
        self.store = store
        self.path = check_relative_path(path)
        self.files_per_rank = files_per_rank
        self.records: dict[str, FileRecord] = {}
        self.item_count = 0
        self.rank = 0
        self.is_coordinator = True
        self.save_id = uuid.uuid4().hex

    def __repr__(self) -> str:
        return f"StoreStorageWriter({self.store.describe()}/{self.path})"

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        """A new save begins (``checkpoint_id`` is not used: the path was given at init)."""
        self.records = {}
        self.item_count = 0
        self.save_id = uuid.uuid4().hex

    # ``*args: Any, **kwargs: Any``: torch's abstract signature, which DCP calls with ``rank=``
    # and other keywords of its own version; only ``rank`` is read.
    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.is_coordinator = is_coordinator
        rank = kwargs.get("rank")
        self.rank = int(rank) if rank is not None else 0

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        """Create the directory (every rank; a concurrent creator is fine) and refuse one
        that holds a committed ``.metadata``."""
        try:  # durable with this rank's shards (write_data settles before it returns)
            self.store.make_dirs(self.path, defer_sync=True)
        except FileExistsError:  # another rank created a component meanwhile
            self.store.make_dirs(self.path, defer_sync=True)
        if self.store.stat(f"{self.path}/{METADATA_NAME}") is not None:
            raise CheckpointError(
                f"{self.store.describe()}/{self.path}/{METADATA_NAME} exists: this DCP "
                "directory holds a finished checkpoint and is never overwritten; save to a new "
                "directory (a new iteration) or move this one aside"
            )
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        """Name each rank's files ``__<rank>_<k>.distcp`` (coordinator)."""
        return [dataclasses.replace(p, storage_data=_ShardPrefix(i)) for i, p in enumerate(plans)]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        """Write this rank's items into its shard files and make them durable before the
        future resolves (a deferred commit per file, settled once at the end)."""
        prefix = plan.storage_data
        rank = prefix.rank if isinstance(prefix, _ShardPrefix) else self.rank
        results: list[WriteResult] = []
        with _without_zip_crc():
            for k, bucket in enumerate(_split(list(plan.items), self.files_per_rank)):
                results.extend(self._write_file(shard_name(rank, k), bucket, planner))
        settle = getattr(self.store, "settle", None)
        if callable(settle):
            settle()
        self.item_count += len(results)
        future: Future[list[WriteResult]] = Future()
        future.set_result(results)
        return future

    def _write_file(
        self, name: str, items: list[WriteItem], planner: SavePlanner
    ) -> list[WriteResult]:
        store_path = f"{self.path}/{name}"
        results = []
        ordered = [i for i in items if i.type == WriteItemType.BYTE_IO] + [
            i for i in items if i.type != WriteItemType.BYTE_IO
        ]
        with self.store.open_atomic(store_path, defer_sync=True) as writer:
            stream = _ItemStream(writer)
            for item in ordered:
                offset = stream.begin()
                data = planner.resolve_data(item)
                if item.type == WriteItemType.BYTE_IO:
                    if not isinstance(data, io.BytesIO):
                        raise CheckpointError(
                            f"{self!r}: item {item.index.fqn!r} is a byte item but the "
                            f"planner resolved it to {type(data).__name__}"
                        )
                    stream.write(data.getbuffer())
                else:
                    tensor = cast(torch.Tensor, data).detach().cpu()
                    if tensor.untyped_storage().nbytes() != tensor.nbytes:
                        tensor = tensor.clone()  # save only the view, not its whole storage
                    torch.save(tensor, cast(IO[bytes], stream))
                length = stream.position - offset
                info = StoreItemInfo(name, offset, length, None, stream.digest())
                results.append(
                    WriteResult(index=item.index, size_in_bytes=length, storage_data=info)
                )
        self.records[store_path] = writer.record  # type: ignore[assignment]
        return results

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        """Write ``.metadata`` (coordinator) with one atomic durable replace."""
        metadata.storage_data = {r.index: r.storage_data for rank in results for r in rank}
        metadata.storage_meta = self.storage_meta()
        store_path = f"{self.path}/{METADATA_NAME}"
        self.records[store_path] = self.store.write_atomic(store_path, pickle.dumps(metadata))

    def storage_meta(self) -> StorageMeta | None:
        return StorageMeta(checkpoint_id=self.checkpoint_id, save_id=self.save_id)

    @property
    def checkpoint_id(self) -> str:
        """``<store>/<path>``, for DCP's ``StorageMeta`` (a description, not a key)."""
        return f"{self.store.describe()}/{self.path}"

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        """False: this writer is always passed explicitly, never inferred from an id."""
        return False
