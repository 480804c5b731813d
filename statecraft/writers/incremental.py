"""The incremental writer (``checkpoint_format=incremental``): component files whose large
tensors live once per attempt in the content-addressed blob store
(:mod:`statecraft.writers.blobs`).

Save: every tensor of at least :data:`~statecraft.writers.blobs.MIN_BLOB_BYTES` in a bulk
entry (``model.pt``, ``optim.pt``) is digested (xxh3_128, every save: the check that it is
unchanged is its digest, which no in-place write can bypass) and replaced by a reference;
only blobs this process has not already written durably are written, each durably
(temporary file, fsync, rename, directory fsync; the fsyncs run side by side) before the
component file that names it, which is published without deferring (the store settles
every deferred blob first). The component file is a plain ``torch.save`` of the payload with
references in place of those tensors. Control entries (``trainer.pt``, ``data.pt``) are written
whole. :meth:`IncrementalWriter.writer_info` records, for each entry, the blobs it names
(``blobs:<entry>`` = ``<digest>:<size>`` separated by spaces): the manifest alone says which
blobs an iteration needs; garbage collection marks from it.

Load: :meth:`IncrementalWriter.read` loads the component file and replaces each reference by
its tensor, read from its blobs with every chunk's size and digest checked; a file with no
references (a consolidated one) loads as it is.
"""

from __future__ import annotations

from typing import IO, Any, cast

import torch

from statecraft.errors import DiskFullError
from statecraft.storage.base import FileRecord, Store
from statecraft.writers.base import Writer, tensor_bytes
from statecraft.writers.blobs import (
    BLOB_DIR,
    CHUNK_BYTES,
    MIN_BLOB_BYTES,
    BlobWrites,
    is_blob_ref,
    read_tensor,
    ref_chunks,
    store_tensor,
)
from statecraft.writers.consolidated import (
    ConsolidatedWriter,
    _disk_full_cause,
    _without_zip_crc,
)

__all__ = [
    "BLOBS_KEY_PREFIX",
    "BULK_ENTRIES",
    "DurableBlobs",
    "IncrementalWriter",
    "parse_blob_list",
]

BULK_ENTRIES = ("model.pt", "optim.pt")  # the entries whose tensors become blobs
BLOBS_KEY_PREFIX = "blobs:"  # writer-info key of an entry's blob list


def parse_blob_list(text: str) -> dict[str, int]:
    """``<digest>:<size> ...`` (a manifest's ``blobs:<entry>`` value) -> digest -> size.

    Raises:
        ValueError: the text is malformed.
    """
    out: dict[str, int] = {}
    for item in text.split():
        digest, _, size = item.partition(":")
        if len(digest) != 32 or not size.isdigit():
            raise ValueError(f"malformed blob list item {item!r}")
        int(digest, 16)
        out[digest] = int(size)
    return out


class DurableBlobs:
    """The blobs this process wrote and saw made durable (shared by the writers of one run).

    Only these are reused when found under their name: a name another process left (or one
    whose publication failed here) may sit in the page cache only, and no later fsync is
    known to make it durable (a failed fsync's pages can be dropped as clean); a power loss
    would then take it from under a committed iteration. Any other blob is written again
    (an atomic replace with the same bytes) before a component file names it.
    """

    def __init__(self) -> None:
        self.known: set[str] = set()


class IncrementalWriter(Writer):
    """Writes bulk entries as component files over the blob store; reads them back with every
    blob verified. Implements :class:`~statecraft.writers.base.Writer` (rank 0 owns every
    entry).

    A blob found under its name is reused only when this process wrote it durably
    (:class:`DurableBlobs`); so the first save of a process writes every blob it names.

    Args:
        min_blob_bytes: tensors smaller than this stay inline.
        chunk_bytes: a tensor larger than this is cut into blobs of this size.
        durable: shared by the writers of one run (``None``: this writer's own).
    """

    format_name = "incremental"

    def __init__(
        self,
        *,
        min_blob_bytes: int = MIN_BLOB_BYTES,
        chunk_bytes: int = CHUNK_BYTES,
        durable: DurableBlobs | None = None,
    ) -> None:
        self.min_blob_bytes = min_blob_bytes
        self.chunk_bytes = chunk_bytes
        self.durable = durable if durable is not None else DurableBlobs()
        self.blobs = BlobWrites()
        self.entry_blobs: dict[str, dict[str, int]] = {}
        self._plain = ConsolidatedWriter()

    def __repr__(self) -> str:
        return "IncrementalWriter()"

    def prepare_plan(self, plan: object, store: Store) -> None:
        """Create ``blobs/`` durably (once per attempt; a no-op when it exists)."""
        if store.stat(BLOB_DIR) is None:
            store.make_dirs(BLOB_DIR)

    def writer_info(self) -> dict[str, str]:
        """The serializer's version and, per bulk entry, the blobs it names."""
        info = {"torch": str(torch.__version__)}
        for name, blobs in sorted(self.entry_blobs.items()):
            info[BLOBS_KEY_PREFIX + name] = " ".join(f"{d}:{s}" for d, s in sorted(blobs.items()))
        return info

    def _externalize(self, store: Store, value: Any, names: dict[str, int]) -> Any:
        if isinstance(value, torch.Tensor):
            if (
                value.layout != torch.strided
                or value.is_quantized
                or value.untyped_storage().nbytes() == 0
                or value.numel() * value.element_size() < self.min_blob_bytes
            ):
                return value
            ref = store_tensor(
                store, value, self.blobs, durable=self.durable.known, chunk_bytes=self.chunk_bytes
            )
            names.update(ref_chunks(ref))
            return ref
        if isinstance(value, dict):
            items = [(k, self._externalize(store, v, names)) for k, v in value.items()]
            try:
                return type(value)(items)
            except TypeError:
                return dict(items)
        if isinstance(value, list):
            return [self._externalize(store, v, names) for v in value]
        if isinstance(value, tuple) and not hasattr(value, "_fields"):
            return tuple(self._externalize(store, v, names) for v in value)
        return value

    def write(self, store: Store, path: str, payload: object) -> FileRecord:
        """Store ``payload``'s large tensors as blobs (bulk entries only), then its component
        file at ``path`` (``defer_sync``: durable once the manifest's create returns).

        Raises:
            DiskFullError: the disk filled; nothing names what was not made durable.
            StoreError: the bytes could not be made durable.
        """
        name = path.rsplit("/", 1)[-1]
        if name not in BULK_ENTRIES:
            return self._plain.write(store, path, payload)
        names: dict[str, int] = {}
        before = set(self.blobs.written)
        try:
            skeleton = self._externalize(store, payload, names)
            # not deferred: the store settles every deferred blob first, so the blobs are
            # durable before the file that names them, and known durable once this returns
            with _without_zip_crc(), store.open_atomic(path) as writer:
                torch.save(skeleton, cast(IO[bytes], writer))
        except Exception as exc:
            full = _disk_full_cause(exc)
            if full is None:
                raise
            raise DiskFullError(
                full.path,
                bytes_needed=max(full.bytes_needed, tensor_bytes(payload)),
                bytes_free=full.bytes_free,
            ) from None
        self.durable.known.update(set(self.blobs.written) - before)
        self.entry_blobs[name] = names
        return writer.record  # type: ignore[return-value]

    def read(self, store: Store, path: str, *, mmap: bool = True) -> Any:
        """Load the component file at ``path`` and resolve its blob references (each blob's
        size and digest checked).

        Raises:
            CheckpointCorruptError: the file is not loadable, or a blob it names is missing,
                of another size or other bytes.
        """
        skeleton = self._plain.read(store, path, mmap=False)
        where = f"{store.describe()}/{path}"
        return _resolve(store, skeleton, where, mmap)


def _resolve(store: Store, value: Any, where: str, mmap: bool) -> Any:
    if is_blob_ref(value):
        return read_tensor(store, value, where=where, mmap=mmap)
    if isinstance(value, dict):
        items = [(k, _resolve(store, v, where, mmap)) for k, v in value.items()]
        try:
            return type(value)(items)
        except TypeError:
            return dict(items)
    if isinstance(value, list):
        return [_resolve(store, v, where, mmap) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_resolve(store, v, where, mmap) for v in value)
    return value
