"""Tests of statecraft.engine.render: mermaid diagrams of transition tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from statecraft.engine import load_table, parse_table, render_mermaid

TOY_TABLE = Path(__file__).resolve().parents[1] / "toy" / "replace.toml"

TABLE = parse_table(
    {
        "name": "save",
        "initial": "planned",
        "observe": "observe_save",
        "states": {
            "planned": {},
            "written": {"observable": True},
            "committed": {"terminal": True, "observable": True},
            "aborted": {"terminal": True, "failure": True},
        },
        "transitions": [
            {"from": "planned", "do": "write_data", "to": "written", "on_error": "aborted"},
            {"from": "written", "guard": "fresh", "do": "publish", "to": "committed"},
            {"from": "written", "guard": "not fresh", "do": "skip_publish", "to": "committed"},
        ],
        "observations": {"absent": "nothing durable", "half written": "some files"},
        "recover": {
            "absent": "planned",
            "half written": "planned",
            "written": "written",
            "committed": "committed",
        },
    },
    source="machines/save.toml",
)


class TestRenderMermaid:
    """render_mermaid: a stateDiagram-v2 with effect, on_error and recover edges."""

    def test_is_a_state_diagram_titled_by_machine_and_file(self) -> None:
        """The diagram is mermaid stateDiagram-v2 titled ``name (file)``."""
        text = render_mermaid(TABLE)
        assert "stateDiagram-v2" in text
        assert "save (save.toml)" in text
        assert text.endswith("\n")

    def test_contains_every_state(self) -> None:
        """Every declared state appears as a node."""
        text = render_mermaid(TABLE)
        for state in TABLE.state_names:
            assert f'state "{state}" as {state}' in text

    def test_effect_edges_carry_effect_and_guard(self) -> None:
        """Each transition is an edge labelled with its effect (and its guard, negation shown
        as ``not``); parallel transitions are drawn as separate edges."""
        lines = render_mermaid(TABLE).splitlines()
        assert "  planned --> written: write_data" in lines
        edges = [ln for ln in lines if ln.startswith("  written --> committed: ")]
        labels = sorted(edge.split(": ", 1)[1] for edge in edges)
        assert labels == ["publish [fresh]", "skip_publish [not fresh]"]

    def test_on_error_edges(self) -> None:
        """An on_error target is drawn as an ``on_error(effect)`` edge."""
        assert "  planned --> aborted: on_error(write_data)" in render_mermaid(TABLE).splitlines()

    def test_initial_and_terminal_markers(self) -> None:
        """The initial state has the start marker and every terminal state the end marker,
        and no state is drawn as the active one."""
        text = render_mermaid(TABLE)
        lines = text.splitlines()
        assert "  [*] --> planned" in lines
        assert "  committed --> [*]" in lines
        assert "  aborted --> [*]" in lines
        assert "  written --> [*]" not in lines
        assert not [ln for ln in lines if ln.strip().startswith("Class ") and "s_active" in ln]
        assert "s_active" not in text.replace("classDef s_active", "")

    def test_recover_edges(self) -> None:
        """Every observation label becomes a node with a ``recover`` edge to its target."""
        lines = render_mermaid(TABLE).splitlines()
        for node, label, target in [
            ("obs_absent", "absent", "planned"),
            ("obs_half_written", "half written", "planned"),
            ("obs_written", "written", "written"),
            ("obs_committed", "committed", "committed"),
        ]:
            assert f'  state "observed: {label}" as {node}' in lines
            assert f"  {node} --> {target}: recover" in lines

    def test_renders_the_toy_table(self) -> None:
        """The toy replace table renders both effects and both recover edges."""
        text = render_mermaid(load_table(TOY_TABLE))
        assert "planned --> data_durable: write_data" in text
        assert "data_durable --> committed: switch_pointer" in text
        assert "obs_absent --> planned: recover" in text
        assert "obs_committed --> data_durable: recover" in text

    @pytest.mark.parametrize("effect", ["state", "get_graph"])
    def test_effect_named_like_a_model_attribute(self, effect: str) -> None:
        """Any effect name a valid table may use renders as an edge label."""
        table = parse_table(
            {
                "name": "m",
                "initial": "a",
                "states": {"a": {}, "b": {"terminal": True}},
                "transitions": [{"from": "a", "do": effect, "to": "b"}],
            }
        )
        assert f"  a --> b: {effect}" in render_mermaid(table).splitlines()
