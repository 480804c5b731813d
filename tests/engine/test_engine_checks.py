"""Tests of statecraft.engine.checks: the static checks of a transition table.

One test per class of definition error. Each defines its table inline as TOML text in
``tmp_path`` inside ``pytest.raises(MachineDefinitionError)`` and asserts that the message names
the file, the state or transition at fault, and what is expected.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from statecraft.engine import (
    Bindings,
    Machine,
    MachineTable,
    check_table,
    load_table,
    table_problems,
)
from statecraft.engine.checks import (
    check_bindings,
    check_exits,
    check_observations,
    check_single_enabled,
    check_state_references,
    check_unreachable,
)
from statecraft.errors import MachineDefinitionError


def define(tmp_path: Path, text: str, bindings: Bindings | None = None) -> None:
    """Write ``text`` as ``m.toml``, load it and run every static check on it."""
    path = tmp_path / "m.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    check_table(load_table(path), bindings)


def only_problem(info: pytest.ExceptionInfo[MachineDefinitionError], tmp_path: Path) -> str:
    """The single problem of the error, after checking the message names the file."""
    error = info.value
    assert error.source == str(tmp_path / "m.toml")
    assert str(error).startswith(f"{tmp_path / 'm.toml'}: {len(error.problems)} problem(s)")
    assert len(error.problems) == 1, error.problems
    return error.problems[0]


def noop(ctx: object) -> None:
    """An effect that does nothing."""


VALID = """\
    name = "m"
    initial = "a"
    observe = "obs"

    [states]
    a = {}
    b = { observable = true }
    done = { terminal = true, observable = true }
    failed = { terminal = true, failure = true }

    [[transitions]]
    from = "a"
    do = "go"
    to = "b"
    on_error = "failed"

    [[transitions]]
    from = "b"
    guard = "ready"
    do = "finish"
    to = "done"

    [[transitions]]
    from = "b"
    guard = "not ready"
    do = "wait"
    to = "a"

    [observations]
    absent = "nothing durable"

    [recover]
    absent = "a"
    b = "b"
    done = "done"
"""

VALID_BINDINGS = Bindings(
    effects={"go": noop, "finish": noop, "wait": noop},
    guards={"ready": lambda ctx: True},
    observers={"obs": lambda ctx: "absent"},
)


class TestCheckTable:
    """check_table: raises one MachineDefinitionError naming every problem of a table."""

    def test_valid_table_passes(self, tmp_path: Path) -> None:
        """A well-formed table with complete bindings passes every check."""
        define(tmp_path, VALID, VALID_BINDINGS)

    def test_undefined_initial(self, tmp_path: Path) -> None:
        """An initial state missing from [states] is named (and what it strands is unreachable)."""
        with pytest.raises(MachineDefinitionError) as info:
            define(
                tmp_path,
                """\
                name = "m"
                initial = "nope"
                [states]
                a = {}
                b = { terminal = true }
                [[transitions]]
                from = "a"
                do = "go"
                to = "b"
                """,
            )
        assert str(info.value).startswith(f"{tmp_path / 'm.toml'}: 3 problem(s)")
        assert info.value.problems == [
            "machine 'm': initial state 'nope' is not declared in [states]",
            "machine 'm': state 'a' is unreachable from initial 'nope' and from every recover "
            "target; remove it or add a transition into it",
            "machine 'm': state 'b' is unreachable from initial 'nope' and from every recover "
            "target; remove it or add a transition into it",
        ]

    def test_transition_to_undefined_state(self, tmp_path: Path) -> None:
        """A transition whose ``to`` state is not declared is named by its label."""
        with pytest.raises(MachineDefinitionError) as info:
            define(
                tmp_path,
                """\
                name = "m"
                initial = "a"
                [states]
                a = {}
                b = { terminal = true }
                [[transitions]]
                from = "a"
                guard = "not g"
                do = "go"
                to = "b"
                [[transitions]]
                from = "a"
                guard = "g"
                do = "jump"
                to = "zz"
                """,
            )
        assert only_problem(info, tmp_path) == (
            "machine 'm': transition #1 a [g] --jump--> zz: to state 'zz' is not declared in "
            "[states]"
        )

    def test_transition_from_undefined_state(self, tmp_path: Path) -> None:
        """A transition whose ``from`` state is not declared is named by its label."""
        with pytest.raises(MachineDefinitionError) as info:
            define(
                tmp_path,
                """\
                name = "m"
                initial = "a"
                [states]
                a = {}
                b = { terminal = true }
                [[transitions]]
                from = "a"
                do = "go"
                to = "b"
                [[transitions]]
                from = "ghost"
                do = "haunt"
                to = "b"
                """,
            )
        assert only_problem(info, tmp_path) == (
            "machine 'm': transition #1 ghost --haunt--> b: from state 'ghost' is not declared "
            "in [states]"
        )

    def test_on_error_to_undefined_state(self, tmp_path: Path) -> None:
        """An ``on_error`` target that is not declared is named with the transition."""
        with pytest.raises(MachineDefinitionError) as info:
            define(
                tmp_path,
                """\
                name = "m"
                initial = "a"
                [states]
                a = {}
                b = { terminal = true }
                [[transitions]]
                from = "a"
                do = "go"
                to = "b"
                on_error = "oops"
                """,
            )
        assert only_problem(info, tmp_path) == (
            "machine 'm': transition #0 a --go--> b: on_error state 'oops' is not declared in "
            "[states]"
        )

    def test_unreachable_state(self, tmp_path: Path) -> None:
        """A state reachable neither from initial nor from a recover target is named."""
        with pytest.raises(MachineDefinitionError) as info:
            define(
                tmp_path,
                """\
                name = "m"
                initial = "a"
                [states]
                a = {}
                b = { terminal = true }
                island = { terminal = true }
                [[transitions]]
                from = "a"
                do = "go"
                to = "b"
                """,
            )
        assert only_problem(info, tmp_path) == (
            "machine 'm': state 'island' is unreachable from initial 'a' and from every recover "
            "target; remove it or add a transition into it"
        )

    def test_state_reached_only_by_recovery_or_on_error_is_reachable(self, tmp_path: Path) -> None:
        """Recover targets and on_error edges count as ways into a state."""
        define(
            tmp_path,
            """\
            name = "m"
            initial = "a"
            observe = "obs"
            [states]
            a = {}
            b = { terminal = true }
            resumed = {}
            failed = { terminal = true, failure = true }
            [[transitions]]
            from = "a"
            do = "go"
            to = "b"
            on_error = "failed"
            [[transitions]]
            from = "resumed"
            do = "finish"
            to = "b"
            [observations]
            half = "half done"
            [recover]
            half = "resumed"
            """,
        )

    def test_non_terminal_state_without_exit(self, tmp_path: Path) -> None:
        """A non-terminal state with no outgoing transition is named, with the fix."""
        with pytest.raises(MachineDefinitionError) as info:
            define(
                tmp_path,
                """\
                name = "m"
                initial = "a"
                [states]
                a = {}
                stuck = {}
                b = { terminal = true }
                [[transitions]]
                from = "a"
                guard = "g"
                do = "go"
                to = "b"
                [[transitions]]
                from = "a"
                guard = "not g"
                do = "sink"
                to = "stuck"
                """,
            )
        assert only_problem(info, tmp_path) == (
            "machine 'm': state 'stuck' is not terminal and has no outgoing transition; add one "
            "or mark it terminal = true"
        )

    def test_terminal_state_with_exit(self, tmp_path: Path) -> None:
        """A terminal state with an outgoing transition is named with that transition."""
        with pytest.raises(MachineDefinitionError) as info:
            define(
                tmp_path,
                """\
                name = "m"
                initial = "a"
                [states]
                a = {}
                b = { terminal = true }
                [[transitions]]
                from = "a"
                do = "go"
                to = "b"
                [[transitions]]
                from = "b"
                do = "again"
                to = "a"
                """,
            )
        assert only_problem(info, tmp_path) == (
            "machine 'm': terminal state 'b' has outgoing transitions: #1 b --again--> a"
        )

    def test_no_terminal_state(self, tmp_path: Path) -> None:
        """A table without any terminal state is rejected with the fix."""
        with pytest.raises(MachineDefinitionError) as info:
            define(
                tmp_path,
                """\
                name = "m"
                initial = "a"
                [states]
                a = {}
                b = {}
                [[transitions]]
                from = "a"
                do = "go"
                to = "b"
                [[transitions]]
                from = "b"
                do = "back"
                to = "a"
                """,
            )
        assert only_problem(info, tmp_path) == (
            "machine 'm': no terminal state; mark at least one state terminal = true"
        )

    def test_no_states(self, tmp_path: Path) -> None:
        """An empty [states] table is rejected with the fix."""
        with pytest.raises(MachineDefinitionError) as info:
            define(
                tmp_path,
                """\
                name = "m"
                initial = "a"
                transitions = []
                [states]
                """,
            )
        assert "machine 'm': no states declared; add a [states] table" in info.value.problems

    def test_failure_flag_on_non_terminal_state(self, tmp_path: Path) -> None:
        """``failure = true`` on a state that is not terminal is named."""
        with pytest.raises(MachineDefinitionError) as info:
            define(
                tmp_path,
                """\
                name = "m"
                initial = "a"
                [states]
                a = { failure = true }
                b = { terminal = true }
                [[transitions]]
                from = "a"
                do = "go"
                to = "b"
                """,
            )
        assert only_problem(info, tmp_path) == (
            "machine 'm': state 'a': failure = true requires terminal = true"
        )

    def test_two_unguarded_transitions_from_one_state(self, tmp_path: Path) -> None:
        """Two unguarded transitions out of one state are named as able to be enabled together."""
        with pytest.raises(MachineDefinitionError) as info:
            define(
                tmp_path,
                """\
                name = "m"
                initial = "a"
                [states]
                a = {}
                b = { terminal = true }
                c = { terminal = true }
                [[transitions]]
                from = "a"
                do = "go"
                to = "b"
                [[transitions]]
                from = "a"
                do = "stay"
                to = "c"
                """,
            )
        assert only_problem(info, tmp_path) == (
            "machine 'm': state 'a': 2 transitions leave it but #0 a --go--> b, #1 a --stay--> c "
            "has no guard, so more than one can be enabled; guard every transition out of a "
            "branching state"
        )

    def test_same_guard_twice_from_one_state(self, tmp_path: Path) -> None:
        """The same guard with the same polarity on two transitions of one state is named."""
        with pytest.raises(MachineDefinitionError) as info:
            define(
                tmp_path,
                """\
                name = "m"
                initial = "a"
                [states]
                a = {}
                b = { terminal = true }
                c = { terminal = true }
                [[transitions]]
                from = "a"
                guard = "not ready"
                do = "go"
                to = "b"
                [[transitions]]
                from = "a"
                guard = "not ready"
                do = "other"
                to = "c"
                """,
            )
        assert only_problem(info, tmp_path) == (
            "machine 'm': state 'a': guard [not ready] is used by both #0 a [not ready] --go--> b "
            "and #1 a [not ready] --other--> c; both would be enabled together"
        )

    def test_unguarded_and_guarded_mix(self, tmp_path: Path) -> None:
        """An unguarded transition beside a guarded one from the same state is named."""
        with pytest.raises(MachineDefinitionError) as info:
            define(
                tmp_path,
                """\
                name = "m"
                initial = "a"
                [states]
                a = {}
                b = { terminal = true }
                c = { terminal = true }
                [[transitions]]
                from = "a"
                guard = "ready"
                do = "go"
                to = "b"
                [[transitions]]
                from = "a"
                do = "stay"
                to = "c"
                """,
            )
        assert only_problem(info, tmp_path) == (
            "machine 'm': state 'a': 2 transitions leave it but #1 a --stay--> c has no guard, "
            "so more than one can be enabled; guard every transition out of a branching state"
        )

    def test_guard_and_its_negation_pass(self, tmp_path: Path) -> None:
        """A ``g`` / ``not g`` pair out of one state is accepted."""
        define(
            tmp_path,
            """\
            name = "m"
            initial = "a"
            [states]
            a = {}
            b = { terminal = true }
            c = { terminal = true }
            [[transitions]]
            from = "a"
            guard = "ready"
            do = "go"
            to = "b"
            [[transitions]]
            from = "a"
            guard = "not ready"
            do = "stay"
            to = "c"
            """,
        )

    def test_observable_state_missing_from_recover(self, tmp_path: Path) -> None:
        """An observable state without a recover entry is named, with the entry to add."""
        with pytest.raises(MachineDefinitionError) as info:
            define(
                tmp_path,
                """\
                name = "m"
                initial = "a"
                observe = "obs"
                [states]
                a = {}
                b = { terminal = true, observable = true }
                [[transitions]]
                from = "a"
                do = "go"
                to = "b"
                """,
            )
        assert only_problem(info, tmp_path) == (
            "machine 'm': observable state 'b' has no recover entry; add recover.b = <state to "
            "continue in>"
        )

    def test_observation_label_missing_from_recover(self, tmp_path: Path) -> None:
        """A declared observation label without a recover entry is named."""
        with pytest.raises(MachineDefinitionError) as info:
            define(
                tmp_path,
                """\
                name = "m"
                initial = "a"
                observe = "obs"
                [states]
                a = {}
                b = { terminal = true }
                [[transitions]]
                from = "a"
                do = "go"
                to = "b"
                [observations]
                absent = "nothing"
                """,
            )
        assert only_problem(info, tmp_path) == (
            "machine 'm': observation label 'absent' has no recover entry; add recover.absent = "
            "<state to continue in>"
        )

    def test_recover_key_that_is_not_an_observation(self, tmp_path: Path) -> None:
        """A recover key that observe can never report is named, with both fixes."""
        with pytest.raises(MachineDefinitionError) as info:
            define(
                tmp_path,
                """\
                name = "m"
                initial = "a"
                observe = "obs"
                [states]
                a = {}
                b = { terminal = true }
                [[transitions]]
                from = "a"
                do = "go"
                to = "b"
                [recover]
                ghost = "a"
                """,
            )
        assert only_problem(info, tmp_path) == (
            "machine 'm': recover.ghost: 'ghost' is neither an observable state nor a declared "
            "observation label; declare it in [observations] or mark the state observable = true"
        )

    def test_recover_target_undefined(self, tmp_path: Path) -> None:
        """A recover entry pointing to an undeclared state is named."""
        with pytest.raises(MachineDefinitionError) as info:
            define(
                tmp_path,
                """\
                name = "m"
                initial = "a"
                observe = "obs"
                [states]
                a = {}
                b = { terminal = true }
                [[transitions]]
                from = "a"
                do = "go"
                to = "b"
                [observations]
                absent = "nothing"
                [recover]
                absent = "nowhere"
                """,
            )
        assert only_problem(info, tmp_path) == (
            "machine 'm': recover.absent = 'nowhere': not a declared state"
        )

    def test_observations_without_observe_binding(self, tmp_path: Path) -> None:
        """Observations and recover entries without an ``observe`` name are rejected."""
        with pytest.raises(MachineDefinitionError) as info:
            define(
                tmp_path,
                """\
                name = "m"
                initial = "a"
                [states]
                a = {}
                b = { terminal = true }
                [[transitions]]
                from = "a"
                do = "go"
                to = "b"
                [observations]
                absent = "nothing"
                [recover]
                absent = "a"
                """,
            )
        assert only_problem(info, tmp_path) == (
            "machine 'm': observations and recover entries are declared but no observe binding "
            'is named; add observe = "<binding>"'
        )

    def test_every_problem_is_reported_together(self, tmp_path: Path) -> None:
        """One check of a table with many defects names each of them in one error."""
        with pytest.raises(MachineDefinitionError) as info:
            define(
                tmp_path,
                """\
                name = "m"
                initial = "a"
                [states]
                a = { failure = true }
                island = {}
                b = { terminal = true, observable = true }
                [[transitions]]
                from = "a"
                do = "go"
                to = "zz"
                on_error = "oops"
                [[transitions]]
                from = "b"
                do = "again"
                to = "a"
                [recover]
                ghost = "nowhere"
                """,
            )
        expected = [
            "transition #0 a --go--> zz: to state 'zz' is not declared in [states]",
            "transition #0 a --go--> zz: on_error state 'oops' is not declared in [states]",
            "recover.ghost = 'nowhere': not a declared state",
            "state 'a': failure = true requires terminal = true",
            "state 'island' is unreachable from initial 'a'",
            "state 'b' is unreachable from initial 'a'",
            "state 'island' is not terminal and has no outgoing transition",
            "terminal state 'b' has outgoing transitions: #1 b --again--> a",
            "observable state 'b' has no recover entry",
            "recover.ghost: 'ghost' is neither an observable state",
            "observations and recover entries are declared but no observe binding is named",
        ]
        problems = info.value.problems
        assert len(problems) == len(expected), problems
        for fragment, problem in zip(expected, problems, strict=True):
            assert problem.startswith(f"machine 'm': {fragment}")
            assert f"\n  - {problem}" in str(info.value)
        assert str(info.value).startswith(f"{tmp_path / 'm.toml'}: 11 problem(s)")


class TestCheckBindings:
    """Bindings checks: every effect, guard and the observe binding a table names is bound."""

    def test_unbound_effect_guard_and_observe(self, tmp_path: Path) -> None:
        """Each unbound name is reported, effects with the transitions that use them."""
        with pytest.raises(MachineDefinitionError) as info:
            define(tmp_path, VALID, Bindings(effects={"wait": noop}))
        assert info.value.problems == [
            "machine 'm': effect 'finish' (used by #1 b [ready] --finish--> done) is not bound; "
            "tag a function @effect('finish') in the bindings module",
            "machine 'm': effect 'go' (used by #0 a --go--> b) is not bound; "
            "tag a function @effect('go') in the bindings module",
            "machine 'm': guard 'ready' is not bound; "
            "tag a function @guard('ready') in the bindings module",
            "machine 'm': observation 'obs' is not bound; "
            "tag a function @observer('obs') in the bindings module",
        ]

    def test_effect_used_twice_lists_both_users(self, tmp_path: Path) -> None:
        """An unbound effect used by several transitions names all of them."""
        path = tmp_path / "m.toml"
        path.write_text(VALID.replace('do = "wait"', 'do = "go"'), encoding="utf-8")
        table = load_table(path)
        assert check_bindings(table, Bindings(effects={"finish": noop})) == [
            "effect 'go' (used by #0 a --go--> b, #2 b [not ready] --go--> a) is not bound; "
            "tag a function @effect('go') in the bindings module",
            "guard 'ready' is not bound; tag a function @guard('ready') in the bindings module",
            "observation 'obs' is not bound; "
            "tag a function @observer('obs') in the bindings module",
        ]

    def test_machine_construction_checks_bindings(self, tmp_path: Path) -> None:
        """Building a Machine with a missing binding raises the same definition error."""
        path = tmp_path / "m.toml"
        path.write_text(textwrap.dedent(VALID), encoding="utf-8")
        table = load_table(path)
        missing_guard = Bindings(effects=VALID_BINDINGS.effects, observers=VALID_BINDINGS.observers)
        with pytest.raises(MachineDefinitionError) as info:
            Machine(table, missing_guard)
        assert info.value.problems == [
            "machine 'm': guard 'ready' is not bound; "
            "tag a function @guard('ready') in the bindings module"
        ]
        assert str(info.value).startswith(f"{path}: 1 problem(s)")

    def test_machine_construction_checks_the_table(self, tmp_path: Path) -> None:
        """Building a Machine over a malformed table raises before anything runs."""
        path = tmp_path / "m.toml"
        path.write_text(
            textwrap.dedent(
                """\
                name = "m"
                initial = "a"
                [states]
                a = {}
                [[transitions]]
                from = "a"
                do = "go"
                to = "a"
                """
            ),
            encoding="utf-8",
        )
        table = load_table(path)
        with pytest.raises(MachineDefinitionError, match="no terminal state"):
            Machine(table, Bindings(effects={"go": noop}))


class TestTableProblems:
    """table_problems and the individual check functions: pure, return lists of problems."""

    @pytest.fixture
    def table(self, tmp_path: Path) -> MachineTable:
        """The VALID table loaded from a file."""
        path = tmp_path / "m.toml"
        path.write_text(textwrap.dedent(VALID), encoding="utf-8")
        return load_table(path)

    def test_valid_table_has_no_problems(self, table: MachineTable) -> None:
        """Every check returns an empty list for a valid table."""
        assert table_problems(table) == []
        assert table_problems(table, VALID_BINDINGS) == []
        for check in (
            check_state_references,
            check_unreachable,
            check_exits,
            check_single_enabled,
            check_observations,
        ):
            assert check(table) == []

    def test_bindings_are_checked_only_when_given(self, table: MachineTable) -> None:
        """Without bindings no binding problem is reported; with empty bindings all are."""
        assert table_problems(table) == []
        assert table_problems(table, Bindings()) == [
            "effect 'finish' (used by #1 b [ready] --finish--> done) is not bound; "
            "tag a function @effect('finish') in the bindings module",
            "effect 'go' (used by #0 a --go--> b) is not bound; "
            "tag a function @effect('go') in the bindings module",
            "effect 'wait' (used by #2 b [not ready] --wait--> a) is not bound; "
            "tag a function @effect('wait') in the bindings module",
            "guard 'ready' is not bound; tag a function @guard('ready') in the bindings module",
            "observation 'obs' is not bound; "
            "tag a function @observer('obs') in the bindings module",
        ]
