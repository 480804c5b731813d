"""DCP's ``StorageReader`` over a :class:`~statecraft.storage.base.Store`: every item read by
range and checked before it is deserialized.

The layout is :mod:`statecraft.writers.dcp_storage`'s. Read protocol (driven by ``dcp.load``):
:meth:`StoreStorageReader.read_metadata` (a missing or unreadable ``.metadata`` raises
:class:`~statecraft.errors.CheckpointCorruptError` naming it), then
:meth:`~StoreStorageReader.read_data` reads each needed item by range (:meth:`Store.read_range`:
a seek locally, a ranged GET remotely), checks its length and its digest and only then
deserializes it: a truncated or altered shard raises ``CheckpointCorruptError`` naming the
shard file and the item. Items written by torch's own ``FileSystemWriter`` (no digest) load
unchecked.

``dcp.load`` wraps an exception raised here in a ``CheckpointException`` (a ``BaseException``);
:func:`statecraft.writers.dcp_failures.unwrap_checkpoint_exception` gets ours back.
"""

from __future__ import annotations

import io
import os
import pickle
import uuid
from collections.abc import Iterator
from typing import Any

import torch
from torch.distributed._shard._utils import narrow_tensor_by_index
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex, StorageMeta
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, ReadItem
from torch.distributed.checkpoint.storage import StorageReader
from torch.futures import Future

from statecraft.errors import CheckpointCorruptError, StatecraftError
from statecraft.storage.base import Store, check_relative_path
from statecraft.writers.dcp_storage import METADATA_NAME, item_digest

__all__ = ["StoreStorageReader"]


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
        #: item -> where it lies (a ``StoreItemInfo``, or torch's ``_StorageInfo`` without a
        #: digest for a directory torch's ``FileSystemWriter`` wrote)
        self.storage_data: dict[MetadataIndex, _StorageInfo] = {}
        self.load_id = uuid.uuid4().hex
        self.items_read = 0
        self.bytes_read = 0

    def __repr__(self) -> str:
        return f"StoreStorageReader({self.store.describe()}/{self.path})"

    def _where(self, name: str) -> str:
        return f"{self.store.describe()}/{self.path}/{name}"

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        self.storage_data = {}
        self.load_id = uuid.uuid4().hex

    # ``*args: Any, **kwargs: Any``: torch's abstract signature; none of them is read.
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

    # ``*args: Any, **kwargs: Any``: torch's abstract signature; none of them is read.
    def set_up_storage_reader(
        self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any
    ) -> None:
        self.storage_data = dict(metadata.storage_data or {})

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        return plans

    def item_bytes(self, info: _StorageInfo, what: str) -> bytes:
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

    def _grouped(self, plan: LoadPlan) -> Iterator[tuple[_StorageInfo, list[ReadItem]]]:
        by_index: dict[MetadataIndex, list[ReadItem]] = {}
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
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        """False: this reader is always passed explicitly, never inferred from an id."""
        return False
