"""Load transition tables from TOML files.

The file format (documented in ``docs/machines.md``)::

    name = "replace"
    doc = "Replace a file atomically."
    initial = "planned"
    observe = "observe_replace"          # binding that classifies durable storage
    bindings = "myproject.replace"       # module whose tagged functions bind the names

    [states]
    planned   = { doc = "nothing written yet" }
    committed = { doc = "new bytes durable under the name", terminal = true, observable = true }

    [[transitions]]
    from = "planned"
    guard = "not already_done"          # optional; "not" negates a bound predicate
    do = "write_and_rename"
    to = "committed"
    on_error = "aborted"                # optional

    [observations]                       # labels observe() may report besides observable states
    absent = "no trace of the transaction"

    [recover]                            # observation label -> state where the machine continues
    absent = "planned"
    committed = "committed"

The loader checks the *shape* (types, unknown keys) and reports every problem at once; graph
checks live in :mod:`statecraft.engine.checks`.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from statecraft.engine.table import Guard, MachineTable, StateSpec, TransitionSpec
from statecraft.errors import MachineDefinitionError

__all__ = ["TomlTable", "load_table", "parse_table"]

#: A parsed TOML document (``tomllib.loads``). ``Any``: its values are checked key by key at run
#: time by :func:`parse_table` (every problem reported at once), which the type checker cannot
#: follow; what comes out is a typed :class:`MachineTable`.
TomlTable = dict[str, Any]

_TOP_KEYS = {
    "name",
    "doc",
    "initial",
    "observe",
    "bindings",
    "states",
    "transitions",
    "observations",
    "recover",
}
_STATE_KEYS = {"doc", "observable", "terminal", "failure"}
_TRANSITION_KEYS = {"from", "do", "to", "guard", "on_error", "doc"}


def load_table(path: str | Path) -> MachineTable:
    """Read and shape-check the table file at ``path``.

    Raises:
        MachineDefinitionError: the file is not valid TOML or its content has the wrong
            shape; every problem found is listed with its location.
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise MachineDefinitionError(str(path), [f"not valid TOML: {exc}"]) from None
    except OSError as exc:
        raise MachineDefinitionError(str(path), [f"cannot read the table file: {exc}"]) from None
    return parse_table(data, source=str(path))


def _expect(problems: list[str], where: str, value: object, kind: type, what: str) -> bool:
    if isinstance(value, kind) and not (kind is str and not value):
        return True
    problems.append(f"{where}: expected {what}, got {value!r}")
    return False


def parse_table(data: TomlTable, *, source: str = "<table>") -> MachineTable:
    """Build a :class:`MachineTable` from parsed TOML data, checking its shape.

    Raises:
        MachineDefinitionError: listing every shape problem (unknown keys, wrong types,
            missing required keys).
    """
    problems: list[str] = []
    for key in sorted(set(data) - _TOP_KEYS):
        problems.append(f"unknown top-level key {key!r}; allowed: {sorted(_TOP_KEYS)}")
    # Any (here and for the states and transitions below): checked by _expect; any failed
    # check raises before the table is built
    name: Any = data.get("name")
    _expect(problems, "name", name, str, "a non-empty string naming the machine")
    initial: Any = data.get("initial")
    _expect(problems, "initial", initial, str, "the name of the initial state")
    doc = data.get("doc", "")
    if "doc" in data:
        _expect(problems, "doc", doc, str, "a string")
    observe = data.get("observe")
    if observe is not None:
        _expect(problems, "observe", observe, str, "the name of an observation binding")
    bindings = data.get("bindings")
    if bindings is not None:
        _expect(
            problems,
            "bindings",
            bindings,
            str,
            "the dotted name of the module whose tagged functions bind this table",
        )

    states: list[StateSpec] = []
    raw_states: Any = data.get("states")
    if _expect(problems, "states", raw_states, dict, "a table of states"):
        for state_name, spec in raw_states.items():
            where = f"state {state_name!r}"
            if not _expect(problems, where, spec, dict, "an inline table like { doc = ... }"):
                continue
            for key in sorted(set(spec) - _STATE_KEYS):
                problems.append(f"{where}: unknown key {key!r}; allowed: {sorted(_STATE_KEYS)}")
            flags = {}
            for flag in ("observable", "terminal", "failure"):
                value = spec.get(flag, False)
                if _expect(problems, f"{where}.{flag}", value, bool, "true or false"):
                    flags[flag] = value
            state_doc = spec.get("doc", "")
            if "doc" in spec and not isinstance(state_doc, str):
                problems.append(f"{where}.doc: expected a string, got {state_doc!r}")
            states.append(StateSpec(name=state_name, doc=str(state_doc), **flags))

    transitions: list[TransitionSpec] = []
    raw_transitions: Any = data.get("transitions")
    if _expect(problems, "transitions", raw_transitions, list, "an array of [[transitions]]"):
        for index, spec in enumerate(raw_transitions):
            where = f"transition #{index}"
            if not _expect(problems, where, spec, dict, "a table"):
                continue
            for key in sorted(set(spec) - _TRANSITION_KEYS):
                problems.append(
                    f"{where}: unknown key {key!r}; allowed: {sorted(_TRANSITION_KEYS)}"
                )
            ok = all(
                [
                    _expect(problems, f"{where}.from", spec.get("from"), str, "a state name"),
                    _expect(problems, f"{where}.do", spec.get("do"), str, "an effect name"),
                    _expect(problems, f"{where}.to", spec.get("to"), str, "a state name"),
                ]
            )
            if "doc" in spec and not isinstance(spec["doc"], str):
                problems.append(f"{where}.doc: expected a string, got {spec['doc']!r}")
                ok = False
            guard = spec.get("guard")
            if guard is not None and not _expect(
                problems, f"{where}.guard", guard, str, "a predicate name or 'not name'"
            ):
                ok = False
            on_error = spec.get("on_error")
            if on_error is not None and not _expect(
                problems, f"{where}.on_error", on_error, str, "a state name"
            ):
                ok = False
            if ok:
                transitions.append(
                    TransitionSpec(
                        source=spec["from"],
                        effect=spec["do"],
                        target=spec["to"],
                        guard=Guard.parse(guard) if guard else None,
                        on_error=on_error,
                        doc=str(spec.get("doc", "")),
                        index=index,
                    )
                )

    observations: dict[str, str] = {}
    raw_observations = data.get("observations", {})
    if _expect(problems, "observations", raw_observations, dict, "a table label = doc"):
        for label, label_doc in raw_observations.items():
            if _expect(problems, f"observation {label!r}", label_doc, str, "a doc string"):
                observations[label] = label_doc

    recover: dict[str, str] = {}
    raw_recover = data.get("recover", {})
    if _expect(problems, "recover", raw_recover, dict, "a table label = state"):
        for label, target in raw_recover.items():
            if _expect(problems, f"recover.{label}", target, str, "a state name"):
                recover[label] = target

    if problems:
        raise MachineDefinitionError(source, problems)
    return MachineTable(
        name=name,
        source=source,
        doc=doc,
        initial=initial,
        states=tuple(states),
        transitions=tuple(transitions),
        observations=observations,
        recover=recover,
        observe=observe,
        bindings=bindings,
    )
