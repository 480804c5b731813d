"""Which features this release builds: each unbuilt feature declares the knobs that ask for it.

A :class:`Feature` says, for one feature of the reference contract, which knob values ask for
it and what the user should do instead while it is not built (``built=False``). A later issue
that builds the feature flips its declaration to ``built=True`` (or deletes it) in the same
change that adds its transaction; nothing else lists it. :func:`declared_features` collects
every ``Feature`` defined at the top level of the given modules (this one by default), in
definition order, so a declaration moved into the feature's own module is found by passing
that module; there is no hand-kept list of features.

Order matters: refusals and warnings follow definition order. An object-store primary also
requires ``checkpoint_format=dcp`` (a cross-option rule), so the object-store declaration comes
before DCP, or the refusal would always name the format.

Example:
    >>> CheckpointConfig(checkpoint_format="dcp").require_supported()   # doctest: +SKIP
    NotSupportedYetError: checkpoint_format='dcp' is not supported yet; set checkpoint_format=...
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

import attrs

from statecraft.checkpoint.config.knobs import _knob_value
from statecraft.errors import NotSupportedYetError

__all__ = ["Feature", "KnobNote", "KnobRequest", "declared_features", "require_supported"]


@attrs.frozen
class KnobRequest:
    """One knob value that asks for a feature.

    Attributes:
        knob: the dotted knob (``upload.enabled``).
        asks_for: ``asks_for(value) -> bool``: true when the value needs the feature.
        what_to_do: the fix, ending the refusal (``set upload.enabled=false``).
    """

    knob: str
    asks_for: Callable[[Any], bool]
    what_to_do: str


@attrs.frozen
class KnobNote:
    """A default that would need the feature but is safe without it: a warning, not a refusal.

    ``text(value)`` is the warning line; it ends with how to silence it.
    """

    knob: str
    applies: Callable[[Any], bool]
    text: str


@attrs.frozen
class Feature:
    """A feature of the reference contract and the knobs that ask for it.

    Attributes:
        name: what the feature is (``"archive upload"``).
        requests: knob values that need it; refused while ``built`` is false.
        notes: defaults that would use it but are safe without it; warned about while
            ``built`` is false.
        built: this release delivers the feature (its requests and notes are then ignored).
    """

    name: str
    requests: tuple[KnobRequest, ...] = ()
    notes: tuple[KnobNote, ...] = ()
    built: bool = False

    @property
    def knobs(self) -> tuple[str, ...]:
        """Every knob this declaration reads."""
        return tuple(r.knob for r in self.requests) + tuple(n.knob for n in self.notes)

    def refusal(self, config: object) -> NotSupportedYetError | None:
        """The error for the first request ``config`` (a
        :class:`~statecraft.checkpoint.config.schema.CheckpointConfig`, read by dotted knob
        name) makes of this unbuilt feature, if any."""
        if self.built:
            return None
        for request in self.requests:
            value = _knob_value(config, request.knob)
            if request.asks_for(value):
                return NotSupportedYetError(request.knob, value, request.what_to_do)
        return None

    def warnings(self, config: object) -> list[str]:
        """The warning lines of the notes that apply to ``config``."""
        if self.built:
            return []
        return [n.text for n in self.notes if n.applies(_knob_value(config, n.knob))]


OBJECT_STORE_PRIMARY = Feature(
    "object-store primary",
    requests=(
        KnobRequest(
            "checkpoint_store.backend",
            lambda v: v == "object_store",
            "set checkpoint_store.backend=local",
        ),
    ),
    built=True,  # machines/direct_save.toml, statecraft/checkpoint/direct/
)

DCP = Feature(
    "DCP (sharded) checkpoint format",
    requests=(
        KnobRequest(
            "checkpoint_format", lambda v: v == "dcp", "set checkpoint_format=consolidated"
        ),
    ),
    built=True,  # machines/dcp_save.toml, statecraft/writers/dcp.py
)


def declared_features(*modules: types.ModuleType) -> list[Feature]:
    """Every :class:`Feature` bound at the top level of ``modules`` (default: this module), in
    definition order, each once."""
    found: list[Feature] = []
    for module in modules or (sys.modules[__name__],):
        for value in vars(module).values():
            if isinstance(value, Feature) and value not in found:
                found.append(value)
    return found


def require_supported(config: object) -> list[str]:
    """Refuse knobs whose feature is not built yet; return warnings for safe defaults.

    ``config`` is a :class:`~statecraft.checkpoint.config.schema.CheckpointConfig` (whose
    ``require_supported`` method calls this); the declarations read it by dotted knob name.

    Returns:
        One warning line per default whose feature is absent but whose absence is safe, in
        declaration order (none in this release: asynchronous saves and retention, the two
        defaults that used to warn, are built).

    Raises:
        NotSupportedYetError: for the first declared unbuilt feature that ``config`` asks for.
    """
    features = declared_features()
    for feature in features:
        error = feature.refusal(config)
        if error is not None:
            raise error
    return [line for feature in features for line in feature.warnings(config)]
