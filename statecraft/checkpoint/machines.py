"""The registry binding each shipped table in ``machines/`` to its effects."""

from __future__ import annotations

from collections.abc import Callable

from statecraft.checkpoint.transactions.resume import resume_bindings
from statecraft.checkpoint.transactions.save import save_bindings
from statecraft.engine import Bindings, Machine, load_table
from statecraft.errors import StatecraftError
from statecraft.resources import machine_path, machines_dir

__all__ = ["MACHINE_BINDINGS", "load_machine", "shipped_machine_names"]

#: machine name -> factory of its bindings (read-only).
MACHINE_BINDINGS: dict[str, Callable[[], Bindings]] = {
    "resume": resume_bindings,
    "save": save_bindings,
}


def shipped_machine_names() -> list[str]:
    """Names of the tables in ``machines/``."""
    return sorted(p.stem for p in machines_dir().glob("*.toml"))


def load_machine(name: str) -> Machine:
    """Load, check and bind the shipped table ``name``.

    Raises:
        StatecraftError: no bindings are registered for ``name``.
        MachineDefinitionError: the table or its bindings fail a static check.
    """
    if name not in MACHINE_BINDINGS:
        raise StatecraftError(
            f"no bindings registered for machine {name!r}; known: {sorted(MACHINE_BINDINGS)}"
        )
    return Machine(load_table(machine_path(name)), MACHINE_BINDINGS[name]())
