"""DCP's ``StorageWriter`` / ``StorageReader`` over a :class:`~statecraft.storage.base.Store`.

``torch.distributed.checkpoint`` plans *what* each rank saves (its planners, its ``Metadata``,
resharding on load); these two classes decide *how bytes become durable* in our stores, in
place of torch's ``FileSystemWriter`` / ``FileSystemReader``, which delete the old ``.metadata``
before their rename and never fsync a directory.

Layout of one DCP directory ``<path>/`` (``iter_000000100/model``)::

    __<rank>_<k>.distcp   the items rank <rank> saved, file <k> of its ``files_per_rank``
    .metadata             DCP's pickled ``Metadata`` (the coordinator's)

Write protocol (who calls what, driven by ``dcp.save``):
    1. every rank: :meth:`StoreStorageWriter.prepare_local_plan` creates ``<path>/`` (refuses
       a directory that already holds a ``.metadata``: a committed DCP checkpoint is never
       overwritten);
    2. coordinator: :meth:`~StoreStorageWriter.prepare_global_plan` names each rank's files;
    3. every rank: :meth:`~StoreStorageWriter.write_data` writes its own shard files, each
       through ``store.open_atomic(..., defer_sync=True)`` (temporary + fsync + rename +
       directory fsync locally, one PUT remotely) and settles them before it returns: when its
       future resolves every shard of this rank is durable. Each item's
       :class:`StoreItemInfo` (the ``WriteResult.storage_data``) records its file, offset,
       length and the xxh3_128 digest of its bytes, computed as they were written.
    4. coordinator: :meth:`~StoreStorageWriter.finish` writes ``.metadata`` with
       ``store.write_atomic`` (a replace that never deletes the old one first).

    After ``dcp.save`` returns, :attr:`StoreStorageWriter.records` holds the
    :class:`~statecraft.storage.base.FileRecord` (size, whole-file digest) of every file THIS
    rank wrote, keyed by store path (``iter_000000100/model/__1_0.distcp``), and on the
    coordinator the ``.metadata`` record too; the caller gathers them for the manifest.

Read protocol (``dcp.load``): :meth:`StoreStorageReader.read_metadata` (a missing or
unreadable ``.metadata`` raises :class:`~statecraft.errors.CheckpointCorruptError` naming it),
then :meth:`~StoreStorageReader.read_data` reads each needed item by range
(:meth:`Store.read_range`: a seek locally, a ranged GET remotely), checks its length and its
digest and only then deserializes it: a truncated or altered shard raises
``CheckpointCorruptError`` naming the shard file and the item. Items written by torch's own
``FileSystemWriter`` (no digest) load unchecked.

``dcp.save`` / ``dcp.load`` wrap an exception raised here in a ``CheckpointException`` (a
``BaseException``); :func:`unwrap_checkpoint_exception` gets ours back.
"""

from __future__ import annotations

import dataclasses
import io
import pickle
import uuid
from collections.abc import Iterator
from typing import IO, Any, cast

import torch
import xxhash
from torch.distributed._shard._utils import narrow_tensor_by_index
from torch.distributed.checkpoint import (
    LoadPlan,
    LoadPlanner,
    Metadata,
    SavePlan,
    SavePlanner,
    StorageReader,
    StorageWriter,
)
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import StorageMeta
from torch.distributed.checkpoint.planner import LoadItemType, ReadItem, WriteItem, WriteItemType
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from statecraft.errors import CheckpointCorruptError, CheckpointError, StatecraftError
from statecraft.storage.base import FileRecord, Store, check_relative_path
from statecraft.storage.digest import SAVE_ALGORITHM
from statecraft.writers.consolidated import _without_zip_crc

__all__ = [
    "METADATA_NAME",
    "SHARD_SUFFIX",
    "StoreItemInfo",
    "StoreStorageReader",
    "StoreStorageWriter",
    "item_digest",
    "shard_name",
    "unwrap_checkpoint_exception",
]

METADATA_NAME = ".metadata"
SHARD_SUFFIX = ".distcp"


def shard_name(rank: int, index: int) -> str:
    """The name of shard file ``index`` of ``rank`` (``__1_0.distcp``), as torch names them."""
    return f"__{rank}_{index}{SHARD_SUFFIX}"


def item_digest(data: bytes | bytearray | memoryview) -> str:
    """``xxh3_128:<hex>`` of one item's bytes (what :class:`StoreItemInfo` records)."""
    return f"{SAVE_ALGORITHM}:{xxhash.xxh3_128(data).hexdigest()}"


@dataclasses.dataclass
class StoreItemInfo(_StorageInfo):
    """Where one DCP item lies (torch's ``_StorageInfo``: file relative to the DCP directory,
    offset, length), plus ``digest``: ``xxh3_128:<hex>`` of its ``length`` bytes. A subclass so
    torch's own ``FileSystemReader`` can still read a checkpoint we wrote.

    The class is pickled into ``.metadata`` by its qualified name: it must keep its module
    and name (``statecraft.writers.dcp_storage.StoreItemInfo``)."""

    digest: str = ""


@dataclasses.dataclass(frozen=True)
class _ShardPrefix:
    """A rank's file-name prefix (``__<rank>_``), the ``SavePlan.storage_data`` the
    coordinator assigns in :meth:`StoreStorageWriter.prepare_global_plan`."""

    rank: int


class _ItemStream:
    """Write-through view of an atomic writer that knows its position and hashes each item
    (``torch.save`` uses ``write`` and ``flush`` only)."""

    def __init__(self, writer: Any) -> None:
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
    doc for the protocol and layout).

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

    def reset(self, checkpoint_id: Any = None) -> None:
        """A new save begins (``checkpoint_id`` is not used: the path was given at init)."""
        self.records = {}
        self.item_count = 0
        self.save_id = uuid.uuid4().hex

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
    def validate_checkpoint_id(cls, checkpoint_id: Any) -> bool:
        """False: this writer is always passed explicitly, never inferred from an id."""
        return False


class StoreStorageReader(StorageReader):
    """DCP ``StorageReader`` for the DCP directory ``path`` of ``store``: ranged reads, each
    item's length and digest checked before it is deserialized (see the module doc).

    Raises (through ``dcp.load``, wrapped in its ``CheckpointException``):
        CheckpointCorruptError: ``.metadata`` missing or unreadable; an item's file missing,
            short, or with other bytes than its digest; an item that does not deserialize.
    """

    def __init__(self, store: Store, path: str) -> None:
        super().__init__()
        self.store = store
        self.path = check_relative_path(path)
        self.storage_data: dict[Any, Any] = {}
        self.load_id = uuid.uuid4().hex
        self.items_read = 0
        self.bytes_read = 0

    def __repr__(self) -> str:
        return f"StoreStorageReader({self.store.describe()}/{self.path})"

    def _where(self, name: str) -> str:
        return f"{self.store.describe()}/{self.path}/{name}"

    def reset(self, checkpoint_id: Any = None) -> None:
        self.storage_data = {}
        self.load_id = uuid.uuid4().hex

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        """DCP's ``Metadata`` from ``.metadata`` (read whole; it is not size-capped).

        Raises:
            CheckpointCorruptError: missing, unreadable, or not a DCP ``Metadata``.
        """
        try:
            with self.store.open_read(f"{self.path}/{METADATA_NAME}") as handle:
                data = handle.read()
        except FileNotFoundError:
            raise CheckpointCorruptError(
                self._where(METADATA_NAME),
                "is missing: without it the DCP shards of this directory cannot be read",
                "Resume from another checkpoint; this one is incomplete.",
            ) from None
        except (OSError, StatecraftError) as exc:
            raise CheckpointCorruptError(
                self._where(METADATA_NAME), f"could not be read ({exc})"
            ) from None
        try:
            metadata = pickle.loads(data)
        except Exception as exc:  # any unpickling failure means damaged bytes
            raise CheckpointCorruptError(
                self._where(METADATA_NAME),
                f"does not unpickle ({type(exc).__name__}: {exc})",
                "Resume from another checkpoint or move this one aside.",
            ) from None
        if not isinstance(metadata, Metadata) or metadata.storage_data is None:
            raise CheckpointCorruptError(
                self._where(METADATA_NAME),
                f"holds a {type(metadata).__name__}, not DCP Metadata with storage data",
            )
        if metadata.storage_meta is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata

    def set_up_storage_reader(
        self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any
    ) -> None:
        self.storage_data = dict(metadata.storage_data or {})

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        return plans

    def item_bytes(self, info: Any, what: str) -> bytes:
        """The checked bytes of one item (``what`` names it in messages).

        Raises:
            CheckpointCorruptError: file missing, short, or digest mismatch.
        """
        name = str(info.relative_path)
        try:
            check_relative_path(name)
            data = self.store.read_range(f"{self.path}/{name}", int(info.offset), int(info.length))
        except FileNotFoundError:
            raise CheckpointCorruptError(
                self._where(name),
                f"is missing (it holds {what})",
                "Resume from another checkpoint; this one is incomplete.",
            ) from None
        except (OSError, StatecraftError) as exc:
            raise CheckpointCorruptError(self._where(name), f"could not be read ({exc})") from None
        if len(data) != int(info.length):
            raise CheckpointCorruptError(
                self._where(name),
                f"is truncated: {what} needs bytes {info.offset}..{info.offset + info.length} "
                f"but only {len(data)} of its {info.length} bytes are there",
                "Resume from another checkpoint or move this one aside.",
            )
        expected = getattr(info, "digest", "")
        if expected and item_digest(data) != expected:
            raise CheckpointCorruptError(
                self._where(name),
                f"has other bytes than were saved for {what} (offset {info.offset}, "
                f"{info.length} bytes: digest {item_digest(data)}, expected {expected})",
                "Resume from another checkpoint or move this one aside.",
            )
        self.items_read += 1
        self.bytes_read += len(data)
        return data

    def _grouped(self, plan: LoadPlan) -> Iterator[tuple[Any, list[ReadItem]]]:
        by_index: dict[Any, list[ReadItem]] = {}
        for req in plan.items:
            by_index.setdefault(req.storage_index, []).append(req)
        for index, reqs in by_index.items():
            if index not in self.storage_data:
                raise CheckpointCorruptError(
                    self._where(METADATA_NAME),
                    f"has no storage entry for {index.fqn!r} that the load plan needs",
                )
            yield self.storage_data[index], reqs

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        """Read every item of ``plan`` (each stored item once), verify it, hand it to
        ``planner``."""
        for info, reqs in self._grouped(plan):
            what = f"item {reqs[0].storage_index.fqn!r}"
            data = self.item_bytes(info, what)
            if reqs[0].type == LoadItemType.BYTE_IO:
                for req in reqs:
                    planner.load_bytes(req, io.BytesIO(data))
                continue
            try:
                stored = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
            except Exception as exc:  # damaged bytes that still matched (no digest)
                raise CheckpointCorruptError(
                    self._where(str(info.relative_path)),
                    f"{what} does not load ({type(exc).__name__}: {exc})",
                ) from None
            for req in reqs:
                tensor = narrow_tensor_by_index(stored, req.storage_offsets, req.lengths)
                target = planner.resolve_tensor(req).detach()
                if target.size() != tensor.size():
                    raise CheckpointCorruptError(
                        self._where(str(info.relative_path)),
                        f"{what} has shape {tuple(tensor.size())} where the load target "
                        f"needs {tuple(target.size())}",
                    )
                target.copy_(tensor)
                planner.commit_tensor(req, target)
        future: Future[None] = Future()
        future.set_result(None)
        return future

    @property
    def checkpoint_id(self) -> str:
        return f"{self.store.describe()}/{self.path}"

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Any) -> bool:
        """False: this reader is always passed explicitly, never inferred from an id."""
        return False


def unwrap_checkpoint_exception(exc: BaseException) -> BaseException:
    """What DCP's ``CheckpointException`` wraps: a non-``Exception`` (a simulated crash, an
    interrupt) first, then a statecraft error, then any other error (the lowest rank's first);
    else ``exc`` itself. What ``save_dcp_state`` / ``load_dcp_state`` re-raise."""
    if isinstance(exc, CheckpointException):
        for rank in sorted(exc.failures):  # a crash or an interrupt first: never swallowed
            inner = exc.failures[rank][0]
            if not isinstance(inner, Exception):
                return inner
        for rank in sorted(exc.failures):
            inner = exc.failures[rank][0]
            if isinstance(inner, StatecraftError):
                return inner
        for rank in sorted(exc.failures):
            inner = exc.failures[rank][0]
            if isinstance(inner, Exception):
                return inner
    return exc
