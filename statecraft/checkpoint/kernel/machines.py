"""The shipped transactions: the tables in ``machines/``, bound by the modules they name.

Nothing here lists a transaction: a table's ``bindings`` key names its bindings module and
:mod:`statecraft.engine.registry` discovers the tables. This module only supplies the shipped
directories.
"""

from __future__ import annotations

import functools

from statecraft.engine import Bindings, Machine, load_table, registry
from statecraft.errors import StatecraftError
from statecraft.resources import machine_path, machines_dir

__all__ = ["load_machine", "machine_bindings", "shipped_machine_names"]


def shipped_machine_names() -> list[str]:
    """Names of the tables in ``machines/``."""
    return registry.transaction_names(machines_dir())


def load_machine(name: str) -> Machine:
    """Load, check and bind the shipped table ``name``.

    Raises:
        StatecraftError: there is no shipped table ``name``.
        MachineDefinitionError: the table or its bindings fail a static check.
    """
    return registry.load_machine(name, machines_dir())


@functools.cache
def shipped_machine(name: str) -> Machine:
    """The shipped table ``name``, loaded and checked once per process (a ``Machine`` is
    immutable; every run has its own state), for callers on a hot path such as every save.

    Raises:
        as :func:`load_machine`.
    """
    return load_machine(name)


def machine_bindings(name: str) -> Bindings:
    """The bindings of the shipped table ``name``, collected from the module it names.

    Raises:
        StatecraftError: there is no shipped table ``name``.
        MachineDefinitionError: its bindings module is missing or broken.
    """
    path = machine_path(name)
    if not path.is_file():
        raise StatecraftError(
            f"no machine {name!r} in {machines_dir()}; "
            f"shipped: {', '.join(shipped_machine_names())}"
        )
    return registry.load_bindings(load_table(path))
