"""Static checks of a transition table.

Each check is a small pure function returning a list of problems (strings that name the state
or transition and what is expected). :func:`check_table` runs them all and raises one
:class:`MachineDefinitionError` listing every problem. The ``transitions`` library accepts
undefined targets and unreachable states silently, so none of these checks rely on it.
"""

from __future__ import annotations

from collections import defaultdict

from statecraft.engine.bindings import Bindings
from statecraft.engine.table import MachineTable
from statecraft.errors import MachineDefinitionError

__all__ = [
    "check_bindings",
    "check_exits",
    "check_observations",
    "check_single_enabled",
    "check_state_references",
    "check_table",
    "check_unreachable",
    "table_problems",
]


def check_state_references(table: MachineTable) -> list[str]:
    """Every state a transition, ``initial`` or ``recover`` names must be declared."""
    known = set(table.state_names)
    problems = []
    if not table.states:
        problems.append("no states declared; add a [states] table")
    if table.initial not in known:
        problems.append(f"initial state {table.initial!r} is not declared in [states]")
    for t in table.transitions:
        for role, name in (("from", t.source), ("to", t.target), ("on_error", t.on_error)):
            if name is not None and name not in known:
                problems.append(
                    f"transition {t.label()}: {role} state {name!r} is not declared in [states]"
                )
    for label, target in table.recover.items():
        if target not in known:
            problems.append(f"recover.{label} = {target!r}: not a declared state")
    if not table.terminal_names:
        problems.append("no terminal state; mark at least one state terminal = true")
    for state in table.states:
        if state.failure and not state.terminal:
            problems.append(f"state {state.name!r}: failure = true requires terminal = true")
    return problems


def check_unreachable(table: MachineTable) -> list[str]:
    """Every state must be reachable from ``initial`` or from a ``recover`` target."""
    edges: dict[str, set[str]] = defaultdict(set)
    for t in table.transitions:
        edges[t.source].add(t.target)
        if t.on_error:
            edges[t.source].add(t.on_error)
    frontier = [table.initial, *table.recover.values()]
    seen: set[str] = set()
    while frontier:
        state = frontier.pop()
        if state in seen:
            continue
        seen.add(state)
        frontier.extend(edges[state])
    return [
        f"state {s.name!r} is unreachable from initial {table.initial!r} and from every recover "
        "target; remove it or add a transition into it"
        for s in table.states
        if s.name not in seen
    ]


def check_exits(table: MachineTable) -> list[str]:
    """Non-terminal states need an exit; terminal states must have none."""
    problems = []
    for state in table.states:
        out = table.outgoing(state.name)
        if not state.terminal and not out:
            problems.append(
                f"state {state.name!r} is not terminal and has no outgoing transition; add one "
                "or mark it terminal = true"
            )
        if state.terminal and out:
            labels = ", ".join(t.label() for t in out)
            problems.append(f"terminal state {state.name!r} has outgoing transitions: {labels}")
    return problems


def check_single_enabled(table: MachineTable) -> list[str]:
    """At most one transition may be enabled in any state.

    Statically provable overlaps are rejected: an unguarded transition sharing its source with
    another, or the same guard (same polarity) used twice from one state. Guards that are not
    a ``g`` / ``not g`` pair are checked again at run time by the runner.
    """
    problems = []
    for state in table.state_names:
        out = table.outgoing(state)
        if len(out) < 2:
            continue
        unguarded = [t for t in out if t.guard is None]
        if unguarded:
            problems.append(
                f"state {state!r}: {len(out)} transitions leave it but "
                f"{', '.join(t.label() for t in unguarded)} has no guard, so more than one can be "
                "enabled; guard every transition out of a branching state"
            )
        seen: dict[tuple[str, bool], str] = {}
        for t in out:
            if t.guard is None:
                continue
            key = (t.guard.name, t.guard.negated)
            if key in seen:
                problems.append(
                    f"state {state!r}: guard [{t.guard}] is used by both {seen[key]} and "
                    f"{t.label()}; both would be enabled together"
                )
            seen[key] = t.label()
    return problems


def check_observations(table: MachineTable) -> list[str]:
    """Every observable state and every declared observation label must have a recover entry,
    and every recover key must be something ``observe`` can report."""
    problems = []
    observable = {s.name for s in table.states if s.observable}
    labels = set(table.observations) | observable
    for label in sorted(labels - set(table.recover)):
        what = "observable state" if label in observable else "observation label"
        problems.append(
            f"{what} {label!r} has no recover entry; add recover.{label} = <state to continue in>"
        )
    for label in sorted(set(table.recover) - labels):
        problems.append(
            f"recover.{label}: {label!r} is neither an observable state nor a declared "
            "observation label; declare it in [observations] or mark the state observable = true"
        )
    if labels and table.observe is None:
        problems.append(
            "observations and recover entries are declared but no observe binding is named; "
            'add observe = "<binding>"'
        )
    return problems


def check_bindings(table: MachineTable, bindings: Bindings) -> list[str]:
    """Every effect, guard and the observation the table names must be bound."""
    problems = []
    for effect in sorted(table.effect_names - set(bindings.effects)):
        users = ", ".join(t.label() for t in table.transitions if t.effect == effect)
        problems.append(
            f"effect {effect!r} (used by {users}) is not bound; tag a function "
            f"@effect({effect!r}) in the bindings module"
        )
    for guard in sorted(table.guard_names - set(bindings.guards)):
        problems.append(
            f"guard {guard!r} is not bound; tag a function @guard({guard!r}) in the bindings module"
        )
    if table.observe is not None and table.observe not in bindings.observers:
        problems.append(
            f"observation {table.observe!r} is not bound; tag a function "
            f"@observer({table.observe!r}) in the bindings module"
        )
    return problems


def table_problems(table: MachineTable, bindings: Bindings | None = None) -> list[str]:
    """All problems of ``table`` (and of its ``bindings`` when given), in check order."""
    problems = [
        *check_state_references(table),
        *check_unreachable(table),
        *check_exits(table),
        *check_single_enabled(table),
        *check_observations(table),
    ]
    if bindings is not None:
        problems.extend(check_bindings(table, bindings))
    return problems


def check_table(table: MachineTable, bindings: Bindings | None = None) -> None:
    """Raise :class:`MachineDefinitionError` naming every problem of ``table``.

    Raises:
        MachineDefinitionError: if any check fails; ``.problems`` holds each message.
    """
    problems = table_problems(table, bindings)
    if problems:
        raise MachineDefinitionError(
            table.source, [f"machine {table.name!r}: {p}" for p in problems]
        )
