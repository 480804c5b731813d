"""Tag effects, guards and observations where they are defined; collect them into bindings.

A bindings module of a transaction defines plain functions taking the transaction's context
and tags each with the name its table uses::

    @effect("write_components", role=Role.COORDINATOR)
    def write_components(ctx: SaveContext) -> None: ...

    @guard("has_candidate")
    def has_candidate(ctx: ResumeContext) -> bool: ...

    @observer("observe_save")
    def observe_save(ctx: SaveContext) -> str: ...

The decorators only tag (they return the function unchanged, so it stays directly callable
and testable); :func:`collect_bindings` walks a module or namespace once and builds the
:class:`~statecraft.engine.bindings.Bindings` (like hypothesis' rule collector). A name bound
twice is a definition error naming both definitions.

Roles say which ranks run an effect under ``torch.distributed``:

- ``Role.COORDINATOR``: rank 0 runs it; its outcome (ok or the error) is broadcast so every
  rank takes the same transition.
- ``Role.EVERY_RANK``: every rank runs it (its own shards, loading into its own objects).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar, cast

import attrs

from statecraft.engine.bindings import Bindings, Effect, Guard, Observer, Role
from statecraft.errors import MachineDefinitionError

__all__ = ["Role", "Tag", "collect_bindings", "effect", "guard", "observer", "tag_of"]

#: a tagged callable, returned unchanged (of any signature: the table's static checks, not the
#: type checker, match it to its kind)
F = TypeVar("F", bound=Callable[..., object])

_TAG_ATTRIBUTE = "__statecraft_tag__"


@attrs.frozen
class Tag:
    """What a decorator recorded on a function: its kind, table name and role."""

    kind: str  # "effect" | "guard" | "observer"
    name: str
    role: Role = Role.COORDINATOR


def _tagger(kind: str, name: str | None, role: Role) -> Callable[[F], F]:
    if name is not None and (not isinstance(name, str) or not name.isidentifier()):
        raise MachineDefinitionError(
            f"@{kind}", [f"name {name!r} must be an identifier, as the table spells it"]
        )
    if not isinstance(role, Role):
        raise MachineDefinitionError(f"@{kind}", [f"role {role!r} must be a Role member"])

    def tag(function: F) -> F:
        if not callable(function):
            raise MachineDefinitionError(f"@{kind}", [f"{function!r} is not callable"])
        setattr(function, _TAG_ATTRIBUTE, Tag(kind, name or function.__name__, role))
        return function

    return tag


def effect(name: str | None = None, *, role: Role = Role.COORDINATOR) -> Callable[[F], F]:
    """Tag ``function(ctx) -> None`` as the effect ``name`` (default: the function's name)."""
    return _tagger("effect", name, role)


def guard(name: str | None = None) -> Callable[[F], F]:
    """Tag ``function(ctx) -> bool`` as the guard ``name``; guards never write."""
    return _tagger("guard", name, Role.EVERY_RANK)


def observer(name: str | None = None) -> Callable[[F], F]:
    """Tag ``function(ctx) -> str`` as the observation ``name`` (classifies durable storage)."""
    return _tagger("observer", name, Role.COORDINATOR)


def tag_of(function: object) -> Tag | None:
    """The tag a decorator put on ``function``, if any."""
    tag = getattr(function, _TAG_ATTRIBUTE, None)
    return tag if isinstance(tag, Tag) else None


def collect_bindings(
    *sources: types.ModuleType | Mapping[str, object] | Iterable[object],
) -> Bindings:
    """Build the bindings of every tagged callable in ``sources``.

    Args:
        sources: modules (their attributes are scanned), mappings (their values) or iterables
            of callables.

    Raises:
        MachineDefinitionError: two callables claim the same kind and name.
    """
    found: dict[tuple[str, str], tuple[object, Tag]] = {}
    problems: list[str] = []
    for source in sources:
        if isinstance(source, types.ModuleType):
            values: Iterable[object] = vars(source).values()
        elif isinstance(source, Mapping):
            values = source.values()
        else:
            values = source
        for value in values:
            tag = tag_of(value)
            if tag is None:
                continue
            key = (tag.kind, tag.name)
            if key in found and found[key][0] is not value:
                problems.append(
                    f"{tag.kind} {tag.name!r} is bound twice: {_where(found[key][0])} and "
                    f"{_where(value)}; rename one of them"
                )
                continue
            found[key] = (value, tag)
    if problems:
        raise MachineDefinitionError("bindings", problems)
    # A tag is put on callables only (``_tagger`` checks); their signatures are the table's
    # static checks' business, so each is taken as the kind its tag names.
    effects: dict[str, Effect] = {}
    guards: dict[str, Guard] = {}
    observers: dict[str, Observer] = {}
    roles: dict[str, Role] = {}
    for (kind, name), (value, tag) in sorted(found.items()):
        if kind == "effect":
            effects[name] = cast(Effect, value)
            roles[name] = tag.role
        elif kind == "guard":
            guards[name] = cast(Guard, value)
        elif kind == "observer":
            observers[name] = cast(Observer, value)
        else:  # a Tag built by hand with another kind (the decorators make only these three)
            raise KeyError(kind)
    return Bindings(effects=effects, guards=guards, observers=observers, roles=roles)


def _where(value: object) -> str:
    module = getattr(value, "__module__", "?")
    return f"{module}.{getattr(value, '__qualname__', repr(value))}"
