"""Errors of the configuration: every invalid knob value (:class:`ConfigIssue`, collected into
one :class:`ConfigError`), and a valid knob whose feature is not built yet."""

from __future__ import annotations

from collections.abc import Iterable

from statecraft.errors._base import StatecraftError

__all__ = ["ConfigError", "ConfigIssue", "NotSupportedYetError"]


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
    issues: list[ConfigIssue]
    source: str

    def __init__(self, issues: Iterable[ConfigIssue], *, source: str = "checkpoint config") -> None:
        issues = list(issues)
        lines = "\n".join(f"  - {i}" for i in issues)
        super().__init__(
            f"{source}: {len(issues)} invalid value(s):\n{lines}\n"
            "Fix the listed knobs (YAML file or key=value overrides) and start again.",
            issues=issues,
            source=source,
        )


class NotSupportedYetError(StatecraftError, NotImplementedError):
    """A knob is valid but the feature that would honour it is not built yet.

    Raised instead of silently ignoring the knob.
    """

    code = "not_supported_yet"
    knob: str
    value: object

    def __init__(self, knob: str, value: object, what_to_do: str) -> None:
        super().__init__(
            f"{knob}={value!r} is accepted by the schema but not supported yet by this "
            f"statecraft release; {what_to_do}",
            knob=knob,
            value=value,
        )
