"""The exception hierarchy of statecraft.

Every error statecraft raises derives from :class:`StatecraftError` and also from the builtin
that matches its meaning (a configuration error is a ``ValueError``, a store conflict is a
``FileExistsError``), so callers can catch either. Messages name the culprit, state what was
expected and what was found, and end with what to do. Structured fields carry the same facts
for programs (the CLI's ``--json`` output reuses them).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = [
    "CheckpointCorruptError",
    "CheckpointError",
    "ConfigError",
    "ConfigIssue",
    "MachineDefinitionError",
    "MachineRuntimeError",
    "NotSupportedYetError",
    "PlanDriftError",
    "ResumeError",
    "SpecError",
    "StatecraftError",
    "StoreConflictError",
    "StoreError",
    "TrackingError",
    "TrainerStateError",
]


class StatecraftError(Exception):
    """Root of every error statecraft raises on purpose."""

    code: str = "statecraft_error"


class MachineDefinitionError(StatecraftError, ValueError):
    """A transition table is malformed or does not match its bindings.

    ``problems`` lists every defect found, each already prefixed with its location
    (``machines/save.toml: state 'x': ...``), so one run of the checker reports them all.
    """

    code = "machine_definition"

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        self.source = source
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(
            f"{source}: {len(self.problems)} problem(s) in the machine table:\n{lines}"
        )


class MachineRuntimeError(StatecraftError, RuntimeError):
    """The runner met a situation the table forbids (no or several enabled transitions,
    an observation label the table does not declare)."""

    code = "machine_runtime"

    def __init__(self, machine: str, state: str, message: str) -> None:
        self.machine = machine
        self.state = state
        super().__init__(f"machine {machine!r} in state {state!r}: {message}")


class SpecError(StatecraftError, ValueError):
    """A spec file is malformed or names a check that cannot be imported."""

    code = "spec_definition"


class ConfigIssue:
    """One invalid configuration value: where it is, what was found, what is allowed."""

    __slots__ = ("allowed", "found", "path")

    def __init__(self, path: str, found: object, allowed: str) -> None:
        self.path = path
        self.found = found
        self.allowed = allowed

    def __str__(self) -> str:
        return f"{self.path}: got {self.found!r}; expected {self.allowed}"

    def __repr__(self) -> str:
        return f"ConfigIssue({self.path!r}, {self.found!r}, {self.allowed!r})"


class ConfigError(StatecraftError, ValueError):
    """Configuration values are malformed; ``issues`` lists every one found."""

    code = "config_invalid"

    def __init__(self, issues: Iterable[ConfigIssue], *, source: str = "checkpoint config") -> None:
        self.issues = list(issues)
        self.source = source
        lines = "\n".join(f"  - {i}" for i in self.issues)
        super().__init__(
            f"{source}: {len(self.issues)} invalid value(s):\n{lines}\n"
            "Fix the listed knobs (YAML file or key=value overrides) and start again."
        )


class NotSupportedYetError(StatecraftError, NotImplementedError):
    """A knob is valid but the feature that would honour it is not built yet.

    Raised instead of silently ignoring the knob.
    """

    code = "not_supported_yet"

    def __init__(self, knob: str, value: object, what_to_do: str) -> None:
        self.knob = knob
        self.value = value
        super().__init__(
            f"{knob}={value!r} is accepted by the schema but not supported yet by this "
            f"statecraft release; {what_to_do}"
        )


class StoreError(StatecraftError, OSError):
    """A store operation failed; the store's durability contract still holds."""

    code = "store_error"


class StoreConflictError(StoreError, FileExistsError):
    """An exclusive create found the name already taken; nothing was overwritten."""

    code = "store_conflict"


class CheckpointError(StatecraftError, RuntimeError):
    """A checkpoint transaction cannot proceed without risking committed state."""

    code = "checkpoint_error"


class PlanDriftError(CheckpointError):
    """A same-iteration retry asked for a different plan than the committed one.

    A committed iteration is never rewritten; the retry fails closed.
    """

    code = "plan_drift"


class CheckpointCorruptError(CheckpointError):
    """A checkpoint's bytes or records do not match what its manifest promises."""

    code = "checkpoint_corrupt"

    def __init__(self, path: str, problem: str, what_to_do: str = "") -> None:
        self.path = path
        self.problem = problem
        tail = f" {what_to_do}" if what_to_do else ""
        super().__init__(f"{path}: {problem}.{tail}")


class TrainerStateError(CheckpointError, ValueError):
    """Trainer control state (clocks, RNG, scheduler identity) is malformed or contradictory."""

    code = "trainer_state"


class ResumeError(CheckpointError):
    """Resume cannot pick a source without risking silent divergence; nothing was loaded."""

    code = "resume_refused"


class TrackingError(StatecraftError, TypeError):
    """An object registered with ``Checkpointer.track`` cannot be checkpointed, or a required
    one is missing."""

    code = "tracking"
