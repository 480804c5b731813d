"""Save-time safety: find every value that ``torch.load(weights_only=True)`` cannot read back.

Every checkpoint file is read with ``weights_only=True``, so a value the weights-only unpickler
refuses (a NumPy scalar, a ``set`` on an older torch, a custom class, a lambda) commits fine and
then fails every resume. :func:`unsafe_paths` walks a value the way the unpickler would rebuild
it and names each such value by its key path, its type and what to convert it to;
:func:`require_safe` turns them into one :class:`~statecraft.errors.UnsafeStateError` before a
save writes anything.

What is allowed follows the running torch's own allowlist
(``torch._weights_only_unpickler._get_allowed_globals()``) plus the classes registered with
``torch.serialization.add_safe_globals``: ``None``, ``bool``, ``int``, ``float``, ``str``,
``bytes``, and where torch allows them ``complex``, ``bytearray``, ``set``; ``dict``,
``OrderedDict``, ``Counter``, ``list``, ``tuple`` (their exact types: a subclass pickles as its
class); plain tensors and ``Parameter`` (sparse, quantized, meta included), ``torch.Size``,
``torch.device``, dtypes, layouts and quantization schemes.

Cost: one type check per leaf, containers of scalars checked in one pass; a state of a few
hundred tensors (the size in bytes does not matter) is checked in well under a millisecond.

Example:
    >>> import numpy as np
    >>> unsafe_paths({"pos": 3, "lr": np.float64(0.1)}, "data")
    ['data["lr"]: numpy.float64 -- convert with float(x) (or x.item())']
"""

from __future__ import annotations

import enum
import functools
import json
import types
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch

from statecraft.errors import UnsafeStateError

__all__ = ["require_safe", "unsafe_paths"]


@functools.cache
def _torch_allowed() -> frozenset[str]:
    """The global names torch's weights-only unpickler allows by default (its private table;
    a conservative floor when this torch does not have it)."""
    try:
        from torch._weights_only_unpickler import _get_allowed_globals

        return frozenset(_get_allowed_globals())
    except (ImportError, AttributeError):  # pragma: no cover - older or newer torch
        return frozenset({"collections.OrderedDict", "torch.Size", "torch.device"})


def _user_allowed() -> tuple[type, ...]:
    """Classes registered with ``torch.serialization.add_safe_globals`` (read on every call:
    a program may register more at any time)."""
    try:
        registered = torch.serialization.get_safe_globals()
    except AttributeError:  # pragma: no cover - torch < 2.5
        return ()
    out = []
    for item in registered:
        obj = item[0] if isinstance(item, tuple) else item
        if isinstance(obj, type):
            out.append(obj)
    return tuple(out)


@functools.cache
def _leaf_types() -> frozenset[type]:
    """Exact types that load back as themselves and hold nothing to walk."""
    allowed = _torch_allowed()
    leaves: set[type] = {
        type(None),
        bool,
        int,
        float,
        str,
        torch.dtype,
        torch.layout,
        torch.qscheme,
    }
    optional = {
        "builtins.complex": complex,
        "_codecs.encode": bytes,
        "builtins.bytearray": bytearray,
        "torch.device": torch.device,
        "torch.Size": torch.Size,
    }
    leaves |= {kind for name, kind in optional.items() if name in allowed}
    return frozenset(leaves)


@functools.cache
def _mapping_types() -> frozenset[type]:
    allowed = _torch_allowed()
    kinds: set[type] = {dict}
    if "collections.OrderedDict" in allowed:
        kinds.add(OrderedDict)
    if "collections.Counter" in allowed:
        kinds.add(Counter)
    return frozenset(kinds)


@functools.cache
def _sequence_types() -> frozenset[type]:
    kinds: set[type] = {list, tuple}
    if "builtins.set" in _torch_allowed():
        kinds.add(set)
    return frozenset(kinds)


def _type_name(value: Any) -> str:
    kind = type(value)
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


def _hint(value: Any) -> str:
    """What to turn ``value`` into so that it saves and loads (the tail of one line)."""
    if isinstance(value, np.ndarray):
        return "convert with torch.from_numpy(x) (or x.tolist())"
    if isinstance(value, np.generic):
        for kind, call in ((np.bool_, "bool"), (np.integer, "int"), (np.floating, "float")):
            if isinstance(value, kind):
                return f"convert with {call}(x) (or x.item())"
        return "convert with x.item()"
    if isinstance(value, enum.Enum):
        return "save x.value or x.name and rebuild the member on load"
    if isinstance(value, torch.Tensor):
        return (
            "convert with x.as_subclass(torch.Tensor), or register the class with "
            "torch.serialization.add_safe_globals([...]) in every process that loads"
        )
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return "convert with tuple(x) or x._asdict()"
    for base, call in (
        (bool, "bool"),
        (int, "int"),
        (float, "float"),
        (str, "str"),
        (dict, "dict"),
        (list, "list"),
        (tuple, "tuple"),
    ):
        if isinstance(value, base):
            return f"convert with {call}(x)"
    if isinstance(value, set | frozenset):
        return "convert with sorted(x) (or list(x))"
    if isinstance(value, range | slice):
        return "save its (start, stop, step) as a tuple"
    if isinstance(value, types.FunctionType | types.BuiltinFunctionType | types.MethodType | type):
        return (
            "a function or class cannot be saved weights_only; save the data it computes, or "
            "a name to look it up by"
        )
    return (
        "save its state_dict() or a dict of plain values instead, or register the class with "
        "torch.serialization.add_safe_globals([...]) in every process that loads"
    )


def _segment(key: Any) -> str:
    """One step of a key path: ``["name"]`` for a str key, ``[3]`` for an int."""
    if type(key) is str:
        return f"[{json.dumps(key, ensure_ascii=False)}]"
    if type(key) in (int, bool) or key is None or type(key) in _leaf_types():
        return f"[{key!r}]"
    return f"[<key {key!r}>]"


def unsafe_paths(value: Any, root: str) -> list[str]:
    """Every key path under ``value`` whose value ``torch.load(weights_only=True)`` cannot
    load back, one line each: ``<path>: <type> -- <what to convert it to>``.

    Args:
        value: what would be passed to ``torch.save`` (a state dict, the loop state).
        root: the name of ``value`` in the lines (``"data"``, ``"loop_state"``).

    Returns:
        The lines, in walk order (dict order, then list order); empty when ``value`` is safe.
        A shared or cyclic container is walked once.

    Example:
        >>> unsafe_paths({"steps": {1, 2}, "fn": len}, "loop_state")[-1]
        'loop_state["fn"]: builtin_function_or_method -- a function or class cannot be saved ...'
    """
    walker = _Walker(root)
    walker.walk(value)
    return walker.found


class _Step(str):
    """A path step printed as is (an attribute, a set member), not as a ``[key]``."""

    @property
    def text(self) -> str:
        return str(self)


class _Walker:
    """One walk: the allowed types read once, the key path kept as segments and formatted
    only for a finding (a safe state costs one type check per leaf)."""

    def __init__(self, root: str) -> None:
        self.leaves = _leaf_types()
        self.mappings = _mapping_types()
        self.sequences = _sequence_types()
        self.registered = frozenset(_user_allowed())
        self.tensors = frozenset({torch.Tensor, torch.nn.Parameter}) | self.registered
        self.path: list[Any] = [root]  # the root, then keys (formatted by _segment) or str steps
        self.seen: set[int] = set()
        self.found: list[str] = []

    def report(self, value: Any, suffix: str = "") -> None:
        root, *steps = self.path
        where = root + "".join(s.text if isinstance(s, _Step) else _segment(s) for s in steps)
        self.found.append(f"{where}{suffix}: {_type_name(value)} -- {_hint(value)}")

    def child(self, segment: Any, value: Any) -> None:
        self.path.append(segment)
        self.walk(value)
        self.path.pop()

    def walk(self, value: Any) -> None:
        kind = type(value)
        if kind in self.leaves:
            return
        if isinstance(value, torch.Tensor):
            if kind not in self.tensors:
                self.report(value)
            attributes = getattr(value, "__dict__", None)
            for name, item in (attributes or {}).items():
                self.child(_Step(f".{name}"), item)
            return
        if kind in self.mappings or kind in self.sequences or kind in self.registered:
            if id(value) in self.seen:
                return
            self.seen.add(id(value))
            if kind in self.mappings:
                self.walk_mapping(value)
            elif kind in self.sequences:
                self.walk_items(value, ordered=kind is not set)
            else:
                for name, item in getattr(value, "__dict__", {}).items():
                    self.child(_Step(f".{name}"), item)
            return
        self.report(value)

    def walk_mapping(self, value: Mapping[Any, Any]) -> None:
        leaves = self.leaves
        plain = leaves | self.tensors
        # a state_dict of plain tensors and scalars: only a tensor attribute could hide
        # something, checked without building a path
        if (
            set(map(type, value)) <= leaves
            and set(map(type, value.values())) <= plain
            and not any(
                getattr(v, "__dict__", None) for v in value.values() if type(v) not in leaves
            )
        ):
            return
        for key, item in value.items():
            if type(key) not in leaves:
                self.path.append(key)
                if isinstance(key, tuple):
                    self.child(_Step(" (a key)"), key)
                else:
                    self.report(key, " (a key)")
                self.path.pop()
            if type(item) not in leaves:
                self.child(key, item)

    def walk_items(self, value: Iterable[Any], *, ordered: bool) -> None:
        items = list(value)
        if set(map(type, items)) <= self.leaves:  # the common case, checked in one pass
            return
        for i, item in enumerate(items):
            self.child(i if ordered else _Step(f"{{{item!r:.40}}}"), item)


def require_safe(sections: Mapping[str, Any], *, action: str, found: Iterable[str] = ()) -> None:
    """Refuse, before anything is written, when any section holds an unloadable value.

    Args:
        sections: root name -> value (``{"loop_state": ..., "stateful": ...}``), each walked
            with :func:`unsafe_paths`.
        action: what is refused, for the message (``"save iteration 4"``).
        found: lines already found elsewhere (every rank's data state, checked on its rank).

    Raises:
        UnsafeStateError: listing every line; fields ``paths`` (the lines) and ``problems``.
    """
    lines = list(found)
    for root, value in sections.items():
        lines += unsafe_paths(value, root)
    if not lines:
        return
    listed = "\n".join(f"  - {line}" for line in lines)
    raise UnsafeStateError(
        f"cannot {action}: {len(lines)} value(s) would be saved but "
        f"torch.load(weights_only=True) cannot read them back, so every resume from this "
        f"checkpoint would fail:\n{listed}\nNothing was written. Convert each value as "
        "shown (or keep it out of the saved state) and save again",
        source=action,
        problems=lines,
        paths=[line.split(": ", 1)[0] for line in lines],
    )
