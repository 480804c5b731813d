"""Staging buffers for asynchronous saves: a CPU copy of the produced payloads, and the proof
that the copy is isolated from the live training state.

Call order (the training thread, once per async save of a trainer role):

1. join the role's previous write
   (:meth:`~statecraft.checkpoint.async_writes.write_slot.WriteSlot.join`):
   the buffers are reused, so they must not be snapshotted again while a write reads them;
2. produce the payloads (``state_dict()``, the trainer payload, the data payload);
3. :meth:`StagingBuffers.snapshot` copies every tensor with ``copy_`` into the role's
   buffers (allocated on the first save, reused from the second on) and rebuilds the
   containers around them; anything it cannot copy this way raises
   :class:`SnapshotUnsupported` (the caller writes synchronously and logs the reason);
4. :func:`isolation_problem` proves the snapshot CPU-only and sharing no storage with the
   live objects; a problem is a reason to write synchronously;
5. the write job serializes ``snapshot.payloads`` on the background slot.

Tensors are copied storage by storage: every live storage a payload file reaches gets one
CPU buffer of its size, and each tensor becomes a view of that buffer with the live tensor's
offset, shape and strides. Tensors that shared a storage (tied weights, views) still share
one in the copy, so ``torch.save`` writes the same records a synchronous save of the live
objects would.
"""

from __future__ import annotations

import copy
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import torch

from statecraft.checkpoint.async_writes.isolation import (
    Attr,
    KeyPath,
    format_path,
    isolation_problem,
)
from statecraft.checkpoint.async_writes.snapshot import Snapshot, SnapshotUnsupported

__all__ = ["Snapshot", "SnapshotUnsupported", "StagingBuffers", "isolation_problem"]


def _unsupported_tensor(t: torch.Tensor) -> str | None:
    """Why ``t`` cannot be staged by a storage copy, or ``None``."""
    if type(t) not in (torch.Tensor, torch.nn.Parameter):
        return f"is a tensor subclass ({type(t).__qualname__})"
    if t.is_quantized:
        return "is a quantized tensor"
    if t.is_nested:
        return "is a nested tensor"
    if t.layout != torch.strided:
        return f"is a sparse tensor (layout {t.layout})"
    if t.device.type == "meta":
        return "is a meta tensor (it holds no data)"
    if t.is_conj() or t.is_neg():
        return "carries a lazy conjugate/negative bit"
    return None


class StagingBuffers:
    """The reused CPU staging buffers of one trainer role.

    One buffer per live storage, keyed by (file name, key path of the first tensor that
    reached it), kept across calls and re-allocated only when its size changes (a new shape,
    dtype or layout); buffers no longer reached are released. The staged tensors (typed views
    of the buffers) are kept too, per key path, and rebuilt when the live tensor's type,
    dtype, offset, shape, strides or ``requires_grad`` changed or its buffer was replaced;
    the bytes are copied from the live tensors on every call (a tensor covering its storage
    with one typed ``copy_``, any other storage as raw bytes). Buffers for GPU tensors are
    pinned (the device-to-host copies are issued non-blocking and synchronized once).

    Not thread-safe, and the previous snapshot's tensors are overwritten by the next call:
    join the write that reads a snapshot before taking the next one.

    Example::

        staging = StagingBuffers()
        snap = staging.snapshot({"model.pt": model.state_dict()})
        assert isolation_problem(snap, {"model": model}) is None
    """

    def __init__(self) -> None:
        self._buffers: dict[tuple[str, KeyPath], torch.Tensor] = {}
        # key path -> (layout of the live tensor, the buffer viewed, the staged tensor)
        self._views: dict[tuple[str, KeyPath], tuple[tuple[Any, ...], torch.Tensor, Any]] = {}
        self._run_viewed: set[tuple[str, KeyPath]] = set()
        self.reused = 0
        """Buffers reused instead of allocated, over every snapshot."""
        self.views_reused = 0
        """Staged tensors (views of the buffers) reused instead of rebuilt."""

    def __repr__(self) -> str:
        return (
            f"StagingBuffers(buffers={len(self._buffers)}, "
            f"allocated_bytes={self.allocated_bytes}, reused={self.reused})"
        )

    @property
    def allocated_bytes(self) -> int:
        """Bytes held by the staging buffers now."""
        return sum(b.numel() for b in self._buffers.values())

    def snapshot(self, payloads: Mapping[str, Any]) -> Snapshot:
        """Copy the produced ``payloads`` into the staging buffers.

        Args:
            payloads: file name -> produced object (a state dict, the trainer payload, the
                data payload). Dicts, ``OrderedDict`` (with its ``_metadata``), lists, tuples
                and named tuples are rebuilt; dense CPU/GPU tensors and ``nn.Parameter`` are
                copied into buffers; every other leaf is ``copy.deepcopy``'d.

        Returns:
            The :class:`Snapshot`; its tensors are CPU tensors in this object's buffers.

        Raises:
            SnapshotUnsupported: a sparse, quantized, nested or meta tensor, a tensor
                subclass, or a leaf ``copy.deepcopy`` refuses; ``reason`` names the key path.
                The buffers already filled stay allocated; the live objects are untouched.
        """
        started = time.perf_counter()
        run = _Run(self, grad_enabled=torch.is_grad_enabled())
        self._run_viewed = set()
        with torch.no_grad():  # copy_ from a parameter must not record autograd history
            out = {name: run.copy(obj, name, ()) for name, obj in payloads.items()}
        for device in run.devices:
            torch.cuda.synchronize(device)
        for key in set(self._buffers) - run.used:
            del self._buffers[key]
        for path_key in set(self._views) - self._run_viewed:
            del self._views[path_key]
        return Snapshot(
            payloads=out,
            tensor_bytes=run.tensor_bytes,
            allocated_bytes=run.allocated,
            seconds=time.perf_counter() - started,
        )

    def _buffer(self, key: tuple[str, KeyPath], nbytes: int, *, pinned: bool) -> torch.Tensor:
        """The uint8 buffer for ``key``: the kept one when its size fits, else a new one."""
        held = self._buffers.get(key)
        if held is not None and held.numel() == nbytes and held.is_pinned() == pinned:
            self.reused += 1
            return held
        fresh = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
        self._buffers[key] = fresh
        return fresh

    def _staged_view(self, key: tuple[str, KeyPath], t: torch.Tensor, buf: torch.Tensor) -> Any:
        """The staged tensor of the live ``t`` at ``key``: a view of ``buf`` with ``t``'s
        dtype, offset, shape, strides, type and ``requires_grad``. Kept across snapshots and
        rebuilt when any of these changed or ``buf`` is not the buffer it views (a resized or
        re-tied storage); the bytes are always copied from the live tensor of this call, so
        a replaced parameter (a new object, or ``param.data = new``) is staged with its new
        bytes."""
        self._run_viewed.add(key)
        layout = (type(t), t.dtype, t.storage_offset(), t.size(), t.stride(), t.requires_grad)
        held = self._views.get(key)
        if held is not None and held[0] == layout and held[1] is buf:
            self.views_reused += 1
            return held[2]
        view = torch.empty(0, dtype=t.dtype).set_(
            buf.untyped_storage(), t.storage_offset(), t.size(), t.stride()
        )
        staged: torch.Tensor
        if type(t) is torch.nn.Parameter:  # isinstance goes through a slow metaclass hook
            staged = torch.nn.Parameter(view, requires_grad=t.requires_grad)
        else:
            staged = view.requires_grad_(True) if t.requires_grad else view
        self._views[key] = (layout, buf, staged)
        return staged


_IMMUTABLE = frozenset(
    {str, bytes, int, float, complex, bool, type(None), torch.dtype, torch.device, torch.Size}
)


class _Run:
    """One :meth:`StagingBuffers.snapshot` call: the storage memo of each file, counters."""

    def __init__(self, owner: StagingBuffers, *, grad_enabled: bool) -> None:
        self.owner = owner
        self.grad_enabled = grad_enabled  # the caller's grad mode (the copy runs in no_grad)
        self.used: set[tuple[str, KeyPath]] = set()
        self.memo: dict[tuple[str, torch.device, int], torch.Tensor] = {}  # (file, device, ptr)
        self.devices: set[torch.device] = set()
        self.tensor_bytes = 0
        self.allocated = 0

    def copy(self, obj: Any, name: str, path: KeyPath) -> Any:
        if type(obj) in _IMMUTABLE:  # deepcopy would return the object itself, only slower
            return obj
        if isinstance(obj, torch.Tensor):
            return self.tensor(obj, name, path)
        if type(obj) is dict:
            return {k: self.copy(v, name, (*path, k)) for k, v in obj.items()}
        if isinstance(obj, OrderedDict) and type(obj).__init__ is OrderedDict.__init__:
            rebuilt = type(obj)((k, self.copy(v, name, (*path, k))) for k, v in obj.items())
            if getattr(obj, "__dict__", None):  # a state_dict's _metadata (module versions)
                rebuilt.__dict__.update(self.leaf(obj.__dict__, name, (*path, Attr("__dict__"))))
            return rebuilt
        if type(obj) is list:
            return [self.copy(v, name, (*path, i)) for i, v in enumerate(obj)]
        if type(obj) is tuple:
            return tuple(self.copy(v, name, (*path, i)) for i, v in enumerate(obj))
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a named tuple
            return type(obj)(*(self.copy(v, name, (*path, i)) for i, v in enumerate(obj)))
        return self.leaf(obj, name, path)

    def leaf(self, obj: Any, name: str, path: KeyPath) -> Any:
        try:  # a leaf's own __deepcopy__ runs in the caller's grad mode, not the copy's
            with torch.set_grad_enabled(self.grad_enabled):
                return copy.deepcopy(obj)
        except Exception as exc:
            raise SnapshotUnsupported(
                f"{format_path(name, path)} ({type(obj).__qualname__}) cannot be deep-copied: "
                f"{type(exc).__name__}: {exc}"
            ) from None

    def tensor(self, t: torch.Tensor, name: str, path: KeyPath) -> torch.Tensor:
        problem = _unsupported_tensor(t)
        if problem is not None:
            raise SnapshotUnsupported(f"{format_path(name, path)} {problem}")
        storage = t.untyped_storage()
        device = t.device
        memo_key = (name, device, storage.data_ptr())
        buf = self.memo.get(memo_key)
        if buf is None:
            key = (name, path)
            self.used.add(key)
            nbytes = storage.nbytes()
            on_cuda = device.type == "cuda"
            before = self.owner.reused
            buf = self.owner._buffer(key, nbytes, pinned=on_cuda)
            if self.owner.reused == before:
                self.allocated += nbytes
            staged = self.owner._staged_view(key, t, buf)
            if t.storage_offset() == 0 and t.is_contiguous() and t.nbytes == nbytes:
                # the tensor covers its storage: a typed copy_, the floor's own call
                staged.copy_(t, non_blocking=on_cuda)
            else:  # a view of a larger storage (or gaps): copy the whole storage as bytes
                source = torch.empty(0, dtype=torch.uint8, device=device).set_(storage)
                buf.copy_(source, non_blocking=on_cuda)
            if on_cuda:
                self.devices.add(device)
            self.memo[memo_key] = buf
            self.tensor_bytes += nbytes
            return staged
        return self.owner._staged_view((name, path), t, buf)
