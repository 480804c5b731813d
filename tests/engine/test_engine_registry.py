"""Tests for statecraft.engine.registry (transactions discovered from a machines directory) and
its shipped-directory wrapper statecraft.checkpoint.kernel.machines."""

from __future__ import annotations

import attrs
import pytest

from statecraft.checkpoint.kernel import machines as shipped
from statecraft.checkpoint.resume import bindings as resume
from statecraft.checkpoint.save import bindings as save
from statecraft.engine import Machine, discover, load_table, transaction_names
from statecraft.engine.registry import import_object, load_bindings, load_machine, load_transaction
from statecraft.errors import MachineDefinitionError, SpecError, StatecraftError
from statecraft.proofs.resume.scenarios import resume_scenarios
from statecraft.proofs.save.scenarios import save_scenarios
from statecraft.resources import machine_path, machines_dir, specs_dir


class TestDiscover:
    def test_shipped_transactions(self) -> None:
        """Every shipped table is a transaction with its spec, bindings and scenarios."""
        found = {t.name: t for t in discover(machines_dir(), specs_dir())}
        assert set(found) == set(transaction_names(machines_dir()))
        assert {"save", "resume"} <= set(found)
        assert found["save"].table.bindings == "statecraft.checkpoint.save.bindings"
        assert found["save"].bindings == save.save_bindings()
        assert found["resume"].bindings == resume.resume_bindings()
        assert found["save"].scenarios_factory() is save_scenarios
        assert found["resume"].scenarios_factory() is resume_scenarios
        assert isinstance(found["save"].machine(), Machine)

    def test_unknown_machine(self, tmp_path) -> None:
        """Loading a table that is not there names the directory and the tables it has."""
        with pytest.raises(StatecraftError) as info:
            load_machine("nope", machines_dir())
        assert "no machine 'nope'" in str(info.value)
        assert ", resume, " in str(info.value)
        assert ", save" in str(info.value)
        with pytest.raises(StatecraftError, match=r"tables in .*: none"):
            load_machine("nope", tmp_path)

    def test_missing_spec(self, tmp_path) -> None:
        """A transaction without a spec is refused with the file to write."""
        with pytest.raises(SpecError, match=r"has no contract; write save\.toml in"):
            load_transaction("save", machines_dir(), tmp_path)


class TestImports:
    def test_import_object_errors(self) -> None:
        """A malformed, missing or non-callable path is a SpecError naming the file."""
        with pytest.raises(SpecError, match=r"x\.toml: scenarios factory 'nocolon' must be"):
            import_object("nocolon", what="scenarios factory", source="x.toml")
        with pytest.raises(SpecError, match=r"cannot import the check 'no_such_mod_q:f'"):
            import_object("no_such_mod_q:f", what="check", source="x.toml")
        with pytest.raises(SpecError, match=r"'statecraft\.resources:__doc__' is .*not a callable"):
            import_object("statecraft.resources:__doc__", what="check", source="x.toml")

    def test_table_without_bindings_key(self) -> None:
        """A table loaded without a bindings key cannot be bound by the registry."""
        table = load_table(machine_path("save"))
        with pytest.raises(MachineDefinitionError, match="no bindings key"):
            load_bindings(attrs.evolve(table, bindings=None))


class TestShippedWrapper:
    def test_load_machine_keeps_its_signature(self) -> None:
        """checkpoint.machines.load_machine(name) still loads a shipped machine."""
        assert shipped.load_machine("save").table.name == "save"
        with pytest.raises(StatecraftError, match="no machine 'nope'"):
            shipped.load_machine("nope")

    def test_machine_bindings_are_derived(self) -> None:
        """machine_bindings(name) collects the bindings of any table in machines/ from the
        module its table names; there is no hand-kept list of them."""
        assert shipped.shipped_machine_names() == sorted(
            p.stem for p in machines_dir().glob("*.toml")
        )
        for name in shipped.shipped_machine_names():
            assert shipped.machine_bindings(name).effects, name
        assert shipped.machine_bindings("save") == save.save_bindings()
        assert not hasattr(shipped, "MACHINE_BINDINGS")
        with pytest.raises(StatecraftError, match="no machine 'nope'"):
            shipped.machine_bindings("nope")
