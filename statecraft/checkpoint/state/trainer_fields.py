"""Reading a ``trainer.pt`` payload: every schema version's keys and the checks that turn a
loaded payload into the fields of a :class:`~statecraft.checkpoint.state.TrainerState`, or one
error naming every bad field.

Versions: ``v3`` (written) = ``v2`` + ``validation`` (a ``statecraft.validation-state.v1``
mapping, :class:`~statecraft.checkpoint.kernel.validation_records.ValidationState`, or ``None``);
``v2`` = ``v1`` + ``stateful`` and ``optimizer_class``; legacy files carry no schema. A file
older than v3 reads with ``validation=None``."""

from __future__ import annotations

from typing import Any

from statecraft.checkpoint.state.clocks import clock_problems
from statecraft.checkpoint.state.problems import (
    TRAINER_CORRUPT_FIX,
    describe,
    is_int,
    problems_of,
    state_error,
)
from statecraft.checkpoint.state.rng_inventory import RngInventory
from statecraft.checkpoint.state.safe_values import unsafe_paths
from statecraft.checkpoint.state.scheduler_identity import SchedulerIdentity
from statecraft.checkpoint.state.validation_state import ValidationState
from statecraft.errors import TrainerStateError

__all__ = [
    "READABLE_TRAINER_SCHEMAS",
    "TRAINER_STATE_SCHEMA",
    "payload_fields",
    "stateful_problems",
    "value_problems",
]

TRAINER_STATE_SCHEMA = "statecraft.trainer-state.v3"
_V1 = "statecraft.trainer-state.v1"
_V2 = "statecraft.trainer-state.v2"
READABLE_TRAINER_SCHEMAS = (_V1, _V2, TRAINER_STATE_SCHEMA)

_V1_KEYS = frozenset(
    {
        "schema",
        "optimizer_step",
        "iter",
        "attempt_id",
        "skips_total",
        "skips_consecutive",
        "open_microbatches",
        "rng",
        "scheduler",
        "scheduler_identity",
        "optimizer_pristine",
        "extra",
    }
)
_V2_KEYS = _V1_KEYS | {"stateful", "optimizer_class"}
_PAYLOAD_KEYS = {_V1: _V1_KEYS, _V2: _V2_KEYS, TRAINER_STATE_SCHEMA: _V2_KEYS | {"validation"}}


def value_problems(value: Any, name: str) -> list[str]:
    """``name`` must be a dict with str keys whose every value loads back weights_only."""
    if type(value) is not dict:
        return [f"{name}: expected a dict; got {describe(value)}"]
    problems = [
        f"{name}: expected str keys; got {describe(key)}" for key in value if type(key) is not str
    ]
    return problems + unsafe_paths(value, name)


def stateful_problems(value: Any) -> list[str]:
    problems = value_problems(value, "stateful")
    if type(value) is dict:
        problems += [
            f"stateful: names must be plain identifiers; got {name!r}"
            for name in value
            if type(name) is str and not name.isidentifier()
        ]
    return problems


def payload_fields(payload: object, *, source: str) -> dict[str, Any]:
    """The ``TrainerState`` keyword arguments of a loaded payload (see
    :meth:`TrainerState.from_payload <statecraft.checkpoint.state.TrainerState.from_payload>`).

    Raises:
        TrainerStateError: naming ``source`` and every bad field.
    """
    if not isinstance(payload, dict):
        raise state_error(
            source,
            "trainer state",
            [f"expected a dict payload; got {describe(payload)}"],
            TRAINER_CORRUPT_FIX,
        )
    problems: list[str] = []
    legacy = "schema" not in payload
    schema = payload.get("schema")
    if not legacy:
        if schema not in _PAYLOAD_KEYS:
            problems.append(
                f"schema: expected one of {list(READABLE_TRAINER_SCHEMAS)} (or none, for a "
                f"legacy file); got {describe(schema)}; a newer or foreign writer made this "
                "file, read it with the statecraft release that wrote it"
            )
        else:
            problems += [
                f"unexpected key {k!r} (not part of {schema})"
                for k in payload
                if k not in _PAYLOAD_KEYS[schema]
            ]

    def count(name: str, default: int | None) -> int | None:
        """The counter ``name``, its legacy default when absent, None when malformed."""
        if name not in payload:
            return default
        value: Any = payload[name]
        if not is_int(value) or value < 0:
            problems.append(f"{name}: expected an int >= 0; got {describe(value)}")
            return None
        return int(value)

    step, alias = count("optimizer_step", None), count("iter", None)
    if "optimizer_step" not in payload and "iter" not in payload:
        problems.append("optimizer_step: missing (and no legacy 'iter' either)")
    if step is not None and alias is not None and step != alias:
        problems.append(
            f"optimizer_step and iter conflict: optimizer_step={step}, iter={alias}; "
            "they are the same clock and must agree"
        )
    step = alias if step is None else step
    counted = {
        "optimizer_step": step,
        "attempt_id": count("attempt_id", step),
        "skips_total": count("skips_total", 0),
        "skips_consecutive": count("skips_consecutive", 0),
    }
    clocks = {name: value for name, value in counted.items() if value is not None}
    if len(clocks) == len(counted):
        problems += clock_problems(**clocks)
    if "open_microbatches" in payload:
        open_mb = payload["open_microbatches"]
        if not is_int(open_mb):
            problems.append(f"open_microbatches: expected the int 0; got {describe(open_mb)}")
        elif open_mb != 0:
            problems.append(
                f"open_microbatches: expected 0 (a closed accumulation window); got {open_mb}: "
                "gradients are not checkpointed, so an open window cannot be resumed exactly"
            )

    rng = None
    if payload.get("rng") is not None:
        try:
            rng = RngInventory.from_payload(payload["rng"], source=source)
        except TrainerStateError as exc:
            problems += problems_of(exc, "rng")
    scheduler_state = payload.get("scheduler")
    if scheduler_state is not None and not isinstance(scheduler_state, dict):
        problems.append(
            f"scheduler: expected a state_dict (dict) or None; got {describe(scheduler_state)}"
        )
    identity = None
    if payload.get("scheduler_identity") is not None:
        try:
            identity = SchedulerIdentity.from_payload(payload["scheduler_identity"], source=source)
        except TrainerStateError as exc:
            problems += problems_of(exc, "scheduler_identity")
    pristine = payload.get("optimizer_pristine", False)
    if "optimizer_pristine" in payload and pristine is not True:
        problems.append(
            f"optimizer_pristine: expected True (the key is written only when true); "
            f"got {describe(pristine)}"
        )
    extra = payload.get("extra", {})
    problems += value_problems(extra, "extra")
    stateful = payload.get("stateful", {})
    problems += stateful_problems(stateful)
    optimizer_class = payload.get("optimizer_class")
    if optimizer_class is not None and type(optimizer_class) is not str:
        problems.append(f"optimizer_class: expected a str or None; got {describe(optimizer_class)}")
    validation = None  # v2, v1 and legacy files: recorded before validation identities
    if schema == TRAINER_STATE_SCHEMA:
        if "validation" not in payload:
            problems.append(f"validation: missing (required by {TRAINER_STATE_SCHEMA})")
        elif payload["validation"] is not None:
            validation, found = ValidationState.from_payload(payload["validation"])
            problems += found
    if problems:
        raise state_error(source, "trainer state", problems, TRAINER_CORRUPT_FIX)
    return {
        **clocks,
        "rng": rng,
        "scheduler_state": scheduler_state,
        "scheduler_identity": identity,
        "optimizer_pristine": pristine,
        "extra": extra,
        "stateful": stateful,
        "optimizer_class": optimizer_class,
        "validation": validation,
    }
