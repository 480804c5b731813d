"""Content-addressed tensor blobs: the bytes of the incremental format
(``checkpoint_format=incremental``, :mod:`statecraft.writers.incremental`).

A tensor of at least :data:`MIN_BLOB_BYTES` is stored as the raw bytes of its contiguous CPU
copy, cut into chunks of :data:`CHUNK_BYTES`; each chunk is a file ``blobs/<xxh3_128 hex>``
of the checkpoints root, named by the digest of its bytes, so equal bytes are stored once per
attempt. In the component file (``model.pt``, ``optim.pt``) the tensor is replaced by a
:func:`blob_ref`: a plain dict (dtype, shape, the chunks' digests and sizes) that
``torch.load(weights_only=True)`` reads.

Durability rule: a blob is published by :meth:`Store.open_atomic` (temporary file, fsync,
rename, directory fsync; the fsyncs deferred and run side by side) and is durable before the
component file that names it is published: that publication is not deferred, and the store
settles every deferred one before it. A save
reuses (writes nothing for) a blob found under its name only when this process wrote it
durably: a name another process left may not be durable (a failed fsync's pages can be
dropped as clean), so the first save of a process writes every blob it names. A reader
checks each chunk's size and digest.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, cast

import numpy as np
import torch
import xxhash

from statecraft.errors import CheckpointCorruptError, SpecialFileError
from statecraft.storage.base import Store
from statecraft.storage.filesystem import open_regular

__all__ = [
    "BLOB_DIR",
    "CHUNK_BYTES",
    "MIN_BLOB_BYTES",
    "REF_KEY",
    "BlobWrites",
    "blob_path",
    "blob_ref",
    "is_blob_ref",
    "iter_refs",
    "read_tensor",
    "ref_chunks",
    "store_tensor",
    "tensor_bytes_view",
]

BLOB_DIR = "blobs"
CHUNK_BYTES = 64 << 20  # a tensor larger than this is stored as several blobs
MIN_BLOB_BYTES = 64 << 10  # smaller tensors stay inline in the component file
REF_KEY = "__statecraft_blob__"
REF_VERSION = "statecraft.blob-ref.v1"


def blob_path(digest: str) -> str:
    """The store path of the blob whose bytes hash to ``digest`` (32 hex digits)."""
    return f"{BLOB_DIR}/{digest}"


def is_blob_ref(value: Any) -> bool:
    """``value`` is a reference a component file holds in place of a tensor."""
    return isinstance(value, dict) and value.get(REF_KEY) == REF_VERSION


def ref_chunks(ref: dict[str, Any]) -> list[tuple[str, int]]:
    """The ``(digest, size)`` of each chunk of ``ref``, in order."""
    return [(str(d), int(s)) for d, s in ref["chunks"]]


def iter_refs(payload: Any) -> Iterator[dict[str, Any]]:
    """Every blob reference inside a loaded component file (nested dicts, lists, tuples)."""
    stack = [payload]
    while stack:
        item = stack.pop()
        if is_blob_ref(item):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


def blob_ref(tensor: torch.Tensor, chunks: list[tuple[str, int]]) -> dict[str, Any]:
    """The reference to ``tensor`` stored as ``chunks`` (weights-only loadable)."""
    return {
        REF_KEY: REF_VERSION,
        "dtype": str(tensor.dtype).removeprefix("torch."),
        "shape": list(tensor.shape),
        "chunks": [[d, s] for d, s in chunks],
    }


def tensor_bytes_view(tensor: torch.Tensor) -> np.ndarray:
    """The bytes of ``tensor`` as a flat ``uint8`` array (no copy for a contiguous CPU
    tensor; a device or strided one is copied to contiguous CPU memory first)."""
    flat = tensor.detach()
    if flat.device.type != "cpu":
        flat = flat.cpu()
    flat = flat.contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy()


class BlobWrites:
    """What one save did to the blob store: blobs written, blobs found and reused."""

    def __init__(self) -> None:
        self.written: dict[str, int] = {}
        self.reused: dict[str, int] = {}

    @property
    def bytes_written(self) -> int:
        return sum(self.written.values())

    @property
    def bytes_reused(self) -> int:
        return sum(self.reused.values())


def store_tensor(
    store: Store,
    tensor: torch.Tensor,
    writes: BlobWrites,
    *,
    durable: set[str],
    chunk_bytes: int = CHUNK_BYTES,
) -> dict[str, Any]:
    """Store ``tensor``'s bytes as blobs and return its reference. Each chunk is digested
    while it is in memory; a chunk is reused only when ``durable`` (the blobs this process
    wrote durably) names it and it is still under its name with its size; any other is
    written (an atomic replace) with ``defer_sync``: it is durable once the store's next
    non-deferred publication returns (the caller's component file, which names it), and only
    then may the caller add it to ``durable``.

    Raises:
        StoreError / DiskFullError: a blob could not be made durable (nothing names it).
    """
    data = tensor_bytes_view(tensor)
    chunks: list[tuple[str, int]] = []
    for start in range(0, max(len(data), 1), chunk_bytes):
        piece = data[start : start + chunk_bytes]
        digest = xxhash.xxh3_128_hexdigest(piece.data)
        size = len(piece)
        chunks.append((digest, size))
        if digest in writes.written or digest in writes.reused:
            continue
        if digest in durable:
            found = store.stat(blob_path(digest))
            if found is not None and found.size == size:
                writes.reused[digest] = size
                continue
        durable.discard(digest)
        with store.open_atomic(blob_path(digest), defer_sync=True) as out:
            out.write(piece.data)
        writes.written[digest] = size
    return blob_ref(tensor, chunks)


def _dtype(name: str, where: str) -> torch.dtype:
    value = getattr(torch, str(name), None)
    if not isinstance(value, torch.dtype):
        raise CheckpointCorruptError(
            where,
            f"a blob reference names dtype {name!r}, which this torch does not know",
            "Resume with the torch version that wrote it, or from another checkpoint.",
        )
    return value


def _mapped(store: Store, digest: str, size: int) -> torch.Tensor | None:
    """The blob as a private (copy-on-write) memory map, when the store has a local path and
    the name is a regular file of ``size`` bytes; ``None`` otherwise (it is then read)."""
    path = blob_path(digest)
    local = store.local_path(path)
    found = store.stat(path)
    if local is None or found is None or found.size != size or size == 0:
        return None
    try:
        os.close(open_regular(local))  # never map a symlink, a FIFO, a device
    except (SpecialFileError, OSError):
        return None
    return torch.from_file(local, shared=False, size=size, dtype=torch.uint8)


def read_tensor(
    store: Store, ref: dict[str, Any], *, where: str, mmap: bool = False
) -> torch.Tensor:
    """The tensor ``ref`` describes, read from its blobs; each chunk's size and xxh3_128
    digest are checked against its name before the tensor is returned. With ``mmap`` a
    one-chunk tensor on a local store is a private memory map of its blob (no copy into
    anonymous memory; the digest is computed over the mapped pages).

    Raises:
        CheckpointCorruptError: a blob is missing, has another size or other bytes, or the
            reference is malformed (``where`` names the component file).
    """
    try:
        dtype = _dtype(ref["dtype"], where)
        shape = [int(n) for n in ref["shape"]]
        chunks = ref_chunks(ref)
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointCorruptError(
            where, f"holds a malformed blob reference ({exc!r})", "Resume from another checkpoint."
        ) from None
    total = sum(size for _, size in chunks)
    mapped = _mapped(store, *chunks[0]) if mmap and len(chunks) == 1 else None
    if mapped is not None:
        if xxhash.xxh3_128_hexdigest(mapped.numpy().data) != chunks[0][0]:
            raise CheckpointCorruptError(
                f"{store.describe()}/{blob_path(chunks[0][0])}",
                f"the blob {where} references does not hash to its name",
                "Resume from another checkpoint; the blob store of this attempt was damaged.",
            )
        return _shaped(mapped, dtype, shape, total, where)
    buffer = torch.empty(total, dtype=torch.uint8)
    view = buffer.numpy()
    offset = 0
    for digest, size in chunks:
        path = blob_path(digest)
        target = view[offset : offset + size]
        try:
            with store.open_read(path) as handle:
                got = cast(Any, handle).readinto(target.data) if size else 0
                extra = handle.read(1)
        except FileNotFoundError:
            got, extra = -1, b""
        if got != size or extra:
            found = "missing" if got < 0 else "of another size"
            raise CheckpointCorruptError(
                f"{store.describe()}/{path}",
                f"the blob {where} references is {found} (expected {size} bytes)",
                "Resume from another checkpoint; the blob store of this attempt was damaged.",
            )
        if xxhash.xxh3_128_hexdigest(target.data) != digest:
            raise CheckpointCorruptError(
                f"{store.describe()}/{path}",
                f"the blob {where} references does not hash to its name",
                "Resume from another checkpoint; the blob store of this attempt was damaged.",
            )
        offset += size
    return _shaped(buffer, dtype, shape, total, where)


def _shaped(
    data: torch.Tensor, dtype: torch.dtype, shape: list[int], total: int, where: str
) -> torch.Tensor:
    expected = int(np.prod(shape, dtype=np.int64)) * torch.empty((), dtype=dtype).element_size()
    if expected != total:
        raise CheckpointCorruptError(
            where,
            f"a blob reference of shape {shape} ({dtype}) needs {expected} bytes; its chunks "
            f"hold {total}",
            "Resume from another checkpoint.",
        )
    return data.view(dtype).reshape(shape)
