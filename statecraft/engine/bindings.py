"""Bindings: the names a table uses, bound to callables.

A table names effects, guards and its observation by string; a :class:`Bindings` maps those
names to callables taking the transaction's context object. The checkpoint package builds
one ``Bindings`` per machine; the crash harness runs the very same bindings over simulated
stores.

Call contract:
    - ``effect(ctx) -> None`` performs I/O; it may raise (the table's ``on_error`` decides).
    - ``guard(ctx) -> bool`` must not perform writes.
    - ``observe(ctx) -> str`` classifies durable storage into one observation label.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any

import attrs

__all__ = ["Bindings", "Context", "Effect", "Guard", "Observer", "Role"]

#: The context object of one transaction, handed unchanged to every effect, guard and
#: observation. ``Any`` on purpose: each machine has its own context class (``SaveContext``,
#: ``ResumeContext``, ...) and its bindings declare that one, while the engine never looks
#: inside it (it takes it as ``object``).
Context = Any

Effect = Callable[[Context], None]
Guard = Callable[[Context], bool]
Observer = Callable[[Context], str]


class Role(enum.Enum):
    """Which ranks run an effect (tagged with ``@effect(role=...)``,
    :mod:`statecraft.engine.tagging`)."""

    COORDINATOR = "coordinator"
    EVERY_RANK = "every_rank"


@attrs.frozen
class Bindings:
    """Callables bound to the names used in one or more tables."""

    effects: Mapping[str, Effect] = attrs.field(factory=dict)
    guards: Mapping[str, Guard] = attrs.field(factory=dict)
    observers: Mapping[str, Observer] = attrs.field(factory=dict)
    #: effect name -> its :class:`Role`; an effect without an entry runs on the coordinator.
    roles: Mapping[str, Role] = attrs.field(factory=dict)

    def merged(self, other: Bindings) -> Bindings:
        """A new ``Bindings`` with ``other``'s entries overriding this one's (used by tests to
        swap one effect for a deliberately broken variant)."""
        return Bindings(
            effects={**self.effects, **other.effects},
            guards={**self.guards, **other.guards},
            observers={**self.observers, **other.observers},
            roles={**self.roles, **other.roles},
        )
