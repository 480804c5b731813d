"""Contracts checked against tables (statecraft.engine.contract, run by ``machines check``):
one test per kind of mismatch, each asserting the message names the file, the guarantee or
effect at fault, and the fix."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from transaction_unit_files import Unit, unit_factory

from statecraft.cli import main
from statecraft.engine import contract_problems, load_spec, load_table

SPEC = "specs/swap.toml"
TABLE = "machines/swap.toml"


@pytest.fixture
def make_unit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Unit]]:
    """Writes swap units into ``tmp_path``."""
    yield from unit_factory(tmp_path, monkeypatch)


def problems(capsys: pytest.CaptureFixture[str], unit: Unit) -> list[str]:
    """The error messages of ``machines check`` on ``unit`` (which must fail)."""
    code = main(["machines", "check", *unit.dirs, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1, out
    assert out["status"] == "error"
    return [e["message"] for e in out["errors"]]


def only(messages: list[str]) -> str:
    (message,) = messages
    return message


class TestSpecNamesItsMachine:
    def test_machine_key_differs_from_the_table(self, make_unit, capsys) -> None:
        """A spec whose ``machine`` is not the table's name is rejected with the name to set."""
        unit = make_unit()
        unit.edit(SPEC, 'machine = "swap"', 'machine = "swop"')
        message = only(problems(capsys, unit))
        assert str(unit.specs_dir / "swap.toml") in message
        assert "machine = 'swop' but the table" in message
        assert "set machine = 'swap'" in message

    def test_spec_file_named_after_another_machine(self, make_unit) -> None:
        """contract_problems rejects a spec file not named <machine>.toml."""
        unit = make_unit()
        other = unit.specs_dir / "other.toml"
        other.write_text((unit.specs_dir / "swap.toml").read_text())
        table = load_table(unit.machines_dir / "swap.toml")
        message = only(contract_problems(table, load_spec(other)))
        assert str(other) in message
        assert "must be named swap.toml; rename the file" in message

    def test_spec_without_a_table(self, make_unit, capsys) -> None:
        """A spec for a machine that has no table is reported with both paths and the fix."""
        unit = make_unit()
        (unit.specs_dir / "ghost.toml").write_text((unit.specs_dir / "swap.toml").read_text())
        message = only(problems(capsys, unit))
        assert str(unit.specs_dir / "ghost.toml") in message
        assert f"covers machine 'ghost' but {unit.machines_dir / 'ghost.toml'}" in message
        assert "add the table or remove the spec" in message

    def test_table_without_a_spec(self, make_unit, capsys) -> None:
        """A table with no spec of the same name is reported: every transaction has a contract."""
        unit = make_unit()
        (unit.specs_dir / "swap.toml").unlink()
        message = only(problems(capsys, unit))
        assert "machine 'swap' has no contract; write swap.toml in" in message


class TestWrittenBy:
    def test_written_by_names_no_effect(self, make_unit, capsys) -> None:
        """written_by must name an effect of the table; the message lists the effects."""
        unit = make_unit()
        unit.edit(SPEC, 'written_by = "switch_pointer"', 'written_by = "flip_pointer"')
        message = only(problems(capsys, unit))
        assert str(unit.specs_dir / "swap.toml") in message
        assert "format file 'current': written_by = 'flip_pointer' is not an effect" in message
        assert "(effects: switch_pointer, write_data); name the effect that writes it" in message

    def test_written_by_missing(self, make_unit, capsys) -> None:
        """A format file without written_by is an error (it used to become '?')."""
        unit = make_unit()
        unit.edit(SPEC, 'written_by = "switch_pointer"\n', "")
        message = only(problems(capsys, unit))
        assert str(unit.specs_dir / "swap.toml") in message
        assert "format.files[1] (current): written_by must name the effect" in message


class TestChecksResolve:
    def test_check_path_that_does_not_import(self, make_unit, capsys) -> None:
        """A guarantee whose check cannot be imported is named with the path and the fix."""
        unit = make_unit()
        unit.edit(SPEC, "_scenarios:recovery_completes_swap", "_scenarios:recovery_finishes")
        message = only(problems(capsys, unit))
        assert str(unit.specs_dir / "swap.toml") in message
        assert "guarantee SWAP-RECOVERS: cannot import check" in message
        assert "fix the check path (module:callable)" in message


class TestGuaranteesExercised:
    def test_no_phase(self, make_unit, capsys) -> None:
        """A guarantee with ``at = []`` is never checked and is rejected."""
        unit = make_unit()
        unit.edit(SPEC, 'at = ["recovered"]', "at = []")
        message = only(problems(capsys, unit))
        assert "guarantee SWAP-RECOVERS: at = [] selects no phase" in message
        assert "list 'crashed' and/or 'recovered'" in message

    def test_no_crash_kind_the_explorer_applies(self, make_unit) -> None:
        """A guarantee limited to crash kinds the explorer does not apply is never checked."""
        unit = make_unit()
        table = load_table(unit.machines_dir / "swap.toml")
        spec = load_spec(unit.specs_dir / "swap.toml")
        message = only(contract_problems(table, spec, crash_kinds=("node_loss",)))
        assert str(unit.specs_dir / "swap.toml") in message
        assert "guarantee SWAP-RECOVERS: kinds = ['process_kill', 'power_loss']" in message
        assert "list at least one of them" in message

    def test_empty_kinds(self, make_unit, capsys) -> None:
        """``kinds = []`` is rejected by machines check."""
        unit = make_unit()
        unit.edit(SPEC, 'kinds = ["process_kill", "power_loss"]', "kinds = []")
        assert "guarantee SWAP-RECOVERS: kinds = [] selects no crash kind" in only(
            problems(capsys, unit)
        )

    def test_no_scenarios_key(self, make_unit, capsys) -> None:
        """A spec without a scenarios factory exercises nothing and is rejected."""
        unit = make_unit()
        unit.edit(SPEC, f'scenarios = "{unit.mod}_scenarios:scenarios"\n', "")
        message = only(problems(capsys, unit))
        assert str(unit.specs_dir / "swap.toml") in message
        assert "no scenarios key; add scenarios = 'module:callable'" in message

    def test_scenarios_factory_does_not_import(self, make_unit, capsys) -> None:
        """A scenarios path that does not import is named with the fix."""
        unit = make_unit()
        unit.edit(SPEC, "_scenarios:scenarios", "_scenarios:scenaros")
        message = only(problems(capsys, unit))
        assert f"cannot import the scenarios factory '{unit.mod}_scenarios:scenaros'" in message
        assert "fix the module path or put the module on sys.path" in message

    def test_scenarios_factory_returns_nothing(self, make_unit, capsys) -> None:
        """A factory returning no scenario leaves every guarantee unexercised."""
        unit = make_unit()
        unit.edit("{mod}_scenarios.py", "return [SwapScenario()]", "return []")
        message = only(problems(capsys, unit))
        assert "returned no scenario, so no guarantee (SWAP-COMPLETE, SWAP-RECOVERS)" in message
        assert "return at least one scenario" in message

    def test_scenarios_factory_raises(self, make_unit, capsys) -> None:
        """A factory that raises is reported with the exception and the fix."""
        unit = make_unit()
        unit.edit("{mod}_scenarios.py", "return [SwapScenario()]", "raise OSError('disk')")
        message = only(problems(capsys, unit))
        assert "raised OSError: disk; fix the factory" in message

    def test_malformed_scenarios_key(self, make_unit, capsys) -> None:
        """A scenarios value that is not module:callable is a spec error."""
        unit = make_unit()
        unit.edit(SPEC, f'"{unit.mod}_scenarios:scenarios"', '"scenarios"')
        assert "scenarios must be 'module:callable'" in only(problems(capsys, unit))


class TestSchemas:
    def test_schema_file_missing(self, make_unit, capsys) -> None:
        """A format file naming a schema that does not exist is reported."""
        unit = make_unit()
        unit.edit(SPEC, 'doc = "The new version."', 'doc = "v2"\nschema = "x.json"')
        message = only(problems(capsys, unit))
        assert f"cannot read schema {unit.specs_dir / 'x.json'}" in message

    def test_schema_not_json(self, make_unit, capsys) -> None:
        """A schema file that is not JSON is reported."""
        unit = make_unit()
        (unit.specs_dir / "x.json").write_text("{not json")
        unit.edit(SPEC, 'doc = "The new version."', 'doc = "v2"\nschema = "x.json"')
        assert f"cannot read schema {unit.specs_dir / 'x.json'}" in only(problems(capsys, unit))

    def test_schema_not_a_json_schema(self, make_unit, capsys) -> None:
        """A JSON file that is not a valid JSON Schema is reported with why and the fix."""
        unit = make_unit()
        (unit.specs_dir / "x.json").write_text('{"type": "thing"}')
        unit.edit(SPEC, 'doc = "The new version."', 'doc = "v2"\nschema = "x.json"')
        message = only(problems(capsys, unit))
        assert "format file 'data.v2': schema 'x.json' is not a valid JSON Schema" in message
        assert "'thing' is not valid under any of the given schemas" in message
        assert "fix the schema file" in message


class TestBindings:
    def test_no_bindings_key(self, make_unit, capsys) -> None:
        """A table without a bindings key is reported with the key to add."""
        unit = make_unit()
        unit.edit(TABLE, f'bindings = "{unit.mod}_bindings"\n', "")
        message = only(problems(capsys, unit))
        assert str(unit.machines_dir / "swap.toml") in message
        assert "no bindings key: add bindings = 'package.module'" in message

    def test_bindings_module_does_not_import(self, make_unit, capsys) -> None:
        """A bindings module that cannot be imported is named with the fix."""
        unit = make_unit()
        unit.edit(TABLE, f'bindings = "{unit.mod}_bindings"', 'bindings = "no_such_module_x"')
        message = only(problems(capsys, unit))
        assert "bindings module 'no_such_module_x' cannot be imported" in message
        assert "fix the bindings key or put the module on sys.path" in message

    def test_a_name_left_unbound(self, make_unit, capsys) -> None:
        """An effect of the table that the module does not tag is reported."""
        unit = make_unit()
        unit.edit("{mod}_bindings.py", "@effect()\ndef switch_pointer", "def switch_pointer")
        message = only(problems(capsys, unit))
        assert str(unit.machines_dir / "swap.toml") in message
        assert (
            "effect 'switch_pointer' (used by #1 data_durable --switch_pointer--> committed)"
            in message
        )
        assert message.endswith(
            "is not bound; tag a function @effect('switch_pointer') in the bindings module"
        )
