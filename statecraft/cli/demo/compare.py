"""Payload-by-payload comparison of two checkpoints: each tensor by dtype, shape and bits,
every other value by type and value."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from statecraft.cli.demo.records import _LIST_DETAIL

__all__ = ["compare_checkpoints"]


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's raw bytes as ``[numel, itemsize]`` uint8 (bit-exact, NaN- and -0.0-aware)."""
    flat = t.detach().cpu().contiguous().reshape(-1)
    return flat.view(torch.uint8).reshape(flat.numel(), t.element_size())


def _tensor_differences(a: torch.Tensor, b: torch.Tensor, path: str) -> list[str]:
    if a.dtype != b.dtype:
        return [f"{path}: dtype {a.dtype} != {b.dtype}"]
    if a.shape != b.shape:
        return [f"{path}: shape {tuple(a.shape)} != {tuple(b.shape)}"]
    if a.numel() == 0 or (torch.equal(a.cpu(), b.cpu()) and torch.equal(_bits(a), _bits(b))):
        return []
    differing = (_bits(a) != _bits(b)).any(dim=1)
    count = int(differing.sum())
    detail = f"{count} of {a.numel()} elements differ"
    if count and not a.is_complex() and a.dtype != torch.bool:
        delta = (a.detach().cpu().double() - b.detach().cpu().double()).abs().reshape(-1)
        first = int(differing.nonzero()[0])
        detail += f" (first at flat index {first}; max |a-b| = {delta[differing].max().item():.3g})"
    return [f"{path}: {detail}"]


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _differences(a: Any, b: Any, path: str) -> list[str]:
    """Every difference between two loaded payloads, each naming its path (type-strict)."""
    where = path or "<root>"
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return _tensor_differences(a, b, where)
    if type(a) is not type(b):
        return [f"{where}: type {type(a).__name__} != {type(b).__name__} ({a!r:.60} vs {b!r:.60})"]
    if isinstance(a, dict):
        out = [
            f"{_join(path, k)}: only in the {side} checkpoint"
            for side, keys in (("first", a.keys() - b.keys()), ("second", b.keys() - a.keys()))
            for k in sorted(keys, key=repr)
        ]
        for key in sorted(a.keys() & b.keys(), key=repr):
            out.extend(_differences(a[key], b[key], _join(path, key)))
        return out
    if isinstance(a, list | tuple):
        if len(a) != len(b):
            return [f"{where}: length {len(a)} != {len(b)}"]
        per_item = [
            _differences(x, y, f"{path}[{i}]") for i, (x, y) in enumerate(zip(a, b, strict=True))
        ]
        differing = [d for d in per_item if d]
        if len(differing) > _LIST_DETAIL:  # e.g. a Python RNG state: one line, not 600
            return [f"{where}: {len(differing)} of {len(a)} items differ, first {differing[0][0]}"]
        return [line for lines in differing for line in lines]
    if isinstance(a, float):
        return [] if a.hex() == b.hex() else [f"{where}: {a!r} != {b!r}"]
    return [] if a == b else [f"{where}: {a!r:.80} != {b!r:.80}"]


def _load(directory: Path, name: str) -> Any:
    """A ``*.pt`` file's payload, or a DCP component directory's full state (every rank's
    shards, read and digest-checked by
    :class:`~statecraft.writers.dcp_store_reader.StoreStorageReader`)."""
    if name.endswith(".pt"):
        return torch.load(directory / name, weights_only=True, map_location="cpu")
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    from statecraft.storage.local import LocalStore
    from statecraft.writers.dcp_store_reader import StoreStorageReader

    state: dict[str, Any] = {}
    _load_state_dict(
        state,
        storage_reader=StoreStorageReader(LocalStore(str(directory.resolve())), name),
        planner=_EmptyStateDictLoadPlanner(),
        no_dist=True,
    )
    return state


def compare_checkpoints(a_dir: str | os.PathLike[str], b_dir: str | os.PathLike[str]) -> list[str]:
    """Every difference between the payloads of two checkpoint directories; empty = identical.

    Each ``*.pt`` file (``model.pt``, ``optim.pt``, ``trainer.pt``, ``data.pt``) is loaded with
    ``weights_only=True``, and each DCP component directory (``model/``, ``optim/``: one with a
    ``.metadata``) into its full state, and walked: tensors must agree in dtype, shape and
    every bit (so NaN equals the same NaN and ``-0.0`` differs from ``0.0``); every other value
    in type and value (``1`` differs from ``1.0``). The manifest is not compared: it records
    digests of bytes, and identical state is what exact resume promises.

    Args:
        a_dir: an ``iter_*`` directory (the reference).
        b_dir: another one (the candidate).

    Returns:
        Lines like ``"optim.pt: state.0.exp_avg: 1 of 8192 elements differ (...)"`` or
        ``"trainer.pt: attempt_id: 12 != 13"``; a missing directory or file, or one that does
        not load, is a difference too.

    Example:
        >>> compare_checkpoints(ref / "iter_000000060", run / "iter_000000060")
        []
    """
    dirs = (Path(a_dir), Path(b_dir))
    missing = [f"{d}: not a directory" for d in dirs if not d.is_dir()]
    if missing:
        return missing
    names = [{p.name for p in d.glob("*.pt")} for d in dirs]
    out = [
        f"{n}: only in {dirs[i]}" for i, j in ((0, 1), (1, 0)) for n in sorted(names[i] - names[j])
    ]
    if not names[0] | names[1]:
        out.append(f"no *.pt files in {dirs[0]} or {dirs[1]}")
    components = [{p.parent.name for p in d.glob("*/.metadata")} for d in dirs]
    out += [
        f"{n}/: only in {dirs[i]}"
        for i, j in ((0, 1), (1, 0))
        for n in sorted(components[i] - components[j])
    ]
    for name in sorted(names[0] & names[1]) + sorted(components[0] & components[1]):
        payloads = []
        for d in dirs:
            try:
                payloads.append(_load(d, name))
            except Exception as exc:  # an unloadable file is a difference, not a crash
                out.append(f"{name}: {d / name} does not load ({type(exc).__name__}: {exc})")
        if len(payloads) == 2:
            first, second = payloads
            out.extend(f"{name}: {line}" for line in _differences(first, second, ""))
    return out
