"""Mermaid diagrams of transition tables (for ``docs/`` and ``statecraft machines draw``).

Edges are labelled with the effect and its guard; ``on_error`` edges with
``on_error(effect)``; every observation label becomes a node with a ``recover`` edge to the
state a restarted machine continues in. Rendering reads the table only, so any effect name
that passes the static checks renders.
"""

from __future__ import annotations

import re

from statecraft.engine.table import MachineTable

__all__ = ["render_mermaid"]


def _node(name: str) -> str:
    return re.sub(r"\W", "_", name)


def render_mermaid(table: MachineTable) -> str:
    """Mermaid ``stateDiagram-v2`` text for ``table``."""
    title = table.source.rsplit("/", 1)[-1]
    lines = ["---", f"title: {table.name} ({title})", "---", "stateDiagram-v2", "  direction LR"]
    for state in table.states:
        lines.append(f'  state "{state.name}" as {_node(state.name)}')
    lines.append(f"  [*] --> {_node(table.initial)}")
    for t in table.transitions:
        guard = f" [{t.guard}]" if t.guard else ""
        lines.append(f"  {_node(t.source)} --> {_node(t.target)}: {t.effect}{guard}")
        if t.on_error:
            lines.append(f"  {_node(t.source)} --> {_node(t.on_error)}: on_error({t.effect})")
    for state in table.states:
        if state.terminal:
            lines.append(f"  {_node(state.name)} --> [*]")
            if state.failure:
                lines.append(f"  note right of {_node(state.name)}: failure")
    for label, target in table.recover.items():
        node = "obs_" + _node(label)
        lines.append(f'  state "observed: {label}" as {node}')
        lines.append(f"  {node} --> {_node(target)}: recover")
    return "\n".join(lines) + "\n"
