"""The data model of a transition table.

A table is plain data: states, transitions ``from -> [guard] -> do(effect) -> to`` with an
optional ``on_error`` target, the observation labels that an ``observe`` binding may report
about durable storage, and the ``recover`` map from each label to the state where a
restarted machine continues. Tables are loaded from TOML (:mod:`statecraft.engine.loader`)
and checked statically (:mod:`statecraft.engine.checks`) before anything runs them.
"""

from __future__ import annotations

import attrs

__all__ = ["Guard", "MachineTable", "StateSpec", "TransitionSpec"]


@attrs.frozen
class StateSpec:
    """One state of a machine.

    Attributes:
        name: the state's identifier, unique in the table.
        doc: one sentence saying what is true of storage in this state.
        observable: ``observe`` can recognise this state from durable storage alone, so the
            table must say in ``recover`` where a restarted machine continues from it.
        terminal: the run ends here.
        failure: a terminal state that ends the run unsuccessfully (the runner reports the
            error that led to it).
    """

    name: str
    doc: str = ""
    observable: bool = False
    terminal: bool = False
    failure: bool = False


@attrs.frozen
class Guard:
    """A guard reference: a bound predicate's name, possibly negated (``not name``)."""

    name: str
    negated: bool = False

    @classmethod
    def parse(cls, text: str) -> Guard:
        """Parse ``"name"`` or ``"not name"``."""
        words = text.split()
        if len(words) == 2 and words[0] == "not":
            return cls(words[1], True)
        return cls(text.strip(), False)

    def __str__(self) -> str:
        return f"not {self.name}" if self.negated else self.name


@attrs.frozen
class TransitionSpec:
    """``source -> [guard] -> do(effect) -> target``; ``on_error`` is taken when the effect
    raises an ordinary exception (a simulated crash is never caught)."""

    source: str
    effect: str
    target: str
    guard: Guard | None = None
    on_error: str | None = None
    doc: str = ""
    index: int = 0

    def label(self) -> str:
        """Human-readable name used in error messages and traces."""
        guard = f" [{self.guard}]" if self.guard else ""
        return f"#{self.index} {self.source}{guard} --{self.effect}--> {self.target}"


@attrs.frozen
class MachineTable:
    """A whole machine as declared in its table file.

    ``bindings`` is the dotted name of the module whose ``@effect``/``@guard``/``@observer``
    tagged functions bind the table's names (:mod:`statecraft.engine.registry` imports it);
    ``None`` for a table built in code, whose caller supplies the bindings.
    """

    name: str
    source: str
    doc: str
    initial: str
    states: tuple[StateSpec, ...]
    transitions: tuple[TransitionSpec, ...]
    observations: dict[str, str] = attrs.field(factory=dict)
    recover: dict[str, str] = attrs.field(factory=dict)
    observe: str | None = None
    bindings: str | None = None

    def state(self, name: str) -> StateSpec:
        """The state called ``name``; ``KeyError`` if the table has none."""
        for state in self.states:
            if state.name == name:
                return state
        raise KeyError(name)

    @property
    def state_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.states)

    @property
    def terminal_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.states if s.terminal)

    def outgoing(self, state: str) -> tuple[TransitionSpec, ...]:
        """Transitions that leave ``state``, in table order."""
        return tuple(t for t in self.transitions if t.source == state)

    @property
    def effect_names(self) -> frozenset[str]:
        return frozenset(t.effect for t in self.transitions)

    @property
    def guard_names(self) -> frozenset[str]:
        return frozenset(t.guard.name for t in self.transitions if t.guard)
