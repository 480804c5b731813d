"""The construction identity of a learning-rate schedule, compared before any state loads."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from statecraft.checkpoint.state.problems import (
    TRAINER_CORRUPT_FIX,
    deep_equal,
    describe,
    is_int,
    state_error,
)
from statecraft.errors import TrainerStateError

__all__ = ["SUPPORTED_SCHEDULER_IDENTITY_VERSIONS", "SchedulerIdentity", "check_scheduler_identity"]

SUPPORTED_SCHEDULER_IDENTITY_VERSIONS = frozenset({1})
_IDENTITY_KEYS = ("name", "version", "params")


def _json_scalar(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or type(value) in (str, int, bool)


def _identity_params(value: object) -> object:
    return dict(value) if isinstance(value, Mapping) else value


@attrs.frozen
class SchedulerIdentity:
    """The construction identity of a learning-rate schedule, separate from its mutable state.

    A schedule's ``state_dict`` records where it is, not what it computes; exact resume compares
    the identity (name, identity format ``version`` and the construction ``params`` such as warmup
    and cycle factors) before any state is loaded. Schedulers that declare no identity keep the
    legacy state-only resume.

    Raises:
        TrainerStateError: on construction, when ``name`` is not a non-empty str, ``version`` not
            an int >= 1, or ``params`` not a dict of str keys to finite JSON scalars.

    Example:
        >>> SchedulerIdentity("warmup_cosine", 1, {"warmup_steps": 100})
        SchedulerIdentity(name='warmup_cosine', version=1, params={'warmup_steps': 100})
    """

    name: str
    version: int
    params: dict[str, str | int | float | bool | None] = attrs.field(
        factory=dict, converter=_identity_params, hash=False
    )

    def __attrs_post_init__(self) -> None:
        problems = _identity_problems(self.name, self.version, self.params)
        if problems:
            raise state_error(
                "SchedulerIdentity(...)",
                "scheduler identity",
                problems,
                "Pass a name, an int version and JSON-scalar params.",
            )

    def to_payload(self) -> dict[str, Any]:
        """The payload stored under ``"scheduler_identity"``: ``{"name", "version", "params"}``."""
        return {"name": self.name, "version": self.version, "params": dict(self.params)}

    @classmethod
    def from_payload(cls, obj: object, *, source: str = "scheduler identity") -> SchedulerIdentity:
        """Parse a payload written by :meth:`to_payload`.

        The version is NOT checked against :data:`SUPPORTED_SCHEDULER_IDENTITY_VERSIONS` here, so
        :func:`check_scheduler_identity` can report an unknown version with its fix.

        Raises:
            TrainerStateError: naming ``source`` and every bad field.
        """
        if not isinstance(obj, dict):
            problems = [f"expected a dict with keys {list(_IDENTITY_KEYS)}; got {describe(obj)}"]
            raise state_error(source, "scheduler identity", problems, TRAINER_CORRUPT_FIX)
        problems = [f"missing key {k!r}" for k in _IDENTITY_KEYS if k not in obj]
        problems += [f"unexpected key {k!r}" for k in obj if k not in _IDENTITY_KEYS]
        if not problems:
            problems = _identity_problems(obj["name"], obj["version"], obj["params"])
        if problems:
            raise state_error(source, "scheduler identity", problems, TRAINER_CORRUPT_FIX)
        return cls(obj["name"], obj["version"], obj["params"])

    def _summary(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in sorted(self.params.items()))
        return f"{self.name!r} v{self.version} ({params or 'no params'})"


def _identity_problems(name: Any, version: Any, params: Any) -> list[str]:
    problems = []
    if not isinstance(name, str) or not name:
        problems.append(f"name: expected a non-empty str; got {describe(name)}")
    if not is_int(version) or version < 1:
        problems.append(f"version: expected an int >= 1; got {describe(version)}")
    if not isinstance(params, dict):
        problems.append(f"params: expected a dict of JSON scalars; got {describe(params)}")
        return problems
    for key, value in params.items():
        if not isinstance(key, str):
            problems.append(f"params: expected str keys; got {describe(key)}")
        elif not _json_scalar(value):
            problems.append(
                f"params.{key}: expected a str, int, finite float, bool or None; "
                f"got {describe(value)}"
            )
    return problems


def _identity_diff(saved: SchedulerIdentity, current: SchedulerIdentity) -> list[str]:
    diffs = []
    for field in ("name", "version"):
        want, have = getattr(current, field), getattr(saved, field)
        if not deep_equal(want, have):
            diffs.append(f"{field}: this run expects {want!r}, the checkpoint has {have!r}")
    for key in sorted(set(saved.params) | set(current.params)):
        if key not in saved.params:
            diffs.append(
                f"params.{key}: this run expects {current.params[key]!r}, the checkpoint has none"
            )
        elif key not in current.params:
            diffs.append(
                f"params.{key}: this run has none, the checkpoint has {saved.params[key]!r}"
            )
        elif not deep_equal(current.params[key], saved.params[key]):
            diffs.append(
                f"params.{key}: this run expects {describe(current.params[key])}, "
                f"the checkpoint has {describe(saved.params[key])}"
            )
    return diffs


def check_scheduler_identity(
    saved: SchedulerIdentity | None, current: SchedulerIdentity | None, *, source: str
) -> None:
    """Apply the exact-resume rule for scheduler construction identity; call before any load.

    Both ``None`` is a legacy schedule with state-only resume and passes. Everything else fails
    closed unless both identities are present, of a supported version, and equal field by field
    (type-strict: ``1`` and ``1.0`` differ).

    Args:
        saved: the identity recorded in the checkpoint, ``None`` when it records none.
        current: the identity this run declares, ``None`` when its scheduler declares none.
        source: the checkpoint (file or directory) named in the error.

    Raises:
        TrainerStateError: an unsupported version, an identity on one side only, or differing
            identities (every differing field listed, expected vs found).

    Example:
        >>> ident = SchedulerIdentity("warmup_cosine", 1, {"warmup_steps": 100})
        >>> check_scheduler_identity(ident, ident, source="iter_000000100/trainer.pt")
    """
    new_run = "start a new run from these weights (init_from) instead of exact resume"
    supported = sorted(SUPPORTED_SCHEDULER_IDENTITY_VERSIONS)
    if saved is None and current is None:
        return
    if saved is not None and saved.version not in SUPPORTED_SCHEDULER_IDENTITY_VERSIONS:
        raise TrainerStateError(
            f"{source}: the checkpoint's scheduler identity {saved._summary()} has version "
            f"{saved.version}; this statecraft reads versions {supported}. Upgrade statecraft, or "
            f"{new_run}."
        )
    if current is not None and current.version not in SUPPORTED_SCHEDULER_IDENTITY_VERSIONS:
        raise TrainerStateError(
            f"{source}: this run declares scheduler identity {current._summary()} with version "
            f"{current.version}; supported versions are {supported}. Declare a supported version."
        )
    if saved is None and current is not None:
        raise TrainerStateError(
            f"{source}: this run declares scheduler identity {current._summary()}, but the "
            "checkpoint records none (a legacy or state-only checkpoint), so exact resume cannot "
            f"prove the schedule is unchanged; {new_run}."
        )
    if saved is not None and current is None:
        raise TrainerStateError(
            f"{source}: the checkpoint records scheduler identity {saved._summary()}, but this "
            "run declares none, so exact resume cannot prove the schedule is unchanged; pass the "
            f"same scheduler identity to resume exactly, or {new_run}."
        )
    diffs = [] if saved is None or current is None else _identity_diff(saved, current)
    if diffs:
        raise state_error(
            source,
            "scheduler identity (the schedule changed since the checkpoint)",
            diffs,
            f"Pass the same scheduler identity to resume exactly, or {new_run}.",
        )
