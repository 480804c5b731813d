"""Transactions discovered from a machines directory, not listed by hand.

A transaction is a unit of four files (``docs/machines.md``):

- ``<machines_dir>/<name>.toml``: the table; its ``bindings = "package.module"`` key names the
  module whose ``@effect``/``@guard``/``@observer`` tagged functions bind the table's names;
- ``<specs_dir>/<name>.toml``: the contract; its ``scenarios = "module:callable"`` key names the
  factory of the crash scenarios that exercise the guarantees;
- the bindings module, and the scenarios and checks modules the spec names.

The set of transactions is the set of ``*.toml`` tables in a machines directory; adding one
edits no list in the library. Nothing here is cached: every call reads the files again (imports
are cached by Python).

Example:
    >>> names = transaction_names(machines_dir)            # doctest: +SKIP
    >>> machine = load_machine("save", machines_dir)       # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import attrs

from statecraft.engine.bindings import Bindings
from statecraft.engine.loader import load_table
from statecraft.engine.runner import Machine
from statecraft.engine.spec import Spec, load_spec
from statecraft.engine.table import MachineTable
from statecraft.engine.tagging import collect_bindings
from statecraft.errors import MachineDefinitionError, SpecError, StatecraftError

__all__ = [
    "ScenariosFactory",
    "Transaction",
    "discover",
    "import_object",
    "load_bindings",
    "load_machine",
    "load_transaction",
    "scenarios_factory",
    "transaction_names",
]


#: What a spec's ``scenarios`` key names: a callable returning the crash scenarios. ``Any``:
#: a scenario is the proofs harness's type, a layer above the engine, which only hands the
#: factory over.
ScenariosFactory = Callable[[], Sequence[Any]]


@attrs.frozen
class Transaction:
    """One discovered transaction: its table, its contract and its bindings.

    Attributes:
        name: the table's file stem (== the table's ``name`` and the spec's ``machine``;
            ``machines check`` reports a mismatch).
        table: the loaded table.
        spec: the loaded contract.
        bindings: the callables collected from the table's bindings module.
    """

    name: str
    table: MachineTable
    spec: Spec
    bindings: Bindings

    def machine(self) -> Machine:
        """A machine running ``table`` with ``bindings`` (checked when built)."""
        return Machine(self.table, self.bindings)

    def scenarios_factory(self) -> ScenariosFactory:
        """The callable the spec's ``scenarios`` key names.

        Raises:
            SpecError: the spec has no ``scenarios`` key, or it does not import to a callable.
        """
        return scenarios_factory(self.spec)


def transaction_names(machines_dir: str | Path) -> list[str]:
    """The names of the tables in ``machines_dir`` (file stems of ``*.toml``), sorted."""
    return sorted(p.stem for p in Path(machines_dir).glob("*.toml"))


def import_object(path: str, *, what: str, source: str) -> Callable[..., object]:
    """Import ``module:attribute`` and return the attribute, which must be callable.

    Args:
        path: ``package.module:name``.
        what: what the object is for, used in the error (``"scenarios factory"``).
        source: the file that names ``path``, used in the error.

    Raises:
        SpecError: ``path`` is malformed, the module or attribute cannot be imported, or the
            attribute is not callable.
    """
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise SpecError(f"{source}: {what} {path!r} must be 'module:callable'")
    try:
        value: object = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise SpecError(
            f"{source}: cannot import the {what} {path!r}: {exc}; fix the module path or put "
            "the module on sys.path"
        ) from None
    if not callable(value):
        raise SpecError(f"{source}: the {what} {path!r} is {value!r}, not a callable")
    return value


def scenarios_factory(spec: Spec) -> ScenariosFactory:
    """The scenarios factory named by ``spec.scenarios``.

    Raises:
        SpecError: the spec has no ``scenarios`` key, or it does not import to a callable.
    """
    if spec.scenarios is None:
        raise SpecError(
            f"{spec.source}: no scenarios key; add scenarios = 'module:callable' naming the "
            "factory of the crash scenarios that exercise its guarantees"
        )
    factory = import_object(spec.scenarios, what="scenarios factory", source=spec.source)
    return cast(ScenariosFactory, factory)  # callable; its signature is the spec's promise


def load_bindings(table: MachineTable) -> Bindings:
    """Import the table's bindings module and collect its tagged callables.

    Raises:
        MachineDefinitionError: the table has no ``bindings`` key, the module does not import,
            or two of its callables claim the same name.
    """
    if table.bindings is None:
        raise MachineDefinitionError(
            table.source,
            [
                "no bindings key: add bindings = 'package.module' naming the module whose "
                "@effect/@guard/@observer functions bind this table"
            ],
        )
    try:
        module = importlib.import_module(table.bindings)
    except ImportError as exc:
        raise MachineDefinitionError(
            table.source,
            [
                f"bindings module {table.bindings!r} cannot be imported: {exc}; fix the "
                "bindings key or put the module on sys.path"
            ],
        ) from None
    return collect_bindings(module)


def _table_path(name: str, machines_dir: str | Path) -> Path:
    path = Path(machines_dir) / f"{name}.toml"
    if not path.is_file():
        known = ", ".join(transaction_names(machines_dir)) or "none"
        raise StatecraftError(
            f"no machine {name!r}: {path} does not exist; tables in {machines_dir}: {known}"
        )
    return path


def load_machine(name: str, machines_dir: str | Path) -> Machine:
    """Load, bind and check the table ``name`` of ``machines_dir`` (its spec is not read).

    Raises:
        StatecraftError: there is no table ``<machines_dir>/<name>.toml``.
        MachineDefinitionError: the table, its bindings module or a static check fails.
    """
    table = load_table(_table_path(name, machines_dir))
    return Machine(table, load_bindings(table))


def load_transaction(name: str, machines_dir: str | Path, specs_dir: str | Path) -> Transaction:
    """Load the table ``name``, its bindings and its spec ``<specs_dir>/<name>.toml``.

    Raises:
        StatecraftError: there is no table ``name``.
        MachineDefinitionError: the table or its bindings module is broken.
        SpecError: the spec is missing or malformed.
    """
    table = load_table(_table_path(name, machines_dir))
    bindings = load_bindings(table)
    spec_path = Path(specs_dir) / f"{name}.toml"
    if not spec_path.is_file():
        raise SpecError(
            f"{spec_path}: machine {name!r} ({table.source}) has no contract; write "
            f"{spec_path.name} in {specs_dir} (docs/specs.md)"
        )
    return Transaction(name, table, load_spec(spec_path), bindings)


def discover(machines_dir: str | Path, specs_dir: str | Path) -> list[Transaction]:
    """Every transaction whose table is in ``machines_dir``, sorted by name.

    Raises:
        StatecraftError: the first transaction that does not load (see :func:`load_transaction`).
    """
    return [load_transaction(n, machines_dir, specs_dir) for n in transaction_names(machines_dir)]
