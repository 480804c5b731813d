"""Errors of the machinery the checkpoint code is written in: a malformed transition table, a
runner meeting a situation its table forbids, a malformed spec, a crash-harness guarantee that
does not hold."""

from __future__ import annotations

from collections.abc import Sequence

from statecraft.errors._base import StatecraftError

__all__ = ["GuaranteeViolation", "MachineDefinitionError", "MachineRuntimeError", "SpecError"]


class MachineDefinitionError(StatecraftError, ValueError):
    """A transition table is malformed or does not match its bindings.

    ``problems`` lists every defect found, each already prefixed with its location
    (``machines/save.toml: state 'x': ...``), so one run of the checker reports them all.
    """

    code = "machine_definition"
    source: str
    problems: list[str]

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(
            f"{source}: {len(problems)} problem(s) in the machine table:\n{lines}",
            source=source,
            problems=list(problems),
        )


class MachineRuntimeError(StatecraftError, RuntimeError):
    """The runner met a situation the table forbids (no or several enabled transitions,
    an observation label the table does not declare)."""

    code = "machine_runtime"
    machine: str
    state: str

    def __init__(self, machine: str, state: str, message: str) -> None:
        super().__init__(
            f"machine {machine!r} in state {state!r}: {message}", machine=machine, state=state
        )


class SpecError(StatecraftError, ValueError):
    """A spec file is malformed or names a check that cannot be imported."""

    code = "spec_definition"


class GuaranteeViolation(StatecraftError, AssertionError):
    """Raised by a crash-harness check when its guarantee does not hold in the state it was
    given."""

    code = "guarantee_violation"
