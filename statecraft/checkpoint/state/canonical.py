"""Canonical payloads: the bytes of a control file are a function of its content.

``torch.save`` writes what the pickle protocol sees, and that is more than the content: the
insertion order of a ``dict`` (two equal dicts pickle differently when their keys were inserted
in another order, e.g. a scheduler whose attributes were set in another order after a resume),
whether two equal strings or containers are one object (pickle writes the second occurrence of
an object as a back-reference, of an equal but distinct one in full), and which storage a tensor
views (a view saves its whole storage; two tensors sharing one save it once). None of that is
state, and all of it can differ between an interrupted and an uninterrupted run that reach the
same state, so a checkpoint could not be compared by digest.

:func:`canonical` returns an equal copy with none of it: plain dicts with their keys sorted
(when they are all strings or all integers), every list, tuple and dict rebuilt (never shared),
every string interned (equal strings are one object), every tensor a fresh compact clone.
``trainer.pt`` and ``data.pt`` are written from it (their top-level keys in the fixed order
the code builds them, every value canonical)
(:meth:`~statecraft.checkpoint.state.TrainerState.to_payload`,
:meth:`~statecraft.checkpoint.state.DataState.to_payload`), so the same state gives the same
bytes and the same digest. ``model.pt`` and ``optim.pt`` are the tracked objects'
``state_dict()`` as they return it (an ``OrderedDict`` whose order is part of its content,
tensors written in place, never copied: copying them would double a bulk save's memory); they
are already a function of that ``state_dict``.

Example:
    >>> canonical({"b": 1, "a": [1, 2]}) == {"a": [1, 2], "b": 1}
    True
    >>> list(canonical({"b": 1, "a": 2}))
    ['a', 'b']
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from typing import Any

import torch

__all__ = ["canonical"]


def _sorted_items(value: dict[Any, Any]) -> list[tuple[Any, Any]]:
    """``value``'s items by key when its keys are all strings or all integers (equal dicts
    then list them alike); otherwise in insertion order (no total order to impose)."""
    keys = list(value)
    if all(type(k) is str for k in keys) or all(type(k) is int for k in keys):
        return sorted(value.items(), key=lambda item: item[0])
    return list(value.items())


def canonical(value: Any) -> Any:
    """An equal copy of ``value`` whose pickled bytes depend only on its content (see the
    module docstring). Values of other types (numbers, ``None``, bytes, custom objects that
    :func:`~statecraft.checkpoint.state.require_safe` refuses anyway) are returned as they
    are; an ``OrderedDict`` keeps its order (it is part of its equality)."""
    kind = type(value)
    if kind is dict:
        return {canonical(k): canonical(v) for k, v in _sorted_items(value)}
    if kind is OrderedDict:
        return OrderedDict((canonical(k), canonical(v)) for k, v in value.items())
    if kind is list:
        return [canonical(v) for v in value]
    if kind is tuple:
        return tuple(canonical(v) for v in value)
    if kind is str:
        return sys.intern(value)
    if kind is torch.Tensor and not value.requires_grad:
        return value.detach().clone()
    return value
