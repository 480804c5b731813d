"""The consolidated writer: one portable ``torch.save`` file per component.

Files are ordinary ``torch.save`` zip archives, loadable by plain ``torch.load``. Writing goes
through the store's atomic writer, which computes the digest (xxh3_128,
``statecraft.storage.digest``) from the bytes as they stream out (no re-read); the zip's own
per-record CRC32 is skipped (``torch.serialization`` option ``compute_crc32``) because the
manifest digest already covers every byte and the CRC pass costs a second read of the data.
Loading uses ``weights_only=True`` and, when the store has a real path, ``mmap=True`` (no copy
of the tensors into anonymous memory).
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator
from typing import IO, Any, cast

import torch

from statecraft.errors import CheckpointCorruptError, DiskFullError, SpecialFileError
from statecraft.storage.base import FileRecord, Store
from statecraft.storage.filesystem import open_regular
from statecraft.writers.base import Writer, tensor_bytes
from statecraft.writers.load_errors import explain_load_failure

__all__ = ["ConsolidatedWriter"]


def _disk_full_cause(exc: BaseException) -> DiskFullError | None:
    """The :class:`DiskFullError` in ``exc``'s cause/context chain (torch.save reports a
    failed write as its own ``RuntimeError`` with the store's error only chained)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, DiskFullError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


@contextlib.contextmanager
def _without_zip_crc() -> Iterator[None]:
    """Skip torch.save's per-record CRC32 where this torch has the option (>= 2.5)."""
    try:
        from torch.utils.serialization import config
    except ImportError:  # torch 2.4: no option; the CRC is computed
        yield
        return
    # Any: a ConfigModule grows its attributes (``patch`` among them) at import time, so its
    # type has none of them.
    with cast(Any, config).patch({"save.compute_crc32": False}):
        yield


class ConsolidatedWriter(Writer):
    """Writes and reads component payloads as ``torch.save`` files in a store (rank 0 owns
    every entry). Implements :class:`~statecraft.writers.base.Writer`."""

    format_name = "consolidated"

    def __repr__(self) -> str:
        return "ConsolidatedWriter()"

    def writer_info(self) -> dict[str, str]:
        """The serializer's version (the facade adds statecraft's own)."""
        return {"torch": str(torch.__version__)}

    def write(self, store: Store, path: str, payload: object) -> FileRecord:
        """Serialize ``payload`` to ``path`` atomically; returns size and digest. The file is
        opened with ``defer_sync`` (see :class:`~statecraft.writers.base.Writer`): it is
        durable once the store's next publication (the manifest's exclusive create) returns.

        Raises:
            DiskFullError: the disk filled (``ENOSPC``); ``bytes_needed`` is at least the
                payload's tensor bytes. Nothing was published.
            StoreError: the bytes could not be made durable (nothing was published).
        """
        try:
            with _without_zip_crc(), store.open_atomic(path, defer_sync=True) as writer:
                torch.save(payload, cast(IO[bytes], writer))  # write/flush is all it uses
        except Exception as exc:
            full = _disk_full_cause(exc)
            if full is None:
                raise
            raise DiskFullError(
                full.path,
                bytes_needed=max(full.bytes_needed, tensor_bytes(payload)),
                bytes_free=full.bytes_free,
            ) from None
        return writer.record  # type: ignore[return-value]

    # ``-> Any``: whatever was saved (see Writer.read).
    def read(self, store: Store, path: str, *, mmap: bool = True) -> Any:
        """Load the payload at ``path`` with ``weights_only=True``.

        Raises:
            CheckpointCorruptError: the file is not a loadable ``torch.save`` archive, or
                holds a value the weights-only unpickler refuses (the message names it and
                the conversion, :func:`~statecraft.writers.load_errors.explain_load_failure`),
                or is not a regular file (a symlink, FIFO, directory or device is never
                opened).
        """
        local = store.local_path(path) if mmap else None
        if local is not None:  # never map a symlink, a FIFO, a device (open_read refuses too)
            try:
                os.close(open_regular(local))
            except SpecialFileError as exc:
                raise CheckpointCorruptError(
                    f"{store.describe()}/{path}",
                    f"is a {exc.kind} where a torch.save file should be; it was not read",
                    "Replace it with the real file or resume from another checkpoint.",
                ) from None
        archive: str | bytes | None = local
        try:
            if local is not None:
                return torch.load(local, weights_only=True, mmap=True, map_location="cpu")
            with store.open_read(path) as handle:
                archive = data = handle.read()
        except Exception as exc:  # torch.load raises many types on bad bytes
            raise CheckpointCorruptError(
                f"{store.describe()}/{path}",
                explain_load_failure(exc, archive),
                "Resume from another checkpoint or move this one aside.",
            ) from None
        return self.load_bytes(data, where=f"{store.describe()}/{path}")

    def load_bytes(self, data: bytes, *, where: str) -> Any:
        """Load a payload from the bytes of its file, already read (and, by a verifier,
        hashed: the bytes checked are the bytes loaded), with ``weights_only=True``.

        Raises:
            CheckpointCorruptError: ``data`` is not a loadable ``torch.save`` archive, or holds
                a value the weights-only unpickler refuses (``where`` names the file).
        """
        try:
            return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
        except Exception as exc:  # torch.load raises many types on bad bytes
            raise CheckpointCorruptError(
                where,
                explain_load_failure(exc, data),
                "Resume from another checkpoint or move this one aside.",
            ) from None
