"""The DCP part of ``statecraft inspect``: per component directory (``model/``, ``optim/``,
``old/``, ``ref/``) of a ``checkpoint_format=dcp`` iteration, the shard files
(``__<rank>_<k>.distcp``), their count and sizes, the ``.metadata`` and the world size at save.

``.metadata`` is DCP's pickled ``Metadata``. torch ships no pickle-free loader for it
(``FileSystemReader`` uses ``pickle.load``), so it is read here with a restricted unpickler
(:class:`_MetadataUnpickler`) that resolves only DCP's own metadata classes, torch sizes and
dtypes and ``pathlib`` paths, and refuses every other global: a doctored ``.metadata`` cannot run
code in ``inspect``. When it does not load, the report falls back to the file names.

The world size at save is the number of ranks named by the shard files
(``__<rank>_*.distcp``: highest rank + 1): DCP writes one set of files per rank that holds
data, so it is exact for sharded state (FSDP2 / DTensor) and a lower bound when replicated
state left a rank with nothing to write (``world_size_note`` says so).
"""

from __future__ import annotations

import io
import pickle
import re
from typing import Any

from statecraft.storage.base import Store

__all__ = [
    "DCP_COMPONENTS",
    "METADATA_NAME",
    "dcp_component_report",
    "dcp_lines",
    "dcp_report",
    "load_metadata",
]

#: the DCP component directories of an iteration, in report order
DCP_COMPONENTS = ("model", "optim", "old", "ref")
METADATA_NAME = ".metadata"
_SHARD_RE = re.compile(r"^__(\d+)_(\d+)\.distcp$")
_MAX_METADATA_BYTES = 256 << 20

_ALLOWED: dict[str, frozenset[str] | None] = {
    # None: any class defined in the module (DCP's metadata dataclasses and enums)
    "torch.distributed.checkpoint.metadata": None,
    "torch.distributed.checkpoint.filesystem": frozenset({"_StorageInfo"}),
    "statecraft.writers.dcp_storage": frozenset({"StoreItemInfo"}),
    "torch.serialization": frozenset({"_get_layout"}),
    "pathlib": frozenset({"PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath", "Path"}),
    "collections": frozenset({"OrderedDict"}),
}


class _MetadataUnpickler(pickle.Unpickler):
    """An unpickler that resolves only the globals a DCP ``.metadata`` holds."""

    def find_class(self, module: str, name: str) -> Any:
        import importlib

        import torch

        if module == "torch":
            value = getattr(torch, name, None)
            if name == "Size" or isinstance(value, torch.dtype):
                return value
        elif module in _ALLOWED:
            allowed = _ALLOWED[module]
            if allowed is None or name in allowed:
                value = getattr(importlib.import_module(module), name, None)
                if isinstance(value, type) or (allowed is not None and callable(value)):
                    return value
        raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a DCP .metadata")


def load_metadata(data: bytes) -> Any:
    """DCP's ``Metadata`` from the bytes of a ``.metadata``, through the restricted unpickler.

    Raises:
        ValueError: the bytes do not unpickle, name a global outside the allowed set, or hold
            something other than a DCP ``Metadata``.
    """
    from torch.distributed.checkpoint.metadata import Metadata

    try:
        metadata = _MetadataUnpickler(io.BytesIO(data)).load()
    except Exception as exc:
        raise ValueError(f"does not load ({type(exc).__name__}: {exc})") from None
    if not isinstance(metadata, Metadata):
        raise ValueError(f"holds a {type(metadata).__name__}, not DCP Metadata")
    return metadata


def _metadata_facts(metadata: Any) -> dict[str, Any]:
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    entries = metadata.state_dict_metadata
    tensors = [m for m in entries.values() if isinstance(m, TensorStorageMetadata)]
    tensor_bytes = 0
    for meta in tensors:
        numel = 1
        for dim in meta.size:
            numel *= int(dim)
        tensor_bytes += numel * _itemsize(meta.properties.dtype)
    files = sorted(
        {
            str(getattr(info, "relative_path", ""))
            for info in (metadata.storage_data or {}).values()
            if getattr(info, "relative_path", "")
        }
    )
    return {
        "entries": len(entries),
        "tensors": len(tensors),
        "tensor_bytes": tensor_bytes,
        "files_named": files,
    }


def _itemsize(dtype: Any) -> int:
    try:
        return int(dtype.itemsize)
    except AttributeError:  # pragma: no cover - every torch.dtype has itemsize
        return 0


def dcp_component_report(store: Store, directory: str) -> dict[str, Any] | None:
    """The DCP facts of one component directory of ``store`` (``iter_N/model``); ``None``
    when it holds neither a ``.metadata`` nor a ``.distcp`` shard. Reads only (LIST, HEAD,
    one GET of ``.metadata``).

    Returns:
        ``{"path", "shards", "shard_bytes", "files": [{"name", "rank", "size"}], "ranks",
        "world_size_at_save", "world_size_note", "metadata": {"present", "size", "loaded",
        "problem", "entries", "tensors", "tensor_bytes", "missing_files"}}``.
    """
    try:
        names = store.list(directory)
    except (FileNotFoundError, NotADirectoryError):
        return None
    shards = [(n, _SHARD_RE.match(n)) for n in names]
    shard_files = [(n, int(m.group(1))) for n, m in shards if m]
    if not shard_files and METADATA_NAME not in names:
        return None
    files = []
    for name, rank in sorted(shard_files, key=lambda f: (f[1], f[0])):
        stat = store.stat(f"{directory}/{name}")
        files.append({"name": name, "rank": rank, "size": None if stat is None else stat.size})
    ranks = sorted({rank for _, rank in shard_files})
    metadata: dict[str, Any] = {
        "present": METADATA_NAME in names,
        "size": None,
        "loaded": False,
        "problem": None,
        "entries": None,
        "tensors": None,
        "tensor_bytes": None,
        "missing_files": [],
    }
    if metadata["present"]:
        stat = store.stat(f"{directory}/{METADATA_NAME}")
        metadata["size"] = None if stat is None else stat.size
        if stat is not None and stat.size > _MAX_METADATA_BYTES:
            metadata["problem"] = f"over {_MAX_METADATA_BYTES} bytes; not read"
        else:
            try:
                facts = _metadata_facts(
                    load_metadata(store.read_bytes(f"{directory}/{METADATA_NAME}"))
                )
            except (ValueError, FileNotFoundError) as exc:
                metadata["problem"] = str(exc)
            else:
                named = facts.pop("files_named")
                metadata.update(facts, loaded=True)
                metadata["missing_files"] = [n for n in named if n not in names]
                named_ranks = {int(m.group(1)) for m in map(_SHARD_RE.match, named) if m}
                ranks = sorted(set(ranks) | named_ranks)
    world = max(ranks) + 1 if ranks else None
    if world is None:
        note = "no shard files"
    elif len(ranks) == world:
        note = f"ranks 0..{world - 1} each wrote shards"
    else:
        note = f"at least {world}: only ranks {ranks} wrote shards"
    return {
        "path": directory,
        "shards": len(files),
        "shard_bytes": sum(f["size"] or 0 for f in files),
        "files": files,
        "ranks": ranks,
        "world_size_at_save": world,
        "world_size_note": note,
        "metadata": metadata,
    }


def dcp_report(store: Store, iter_dir: str) -> dict[str, dict[str, Any]] | None:
    """Every DCP component directory of the iteration ``iter_dir`` of ``store``, by component
    name; ``None`` when it has none (a consolidated checkpoint)."""
    out = {}
    for component in DCP_COMPONENTS:
        report = dcp_component_report(store, f"{iter_dir}/{component}")
        if report is not None:
            out[component] = report
    return out or None


def dcp_lines(dcp: dict[str, dict[str, Any]] | None, indent: str = "      ") -> list[str]:
    """The text lines of :func:`dcp_report`'s data."""
    if not dcp:
        return []
    lines = []
    for component, report in dcp.items():
        meta = report["metadata"]
        if not meta["present"]:
            what = "NO .metadata"
        elif meta["loaded"]:
            what = (
                f".metadata {meta['size']} B, {meta['entries']} entries ({meta['tensors']} tensors)"
            )
        else:
            what = f".metadata {meta['size']} B (unreadable: {meta['problem']})"
        lines.append(
            f"{indent}{component}/ (DCP): {report['shards']} shards, {report['shard_bytes']} B, "
            f"world size at save {report['world_size_at_save']} ({report['world_size_note']}); "
            f"{what}"
        )
        if meta["missing_files"]:
            lines.append(
                f"{indent}  MISSING shards named by .metadata: {', '.join(meta['missing_files'])}"
            )
    return lines
