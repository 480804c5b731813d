"""Tests for statecraft.engine.tagging: decorators tag effects, guards and observations where
they are defined; collect_bindings builds the Bindings from the tags."""

from __future__ import annotations

import types

import pytest

from statecraft.checkpoint.resume import bindings as resume
from statecraft.checkpoint.save import bindings as save
from statecraft.engine.tagging import Role, Tag, collect_bindings, effect, guard, observer, tag_of
from statecraft.errors import MachineDefinitionError


def plain(ctx: object) -> None:
    """An untagged function."""


class TestDecorators:
    def test_tags_do_not_change_the_function(self) -> None:
        """A decorator returns the very function it was given, still directly callable."""

        def write(ctx: list[int]) -> None:
            ctx.append(1)

        tagged = effect("write_it")(write)
        assert tagged is write
        calls: list[int] = []
        tagged(calls)
        assert calls == [1]
        assert tag_of(write) == Tag("effect", "write_it", Role.COORDINATOR)

    def test_default_names_and_roles(self) -> None:
        """Without a name the function's name is used; guards run on every rank, observers and
        effects on the coordinator unless told otherwise."""

        @guard()
        def ready(ctx: object) -> bool:
            return True

        @observer()
        def look(ctx: object) -> str:
            return "absent"

        @effect(role=Role.EVERY_RANK)
        def load(ctx: object) -> None:
            pass

        assert tag_of(ready) == Tag("guard", "ready", Role.EVERY_RANK)
        assert tag_of(look) == Tag("observer", "look", Role.COORDINATOR)
        assert tag_of(load) == Tag("effect", "load", Role.EVERY_RANK)
        assert tag_of(plain) is None

    @pytest.mark.parametrize("name", ["two words", "", "1st", 3])
    def test_bad_names_raise(self, name: object) -> None:
        """A name that is not an identifier is a definition error naming the decorator."""
        with pytest.raises(MachineDefinitionError) as info:
            effect(name)  # type: ignore[arg-type]
        assert info.value.source == "@effect"
        assert info.value.problems == [
            f"name {name!r} must be an identifier, as the table spells it"
        ]

    def test_bad_role_raises(self) -> None:
        """A role that is not a Role member is a definition error."""
        with pytest.raises(MachineDefinitionError) as info:
            effect("go", role="coordinator")  # type: ignore[arg-type]
        assert info.value.problems == ["role 'coordinator' must be a Role member"]

    def test_tagging_a_non_callable_raises(self) -> None:
        """Only callables can be tagged."""
        with pytest.raises(MachineDefinitionError, match="42 is not callable"):
            guard("g")(42)  # type: ignore[type-var]


class TestCollectBindings:
    def test_finds_every_tagged_name_with_its_role(self) -> None:
        """Every tagged callable of a module lands in its kind, with the effect's role;
        untagged values are ignored."""
        module = types.ModuleType("unit_bindings")

        @effect("write", role=Role.EVERY_RANK)
        def write(ctx: object) -> None:
            pass

        @effect()
        def commit(ctx: object) -> None:
            pass

        @guard("done")
        def done(ctx: object) -> bool:
            return False

        @observer("observe_unit")
        def look(ctx: object) -> str:
            return "absent"

        for value in (write, commit, done, look, plain, 7):
            setattr(module, getattr(value, "__name__", "seven"), value)
        bindings = collect_bindings(module)
        assert bindings.effects == {"commit": commit, "write": write}
        assert bindings.guards == {"done": done}
        assert bindings.observers == {"observe_unit": look}
        assert bindings.roles == {"commit": Role.COORDINATOR, "write": Role.EVERY_RANK}

    def test_mappings_and_iterables(self) -> None:
        """Sources may be mappings or iterables; the same function seen twice counts once."""

        @effect("go")
        def go(ctx: object) -> None:
            pass

        bindings = collect_bindings({"a": go}, [go, plain])
        assert bindings.effects == {"go": go}

    def test_a_name_bound_twice_names_both_definitions(self) -> None:
        """Two callables claiming one name is a definition error naming both, with the fix."""

        @effect("go")
        def first(ctx: object) -> None:
            pass

        @effect("go")
        def second(ctx: object) -> None:
            pass

        with pytest.raises(MachineDefinitionError) as info:
            collect_bindings([first, second])
        (problem,) = info.value.problems
        assert problem.startswith("effect 'go' is bound twice: ")
        assert "test_a_name_bound_twice_names_both_definitions.<locals>.first" in problem
        assert "test_a_name_bound_twice_names_both_definitions.<locals>.second" in problem
        assert problem.endswith("rename one of them")

    def test_same_name_different_kinds_is_fine(self) -> None:
        """An effect and a guard may share a name: they are looked up by kind."""

        @effect("check")
        def do_check(ctx: object) -> None:
            pass

        @guard("check")
        def is_checked(ctx: object) -> bool:
            return True

        bindings = collect_bindings([do_check, is_checked])
        assert bindings.effects == {"check": do_check}
        assert bindings.guards == {"check": is_checked}

    def test_shipped_modules_collect_their_own_bindings(self) -> None:
        """save_bindings()/resume_bindings() are exactly what collecting their module gives."""
        assert save.save_bindings() == collect_bindings(save)
        assert resume.resume_bindings() == collect_bindings(resume)
