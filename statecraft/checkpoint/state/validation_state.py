"""The validation fields of ``trainer.pt``: what validation a run does
(:class:`ValidationIdentity`) and the stage a checkpoint was saved in (:class:`ValidationState`,
schema ``statecraft.validation-state.v1``).

The visibility records that advance a committed checkpoint's stage beside its manifest are in
:mod:`statecraft.checkpoint.kernel.validation_records`.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

import attrs

__all__ = [
    "VALIDATION_STATE_SCHEMA",
    "ValidationIdentity",
    "ValidationStage",
    "ValidationState",
    "metrics_problems",
]

VALIDATION_STATE_SCHEMA = "statecraft.validation-state.v1"


class ValidationStage(enum.Enum):
    """Where a checkpoint's validation transaction stands (see the module table)."""

    NONE = "none"
    EVALUATION_PENDING = "evaluation_pending"
    PUBLICATION_PENDING = "publication_pending"
    PUBLISHED = "published"


@attrs.frozen
class ValidationIdentity:
    """What validation this run does, recorded in ``trainer.pt``; exact resume rejects a
    changed identity.

    Attributes:
        enabled: the run validates (an evaluation callable is registered and validation is
            configured to run).
        source: the name of the held-out data / evaluation (given by the loop; default the
            callable's qualified name), ``""`` when disabled.
        config: a digest of the validation knobs (:meth:`config_digest`), ``""`` when
            disabled.
    """

    enabled: bool = False
    source: str = ""
    config: str = ""

    @staticmethod
    def config_digest(knobs: Mapping[str, Any]) -> str:
        """A short stable digest of the validation knobs (JSON, sorted keys)."""
        text = json.dumps(dict(knobs), sort_keys=True, default=list)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def differences(self, other: ValidationIdentity) -> list[str]:
        """One line per field that differs (``self`` = recorded, ``other`` = this run)."""
        return [
            f"validation {name}: checkpoint recorded {getattr(self, name)!r}, this run has "
            f"{getattr(other, name)!r}"
            for name in ("enabled", "source", "config")
            if getattr(self, name) != getattr(other, name)
        ]


@attrs.frozen
class ValidationState:
    """The ``validation`` field of ``trainer.pt`` (schema ``statecraft.validation-state.v1``):
    the identity and the stage at save time (``NONE`` or ``EVALUATION_PENDING``)."""

    identity: ValidationIdentity = attrs.field(factory=ValidationIdentity)
    stage: ValidationStage = ValidationStage.NONE

    def to_payload(self) -> dict[str, Any]:
        return {
            "schema": VALIDATION_STATE_SCHEMA,
            "identity": attrs.asdict(self.identity),
            "stage": self.stage.value,
        }

    @classmethod
    def from_payload(cls, payload: Any) -> tuple[ValidationState | None, list[str]]:
        """The state and the problems found (``None`` and problems when malformed)."""
        if not isinstance(payload, dict) or payload.get("schema") != VALIDATION_STATE_SCHEMA:
            return None, [
                f"validation: expected a {VALIDATION_STATE_SCHEMA} mapping, got "
                f"{type(payload).__name__}"
            ]
        identity = payload.get("identity")
        stage = payload.get("stage")
        problems: list[str] = []
        if set(payload) != {"schema", "identity", "stage"}:
            problems.append(f"validation: keys {sorted(payload)}")
        if stage not in ("none", "evaluation_pending"):
            problems.append(
                f"validation.stage: {stage!r} (expected 'none' or 'evaluation_pending')"
            )
        if (
            not isinstance(identity, dict)
            or set(identity) != {"enabled", "source", "config"}
            or type(identity.get("enabled")) is not bool
            or type(identity.get("source")) is not str
            or type(identity.get("config")) is not str
        ):
            problems.append(f"validation.identity: {identity!r}")
        if problems or not isinstance(identity, dict):
            return None, problems
        return cls(ValidationIdentity(**identity), ValidationStage(stage)), []


def metrics_problems(metrics: Any) -> list[str]:
    """Why ``metrics`` is not a mapping of ``str`` names to finite numbers (``bool``
    excluded); empty when it is one."""
    if not isinstance(metrics, Mapping):
        return [f"metrics must be a mapping of names to numbers, got {type(metrics).__name__}"]
    out = []
    for name, value in metrics.items():
        if type(name) is not str:
            out.append(f"metric name {name!r} is not a str")
        elif type(value) not in (int, float) or not math.isfinite(value):
            out.append(f"metric {name!r} = {value!r} is not a finite int or float")
    return out
