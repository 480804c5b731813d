"""Which files of a checkpoint verification reads once: hashed and deserialized from the same
bytes (:func:`~statecraft.checkpoint.kernel.listed_files.read_listed_file`).

At level ``"digest"`` a verifier that keeps the payloads (resume) used to hash each file and
then read it again to deserialize it. A file of the consolidated format that is not loaded
memory-mapped (``optim.pt``, ``trainer.pt``, ``data.pt``; ``model.pt`` too when the store has
no local path to map) is now read into memory once; its digest is computed over those bytes,
compared with the manifest's, and only then are the same bytes deserialized. Nothing is
deserialized before its digest matched, and what is loaded is exactly what was checked.

``model.pt`` on a local store stays memory-mapped (its pages are copied into the live
parameters, so no anonymous copy of it is made): it is hashed through a mapping of the file
and ``torch.load(mmap=True)`` then maps the same page-cache pages, one read from the disk.
"""

from __future__ import annotations

# Any: a deserialized payload is a torch object of no static type.
from typing import Any

from statecraft.checkpoint.kernel.manifest import Manifest
from statecraft.checkpoint.kernel.plan import CheckpointPlan
from statecraft.storage.base import Store
from statecraft.writers.base import Writer
from statecraft.writers.consolidated import ConsolidatedWriter

__all__ = ["load_bytes", "read_once"]


def read_once(
    store: Store, directory: str, manifest: Manifest, writer: Writer, table: CheckpointPlan
) -> frozenset[str]:
    """The files of ``manifest`` (under ``directory`` of ``store``) that are read once: plain
    file entries of ``table`` read by a :class:`ConsolidatedWriter`, except the memory-mapped
    ones on a store with a local path. Empty for any other writer."""
    if not isinstance(writer, ConsolidatedWriter):
        return frozenset()
    names = []
    for name in manifest.files:
        if "/" in name or name not in table.names:  # a directory's file, or not of the plan
            continue
        if table.entry(name).mmap and store.local_path(f"{directory}/{name}") is not None:
            continue
        names.append(name)
    return frozenset(names)


def load_bytes(writer: Writer, data: bytes, where: str) -> Any:
    """Deserialize ``data``, the verified bytes of the file at ``where``, through ``writer``
    (one that :func:`read_once` chose files for).

    Raises:
        CheckpointCorruptError: ``data`` does not deserialize (naming ``where``).
        TypeError: ``writer`` reads no bytes (a caller bug: :func:`read_once` chose none).
    """
    if not isinstance(writer, ConsolidatedWriter):
        raise TypeError(f"{writer!r} cannot load a payload from bytes")
    return writer.load_bytes(data, where=where)
