"""Mermaid diagrams of transition tables (for ``docs/`` and ``statecraft machines draw``).

The state graph is drawn by ``transitions``' mermaid backend; statecraft adds the recovery
edges (observation label -> state where a restarted machine continues) and the ``on_error``
edges, which that library has no notion of.
"""

from __future__ import annotations

import re

from transitions.extensions import GraphMachine

from statecraft.engine.table import MachineTable

__all__ = ["render_mermaid"]


class _Model:
    state: str


def _node(label: str) -> str:
    return "obs_" + re.sub(r"\W", "_", label)


def render_mermaid(table: MachineTable) -> str:
    """Mermaid ``stateDiagram-v2`` text for ``table``.

    Ordinary transitions are labelled with their effect and guard, ``on_error`` edges with
    ``on_error(effect)``, and every observation label becomes a node with a ``recover`` edge.
    """
    specs = []
    for t in table.transitions:
        spec: dict[str, object] = {"trigger": t.effect, "source": t.source, "dest": t.target}
        if t.guard is not None:
            spec["unless" if t.guard.negated else "conditions"] = t.guard.name
        specs.append(spec)
        if t.on_error:
            specs.append(
                {"trigger": f"on_error({t.effect})", "source": t.source, "dest": t.on_error}
            )
    model = _Model()
    GraphMachine(
        model=model,
        states=list(table.state_names),
        transitions=specs,
        initial=table.initial,
        auto_transitions=False,
        graph_engine="mermaid",
        show_conditions=True,
        title=f"{table.name} ({table.source.rsplit('/', 1)[-1]})",
    )
    lines = model.get_graph().draw(None).rstrip().splitlines()  # type: ignore[attr-defined]
    # transitions styles the "current" state; a table diagram has none, so drop the styling.
    lines = [ln for ln in lines if not ln.strip().startswith(("classDef ", "Class "))]
    for state in table.states:
        if state.terminal:
            lines.append(f"  {state.name} --> [*]")
    for label, target in table.recover.items():
        node = _node(label)
        lines.append(f'  state "observed: {label}" as {node}')
        lines.append(f"  {node} --> {target}: recover")
    return "\n".join(lines) + "\n"
