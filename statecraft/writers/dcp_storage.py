"""The on-disk format of a DCP directory that statecraft writes: file names, item digests and
the per-item record DCP pickles into ``.metadata``.

``torch.distributed.checkpoint`` plans *what* each rank saves (its planners, its ``Metadata``,
resharding on load); :mod:`statecraft.writers.dcp_store_writer` and
:mod:`statecraft.writers.dcp_store_reader` decide *how bytes become durable* in our stores, in
place of torch's ``FileSystemWriter`` / ``FileSystemReader``, which delete the old ``.metadata``
before their rename and never fsync a directory. This module holds what both sides agree on.

Layout of one DCP directory ``<path>/`` (``iter_000000100/model``)::

    __<rank>_<k>.distcp   the items rank <rank> saved, file <k> of its ``files_per_rank``
    .metadata             DCP's pickled ``Metadata`` (the coordinator's); per item a
                          :class:`StoreItemInfo`: file, offset, length, digest

This module's name is part of the format: ``.metadata`` pickles :class:`StoreItemInfo` by its
qualified name (``statecraft.writers.dcp_storage.StoreItemInfo``), and
``statecraft inspect`` allows exactly that name when it unpickles one. Do not move it.
"""

from __future__ import annotations

import dataclasses

import xxhash
from torch.distributed.checkpoint.filesystem import _StorageInfo

from statecraft.storage.digest import SAVE_ALGORITHM

__all__ = ["METADATA_NAME", "SHARD_SUFFIX", "StoreItemInfo", "item_digest", "shard_name"]

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
