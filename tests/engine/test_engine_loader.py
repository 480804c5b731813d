"""Tests of statecraft.engine.loader: reading transition tables and checking their shape.

Every malformed table is defined inline (TOML text in ``tmp_path`` or a dict for
``parse_table``) inside ``pytest.raises``, and the test asserts what the message says: where the
problem is and what was expected.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from statecraft.engine import (
    Guard,
    MachineTable,
    StateSpec,
    TransitionSpec,
    load_table,
    parse_table,
)
from statecraft.errors import MachineDefinitionError, StatecraftError


def write_table(tmp_path: Path, text: str, name: str = "m.toml") -> Path:
    """Write ``text`` (dedented) as a table file and return its path."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


VALID_TOML = """\
    name = "replace"
    doc = "Publish a new version."
    initial = "planned"
    observe = "observe_replace"

    [states]
    planned   = { doc = "nothing written" }
    written   = { doc = "data durable" }
    committed = { doc = "pointer durable", terminal = true, observable = true }
    aborted   = { terminal = true, failure = true }

    [[transitions]]
    from = "planned"
    do = "write_data"
    to = "written"
    on_error = "aborted"
    doc = "write the data"

    [[transitions]]
    from = "written"
    guard = "not already_done"
    do = "switch"
    to = "committed"

    [[transitions]]
    from = "written"
    guard = "already_done"
    do = "noop"
    to = "committed"

    [observations]
    absent = "nothing there"

    [recover]
    absent = "planned"
    committed = "committed"
"""


class TestLoadTable:
    """load_table: file -> MachineTable, or one MachineDefinitionError naming the file."""

    def test_valid_table_loads_every_field(self, tmp_path: Path) -> None:
        """A well-formed file yields a MachineTable with its states, transitions and maps."""
        path = write_table(tmp_path, VALID_TOML)
        table = load_table(path)
        assert isinstance(table, MachineTable)
        assert table.name == "replace"
        assert table.source == str(path)
        assert table.doc == "Publish a new version."
        assert table.initial == "planned"
        assert table.observe == "observe_replace"
        assert table.state_names == ("planned", "written", "committed", "aborted")
        assert table.terminal_names == ("committed", "aborted")
        assert table.state("committed") == StateSpec(
            "committed", "pointer durable", observable=True, terminal=True
        )
        assert table.state("aborted").failure is True
        assert table.transitions[0] == TransitionSpec(
            source="planned",
            effect="write_data",
            target="written",
            on_error="aborted",
            doc="write the data",
            index=0,
        )
        assert table.transitions[1].guard == Guard("already_done", negated=True)
        assert table.transitions[2].guard == Guard("already_done", negated=False)
        assert table.observations == {"absent": "nothing there"}
        assert table.recover == {"absent": "planned", "committed": "committed"}
        assert table.effect_names == {"write_data", "switch", "noop"}
        assert table.guard_names == {"already_done"}
        assert [t.index for t in table.outgoing("written")] == [1, 2]

    def test_invalid_toml_names_the_file(self, tmp_path: Path) -> None:
        """A file that is not TOML raises MachineDefinitionError naming the file and the
        parser's complaint."""
        path = write_table(tmp_path, 'name = "m"\ninitial = \n[states\n')
        with pytest.raises(MachineDefinitionError) as info:
            load_table(path)
        assert info.value.source == str(path)
        assert str(info.value).startswith(f"{path}: 1 problem(s) in the machine table:")
        assert len(info.value.problems) == 1
        assert info.value.problems[0].startswith("not valid TOML: ")

    def test_missing_file_is_a_definition_error(self, tmp_path: Path) -> None:
        """A table file that cannot be read raises MachineDefinitionError, not a bare OSError."""
        path = tmp_path / "absent.toml"
        with pytest.raises(MachineDefinitionError, match="cannot read the table file") as info:
            load_table(path)
        assert str(path) in str(info.value)

    def test_definition_error_is_also_a_value_error(self, tmp_path: Path) -> None:
        """The error derives from StatecraftError and ValueError, so callers may catch either."""
        path = write_table(tmp_path, "not toml at all ===")
        with pytest.raises(ValueError) as info:
            load_table(path)
        assert isinstance(info.value, StatecraftError)
        assert info.value.code == "machine_definition"

    def test_shape_problem_names_the_file(self, tmp_path: Path) -> None:
        """A shape problem found in a file is reported under that file's path."""
        path = write_table(
            tmp_path,
            """\
            name = "m"
            initial = "a"
            colour = "blue"
            transitions = []
            [states]
            a = { terminal = true }
            """,
        )
        with pytest.raises(MachineDefinitionError) as info:
            load_table(path)
        assert str(info.value).startswith(f"{path}: 1 problem(s)")
        assert "unknown top-level key 'colour'" in str(info.value)


class TestParseTable:
    """parse_table: the shape checks, every problem reported with its location."""

    def minimal(self, **overrides: object) -> dict[str, object]:
        """A minimal valid table as parsed TOML data, with ``overrides`` applied."""
        data: dict[str, object] = {
            "name": "m",
            "initial": "a",
            "states": {"a": {}, "b": {"terminal": True}},
            "transitions": [{"from": "a", "do": "go", "to": "b"}],
        }
        data.update(overrides)
        return data

    def test_minimal_table_parses(self) -> None:
        """A table with only the required keys parses, with empty observations and recover."""
        table = parse_table(self.minimal(), source="inline")
        assert table.source == "inline"
        assert table.observe is None
        assert table.observations == {}
        assert table.recover == {}

    def test_unknown_top_level_key(self) -> None:
        """An unknown top-level key is named with the list of allowed keys."""
        with pytest.raises(MachineDefinitionError) as info:
            parse_table(self.minimal(colour="blue"), source="t.toml")
        assert info.value.problems == [
            "unknown top-level key 'colour'; allowed: ['bindings', 'doc', 'initial', 'name', "
            "'observations', 'observe', 'recover', 'states', 'transitions']"
        ]
        assert str(info.value).startswith("t.toml: 1 problem(s) in the machine table:")

    @pytest.mark.parametrize(
        ("key", "value", "expected"),
        [
            ("name", 3, "name: expected a non-empty string naming the machine, got 3"),
            ("name", "", "name: expected a non-empty string naming the machine, got ''"),
            ("initial", None, "initial: expected the name of the initial state, got None"),
            ("initial", ["a"], "initial: expected the name of the initial state, got ['a']"),
            ("doc", 4, "doc: expected a string, got 4"),
            ("observe", 5, "observe: expected the name of an observation binding, got 5"),
            ("states", [], "states: expected a table of states, got []"),
            ("transitions", {}, "transitions: expected an array of [[transitions]], got {}"),
            ("observations", [], "observations: expected a table label = doc, got []"),
            ("recover", "planned", "recover: expected a table label = state, got 'planned'"),
        ],
    )
    def test_top_level_wrong_type(self, key: str, value: object, expected: str) -> None:
        """A top-level value of the wrong type is named with what was expected and what was got."""
        with pytest.raises(MachineDefinitionError) as info:
            parse_table(self.minimal(**{key: value}))
        assert info.value.problems == [expected]

    def test_missing_required_keys(self) -> None:
        """Missing name, initial, states and transitions are each reported."""
        with pytest.raises(MachineDefinitionError) as info:
            parse_table({})
        assert info.value.problems == [
            "name: expected a non-empty string naming the machine, got None",
            "initial: expected the name of the initial state, got None",
            "states: expected a table of states, got None",
            "transitions: expected an array of [[transitions]], got None",
        ]

    def test_state_wrong_types(self) -> None:
        """A state that is not a table, an unknown state key and a non-boolean flag are each
        named with the state."""
        states = {"a": {"terminal": "yes", "colour": 1}, "b": 5, "c": {"doc": 7}}
        with pytest.raises(MachineDefinitionError) as info:
            parse_table(self.minimal(states=states))
        assert info.value.problems == [
            "state 'a': unknown key 'colour'; allowed: ['doc', 'failure', 'observable', "
            "'terminal']",
            "state 'a'.terminal: expected true or false, got 'yes'",
            "state 'b': expected an inline table like { doc = ... }, got 5",
            "state 'c'.doc: expected a string, got 7",
        ]

    def test_transition_wrong_types(self) -> None:
        """Transition problems are named by the transition's index and field."""
        transitions = [
            {"from": "a", "to": "b", "guard": 5, "on_error": 7, "when": 1},
            3,
            {"from": 1, "do": "", "to": "b"},
        ]
        with pytest.raises(MachineDefinitionError) as info:
            parse_table(self.minimal(transitions=transitions))
        assert info.value.problems == [
            "transition #0: unknown key 'when'; allowed: ['do', 'doc', 'from', 'guard', "
            "'on_error', 'to']",
            "transition #0.do: expected an effect name, got None",
            "transition #0.guard: expected a predicate name or 'not name', got 5",
            "transition #0.on_error: expected a state name, got 7",
            "transition #1: expected a table, got 3",
            "transition #2.from: expected a state name, got 1",
            "transition #2.do: expected an effect name, got ''",
        ]

    def test_observation_and_recover_wrong_types(self) -> None:
        """A non-string observation doc or recover target is named by its label."""
        with pytest.raises(MachineDefinitionError) as info:
            parse_table(self.minimal(observations={"x": 1}, recover={"x": 2}))
        assert info.value.problems == [
            "observation 'x': expected a doc string, got 1",
            "recover.x: expected a state name, got 2",
        ]

    def test_every_shape_problem_is_reported_together(self) -> None:
        """One parse reports all shape problems of the table in a single error."""
        data = self.minimal(name=3, extra=1, states={"a": {"terminal": "yes"}}, recover={"x": 2})
        with pytest.raises(MachineDefinitionError) as info:
            parse_table(data, source="bad.toml")
        assert len(info.value.problems) == 4
        message = str(info.value)
        assert message.startswith("bad.toml: 4 problem(s) in the machine table:")
        for problem in info.value.problems:
            assert f"\n  - {problem}" in message

    @pytest.mark.parametrize(
        "overrides",
        [
            {"transitions": [{"from": "a", "do": "go", "to": "b", "doc": 5}]},
            {"states": {"a": {"doc": False}, "b": {"terminal": True}}},
        ],
        ids=["transition-doc-int", "state-doc-false"],
    )
    def test_doc_of_wrong_type_is_rejected(self, overrides: dict[str, object]) -> None:
        """A doc that is not a string is a shape problem, like every other wrong type."""
        with pytest.raises(MachineDefinitionError, match="doc: expected a string"):
            parse_table(self.minimal(**overrides))


class TestGuard:
    """Guard.parse: ``name`` or ``not name``."""

    @pytest.mark.parametrize(
        ("text", "guard", "shown"),
        [
            ("ready", Guard("ready", False), "ready"),
            ("not ready", Guard("ready", True), "not ready"),
            ("  not   ready ", Guard("ready", True), "not ready"),
            (" ready ", Guard("ready", False), "ready"),
        ],
    )
    def test_parse_and_str(self, text: str, guard: Guard, shown: str) -> None:
        """A guard text parses to its predicate name and polarity and prints back normalised."""
        assert Guard.parse(text) == guard
        assert str(Guard.parse(text)) == shown


class TestTransitionSpec:
    """TransitionSpec.label: the name used in messages and traces."""

    def test_label_shows_index_source_guard_effect_target(self) -> None:
        """The label reads ``#i source [guard] --effect--> target``."""
        spec = TransitionSpec("a", "go", "b", guard=Guard("g", True), index=3)
        assert spec.label() == "#3 a [not g] --go--> b"
        assert TransitionSpec("a", "go", "b").label() == "#0 a --go--> b"


class TestMachineTable:
    """MachineTable.state: lookup by name."""

    def test_unknown_state_raises_key_error(self) -> None:
        """Asking for an undeclared state raises KeyError naming it."""
        table = parse_table(
            {
                "name": "m",
                "initial": "a",
                "states": {"a": {"terminal": True}},
                "transitions": [],
            }
        )
        with pytest.raises(KeyError, match="'zzz'"):
            table.state("zzz")
