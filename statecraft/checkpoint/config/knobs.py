"""Knob types and value checkers of the checkpoint configuration.

Each knob of :mod:`statecraft.checkpoint.config.schema` carries a checker in its attrs metadata
(key ``_CHECK``): ``checker(value, dotted_path) -> (normalized value, issues)``. A record checks
every knob when built (:func:`_check_fields`) and raises one
:class:`~statecraft.errors.ConfigError` listing them all (:func:`_raise_if`).
"""

from __future__ import annotations

import datetime
import difflib
from collections.abc import Callable
from typing import Any, Literal

import attrs

from statecraft.errors import ConfigError, ConfigIssue

__all__ = [
    "CONFIG_SCHEMA",
    "FULL_PLAN",
    "TERMINATION_SIGNALS",
    "CheckpointFormat",
    "Component",
    "CursorResume",
    "EmergencyPlan",
    "StoreBackend",
    "VerifyMode",
    "parse_deadline",
]

CONFIG_SCHEMA = "statecraft.checkpoint-config.v1"

Component = Literal["model", "optimizer", "training_state"]
StoreBackend = Literal["local", "object_store"]
CheckpointFormat = Literal["consolidated", "dcp", "incremental"]
EmergencyPlan = Literal["full", "run"]
CursorResume = Literal["auto", "strict", "off"]
VerifyMode = Literal["digest", "size"]

#: The full logical plan, in canonical order; the only plan that makes an exact-resume checkpoint.
FULL_PLAN: tuple[Component, ...] = ("model", "optimizer", "training_state")

# A checker takes (value, dotted path) and returns (normalized value, problems found).
_Checker = Callable[[Any, str], tuple[Any, list[ConfigIssue]]]
_CHECK = "statecraft.check"


#: the largest count a knob accepts (a bigger one is a typo, not a schedule)
MAX_COUNT = 10**9


def _number_hint(value: object) -> str:
    """Explain why text that looks like a number or a flag was not read as one."""
    if not isinstance(value, str):
        return ""
    if value != value.strip() or "#" in value:
        return " (no surrounding whitespace or '# comment' in a value)"
    if value.strip().lower() in ("yes", "no", "on", "off", "y", "n", "true", "false"):
        return " (booleans are spelled true or false)"
    return " (integers are written in plain decimal, e.g. 16, not 0x10 or 1_000)"


def _quote_hint(value: object) -> str:
    """Explain how a YAML scalar that should be a string was read as something else."""
    if isinstance(value, bool):
        return " (YAML reads a bare on/off/yes/no/true/false as a boolean: quote it, e.g. 'off')"
    if isinstance(value, int | float):
        return " (YAML reads bare digits as a number: quote it)"
    return ""


def _text(value: Any, path: str) -> tuple[Any, list[ConfigIssue]]:
    if isinstance(value, str):
        return value, []
    return value, [ConfigIssue(path, value, "a string" + _quote_hint(value))]


def _flag(value: Any, path: str) -> tuple[Any, list[ConfigIssue]]:
    if isinstance(value, bool):
        return value, []
    return value, [ConfigIssue(path, value, "true or false" + _number_hint(value))]


def _count(*, nullable: bool) -> _Checker:
    allowed = "null or " if nullable else ""
    allowed += f"a non-negative integer at most {MAX_COUNT}"

    def check(value: Any, path: str) -> tuple[Any, list[ConfigIssue]]:
        if value is None and nullable:
            return value, []
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
            return value, [ConfigIssue(path, value, allowed + _number_hint(value))]
        return value, []

    return check


#: the longest lease a knob accepts (a week: a longer one is a typo)
MAX_LEASE_TTL_S = 7 * 24 * 3600.0


def _lease_ttl(value: Any, path: str) -> tuple[Any, list[ConfigIssue]]:
    """Seconds, a number in (0, a week]; an integer stays an integer."""
    allowed = f"a number of seconds greater than 0 and at most {MAX_LEASE_TTL_S:.0f} (a week)"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value, [ConfigIssue(path, value, allowed + _number_hint(value))]
    if not 0 < value <= MAX_LEASE_TTL_S:  # NaN fails this too
        return value, [ConfigIssue(path, value, allowed)]
    return value, []


def _share(value: Any, path: str) -> tuple[Any, list[ConfigIssue]]:
    """A share of a whole, a number in (0, 1]."""
    allowed = "a share of the disk: a number greater than 0 and at most 1 (0.5 is half)"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value, [ConfigIssue(path, value, allowed + _number_hint(value))]
    if not 0 < value <= 1:  # NaN fails this too
        return value, [ConfigIssue(path, value, allowed)]
    return value, []


def _choice(*choices: str) -> _Checker:
    allowed = "one of " + ", ".join(repr(c) for c in choices)

    def check(value: Any, path: str) -> tuple[Any, list[ConfigIssue]]:
        if isinstance(value, str) and value in choices:
            return value, []
        hint = _quote_hint(value)
        if isinstance(value, str):
            text = value.strip().lower()
            close = [c for c in choices if c == text] or difflib.get_close_matches(
                text, choices, n=1, cutoff=0.6
            )
            hint = f"; did you mean {close[0]!r}?" if close else ""
        return value, [ConfigIssue(path, value, allowed + hint)]

    return check


_RESUME_LOOKALIKES = {
    "none": "off",
    "null": "off",
    "false": "off",
    "no": "off",
    "off": "off",
    "auto": "auto",
}


def _resume(value: Any, path: str) -> tuple[Any, list[ConfigIssue]]:
    if isinstance(value, str):
        meant = _RESUME_LOOKALIKES.get(value.strip().lower())
        if meant is not None and value != meant:
            return value, [
                ConfigIssue(
                    path,
                    value,
                    f"'auto', 'off' (lowercase), '' or a checkpoint path; did you mean "
                    f"{meant!r}? (a checkpoint directory spelled so: write ./{value.strip()})",
                )
            ]
        return (value or "off"), []
    allowed = "'auto', 'off', '' (same as 'off') or a checkpoint path"
    return value, [ConfigIssue(path, value, allowed + _quote_hint(value))]


def _run_ts(value: Any, path: str) -> tuple[Any, list[ConfigIssue]]:
    allowed = "'' (auto-resolved) or a real date/time as 14 digits YYYYmmddHHMMSS"
    if value == "":
        return value, []
    if isinstance(value, str) and len(value) == 14 and value.isascii() and value.isdigit():
        year, month, day, hour, minute, second = (
            int(value[i : i + width])
            for i, width in ((0, 4), (4, 2), (6, 2), (8, 2), (10, 2), (12, 2))
        )
        try:
            datetime.datetime(year, month, day, hour, minute, second)
        except ValueError:
            pass
        else:
            return value, []
    return value, [ConfigIssue(path, value, allowed + _quote_hint(value))]


def _components(value: Any, path: str) -> tuple[Any, list[ConfigIssue]]:
    """Check a component plan and return it in canonical FULL_PLAN order."""
    if isinstance(value, str) or not isinstance(value, list | tuple) or not value:
        return value, [ConfigIssue(path, value, f"a non-empty list drawn from {list(FULL_PLAN)}")]
    issues: list[ConfigIssue] = []
    seen: set[str] = set()
    for i, name in enumerate(value):
        where = f"{path}[{i}]"
        if not isinstance(name, str):
            issues.append(ConfigIssue(where, name, "a component name (a string)"))
        elif name not in FULL_PLAN:
            issues.append(ConfigIssue(where, name, "one of " + ", ".join(map(repr, FULL_PLAN))))
        elif name in seen:
            issues.append(ConfigIssue(where, name, "each component at most once"))
        else:
            seen.add(name)
    if issues:
        return value, issues
    return tuple(c for c in FULL_PLAN if c in seen), []


#: the signals ``termination.signals`` may name (each gets a flag-only handler)
TERMINATION_SIGNALS = ("SIGUSR1", "SIGUSR2", "SIGTERM", "SIGINT", "SIGHUP")


def _signals(value: Any, path: str) -> tuple[Any, list[ConfigIssue]]:
    """A list of distinct signal names from :data:`TERMINATION_SIGNALS` (empty: none)."""
    allowed = "a list of distinct names from " + ", ".join(TERMINATION_SIGNALS) + " (or [])"
    if isinstance(value, str) or not isinstance(value, list | tuple):
        return value, [ConfigIssue(path, value, allowed)]
    issues: list[ConfigIssue] = []
    for i, name in enumerate(value):
        if not isinstance(name, str) or name not in TERMINATION_SIGNALS:
            issues.append(
                ConfigIssue(f"{path}[{i}]", name, "one of " + ", ".join(TERMINATION_SIGNALS))
            )
        elif name in value[:i]:
            issues.append(ConfigIssue(f"{path}[{i}]", name, "each signal at most once"))
    return (value if issues else tuple(value)), issues


def _file_name(value: Any, path: str) -> tuple[Any, list[ConfigIssue]]:
    """A plain, non-empty file name (no directory part)."""
    ok = isinstance(value, str) and value not in ("", ".", "..") and "/" not in value
    if ok and "\0" not in value:
        return value, []
    return value, [
        ConfigIssue(path, value, "a plain file name (no '/', not empty)" + _quote_hint(value))
    ]


def parse_deadline(value: str) -> float | None:
    """The wall-clock deadline ``termination.deadline`` names, as a unix time; ``None`` for
    ``""`` (no deadline) and for ``"slurm"`` (resolved from ``$SLURM_JOB_END_TIME`` when the
    watch starts, :mod:`statecraft.checkpoint.stop.termination`).

    Accepted: ``""``, ``"slurm"``, a unix time in whole seconds (``"1767225600"``), or an ISO
    8601 date-time with a UTC offset (``"2026-12-01T18:00:00+00:00"``, ``...Z``).

    Raises:
        ValueError: anything else (a naive date-time is refused: which zone it means is a guess).
    """
    if value in ("", "slurm"):
        return None
    if value.isascii() and value.isdigit():
        return float(int(value))
    text = value[:-1] + "+00:00" if value.endswith("Z") else value
    when = datetime.datetime.fromisoformat(text)
    if when.tzinfo is None:
        raise ValueError("an ISO 8601 deadline needs a UTC offset (…+00:00 or …Z)")
    return when.timestamp()


def _deadline(value: Any, path: str) -> tuple[Any, list[ConfigIssue]]:
    allowed = (
        "'' (no deadline), 'slurm' ($SLURM_JOB_END_TIME), a unix time in whole seconds, or an "
        "ISO 8601 date-time with a UTC offset such as 2026-12-01T18:00:00Z"
    )
    if isinstance(value, str):
        try:
            parse_deadline(value)
        except ValueError:
            pass
        else:
            return value, []
    return value, [ConfigIssue(path, value, allowed + _quote_hint(value))]


_BACKENDS = _choice("local", "object_store")
_FORMATS = _choice("consolidated", "dcp", "incremental")
_EMERGENCY_PLANS = _choice("full", "run")
_CURSOR_MODES = _choice("auto", "strict", "off")
_VERIFY_MODES = _choice("digest", "size")
_STRIP_PREFIXES = _choice("", "_orig_mod.", "module.")  # init_from_strip_prefix
_COUNT = _count(nullable=False)
_COUNT_OR_NULL = _count(nullable=True)
_LEASE_TTL = _lease_ttl


def _knob_value(obj: Any, knob: str) -> Any:
    """Read dotted ``knob`` (``upload.enabled``) from a config object."""
    for part in knob.split("."):
        obj = getattr(obj, part)
    return obj


def _check_fields(obj: Any) -> list[ConfigIssue]:
    """Check and normalize every knob of one config object in place (frozen: via object)."""
    prefix = type(obj)._knob_prefix
    issues: list[ConfigIssue] = []
    for f in attrs.fields(type(obj)):
        current = getattr(obj, f.name)
        check = f.metadata.get(_CHECK)
        if check is None:
            if not isinstance(current, f.type):
                issues.append(ConfigIssue(prefix + f.name, current, f"a {f.type.__name__}"))
            continue
        value, found = check(current, prefix + f.name)
        issues.extend(found)
        if not found and value is not current:
            object.__setattr__(obj, f.name, value)
    return issues


def _raise_if(issues: list[ConfigIssue], source: str) -> None:
    if issues:
        raise ConfigError(issues, source=source)
