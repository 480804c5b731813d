"""The isolation proof of an async save's snapshot (:func:`isolation_problem`), and the key
paths that name a value inside a payload or a live object in messages.

A snapshot may be written on a background thread only if nothing in it can change while
training goes on: every tensor a dense CPU tensor whose storage overlaps no storage reachable
from the live model, optimizer, scheduler, trainer, data, stateful or loop state, and no
container of it a live object. :class:`~statecraft.checkpoint.async_writes.staging.StagingBuffers`
makes
such snapshots; this module checks them, independently of how they were made.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import json
import threading
import types
from collections.abc import Iterator, Mapping
from typing import Any

import attrs
import torch

from statecraft.checkpoint.async_writes.snapshot import Snapshot

__all__ = ["Attr", "KeyPath", "format_path", "isolation_problem"]

KeyPath = tuple[Any, ...]


def format_path(root: str, path: KeyPath) -> str:
    """``model.pt["weight"]``, ``optim.pt["state"][0]["exp_avg"]``, ``scheduler.last_epoch``."""
    out = [root]
    for key in path:
        if isinstance(key, Attr):
            out.append(f".{key.name}")
        else:
            out.append(f"[{_key_text(key)}]")
    return "".join(out)


def _key_text(key: Any) -> str:
    if isinstance(key, str):
        return json.dumps(key)
    if isinstance(key, int | float | bool | type(None)):
        return repr(key)
    return type(key).__name__


@attrs.frozen
class Attr:
    """An attribute step in a key path (``.name``), apart from a mapping key."""

    name: str


def isolation_problem(snapshot: Snapshot, live: Mapping[str, Any]) -> str | None:
    """Whether ``snapshot`` is safe to write while training goes on.

    Args:
        snapshot: the staged copy.
        live: name -> a live object (a module, an optimizer, a scheduler, the trainer or
            data state, a state dict). Walked through tensors, mappings, lists, tuples,
            sets, attrs and dataclass fields and object attributes; a module through its
            parameters and buffers (named as in its state dict), an optimizer through its
            state dict and parameter groups.

    Returns:
        ``None`` when every tensor of the snapshot is a dense CPU tensor whose storage
        overlaps no storage reachable from ``live`` and no container of the snapshot is a
        live object; else one line naming the first failing key path and why, e.g.
        ``model.pt["weight"] shares storage with live model["weight"]``.
    """
    ranges = _LiveRanges(live)
    for name, payload in snapshot.payloads.items():
        for path, obj in _walk_snapshot(payload, ()):
            if isinstance(obj, torch.Tensor):
                if obj.device.type != "cpu":
                    return f"{format_path(name, path)} is on {obj.device}, not the CPU"
                if obj.layout != torch.strided or obj.is_quantized or obj.is_nested:
                    return f"{format_path(name, path)} is not a dense tensor ({obj.layout})"
                culprit = ranges.overlap(obj)
                if culprit is not None:
                    return f"{format_path(name, path)} shares storage with live {culprit}"
            elif id(obj) in ranges.objects:
                live_path = format_path(*ranges.objects[id(obj)])
                return f"{format_path(name, path)} is the live object {live_path} itself"
    return None


def _walk_snapshot(obj: Any, path: KeyPath) -> Iterator[tuple[KeyPath, Any]]:
    """Every tensor and mutable container of a snapshot payload, with its key path."""
    if isinstance(obj, torch.Tensor):
        yield path, obj
        return
    if isinstance(obj, dict):
        yield path, obj
        for k, v in obj.items():
            yield from _walk_snapshot(v, (*path, k))
    elif isinstance(obj, list | tuple):
        if isinstance(obj, list):
            yield path, obj
        for i, v in enumerate(obj):
            yield from _walk_snapshot(v, (*path, i))
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        yield path, obj


_LEAVES = (str, bytes, int, float, complex, bool, type(None), torch.dtype, torch.device)
_SKIPPED = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.CodeType,
    threading.Thread,
)


class _LiveRanges:
    """The storage byte ranges (and mutable objects) reachable from the live objects."""

    def __init__(self, live: Mapping[str, Any]) -> None:
        # key paths are formatted only for the message of a failure
        self.objects: dict[int, tuple[str, KeyPath]] = {}
        self._found: dict[tuple[str, int, int], tuple[str, KeyPath]] = {}  # -> (root, path)
        self._seen: set[int] = set()
        self._keep: list[Any] = []  # temporaries walked (an optimizer's state dict) stay alive
        for name, obj in live.items():
            self._walk(obj, name, (), depth=0)
        self._sorted: dict[str, list[tuple[int, int, tuple[str, KeyPath]]]] = {}
        for (device, start, end), where in self._found.items():
            self._sorted.setdefault(device, []).append((start, end, where))
        self._starts: dict[str, list[int]] = {}
        self._max_end: dict[str, list[int]] = {}
        for device, rows in self._sorted.items():
            rows.sort(key=lambda r: (r[0], r[1]))
            self._starts[device] = [r[0] for r in rows]
            self._max_end[device] = list(itertools.accumulate((r[1] for r in rows), max))

    def overlap(self, t: torch.Tensor) -> str | None:
        """The live path of a storage overlapping ``t``'s storage, or ``None``."""
        storage = t.untyped_storage()
        start, end = storage.data_ptr(), storage.data_ptr() + storage.nbytes()
        device = str(t.device)
        if start == end or device not in self._sorted:
            return None
        rows = self._sorted[device]
        i = bisect.bisect_left(self._starts[device], end) - 1  # rows[0..i] start before end
        if i < 0 or self._max_end[device][i] <= start:
            return None
        while rows[i][1] <= start:
            i -= 1
        return format_path(*rows[i][2])

    def _walk(self, obj: Any, root: str, path: KeyPath, *, depth: int) -> None:
        if isinstance(obj, _LEAVES) or depth > 64:
            return
        if isinstance(obj, torch.Tensor):
            if obj.layout == torch.strided and not obj.is_nested and obj.device.type != "meta":
                storage = obj.untyped_storage()
                start = storage.data_ptr()
                if storage.nbytes():
                    key = (str(obj.device), start, start + storage.nbytes())
                    self._found.setdefault(key, (root, path))
            return
        if id(obj) in self._seen or isinstance(obj, _SKIPPED):
            return
        self._seen.add(id(obj))
        step = depth + 1
        if isinstance(obj, torch.nn.Module):
            state = obj.state_dict(keep_vars=True)
            self._keep.append(state)
            for name, value in state.items():
                self._walk(value, root, (*path, name), depth=step)
            return
        if isinstance(obj, torch.optim.Optimizer):
            state = obj.state_dict()
            self._keep.append(state)
            self._walk(state, root, path, depth=step)
            for g, group in enumerate(obj.param_groups):
                for i, p in enumerate(group["params"]):
                    self._walk(p, root, (*path, "param_groups", g, "params", i), depth=step)
            return
        self.objects.setdefault(id(obj), (root, path))
        if isinstance(obj, Mapping):
            for k, v in list(obj.items()):
                self._walk(v, root, (*path, k), depth=step)
        elif isinstance(obj, list | tuple | set | frozenset):
            for i, v in enumerate(list(obj)):
                self._walk(v, root, (*path, i), depth=step)
        elif attrs.has(type(obj)):
            for field in attrs.fields(type(obj)):
                value = getattr(obj, field.name, None)
                self._walk(value, root, (*path, Attr(field.name)), depth=step)
        elif dataclasses.is_dataclass(obj):
            for dfield in dataclasses.fields(obj):
                value = getattr(obj, dfield.name, None)
                self._walk(value, root, (*path, Attr(dfield.name)), depth=step)
        elif hasattr(obj, "__dict__"):
            for k, v in list(vars(obj).items()):
                self._walk(v, root, (*path, Attr(k)), depth=step)
