"""Trainer control state: update clocks, scheduler identity, and the payload of ``trainer.pt``.

``trainer.pt`` is the tiny control file of a checkpoint. It is written with ``torch.save`` and read
with ``torch.load(..., weights_only=True)``, so :meth:`TrainerState.to_payload` produces only
dicts, lists, tuples, strings, numbers, booleans, ``None`` and tensors, and
:meth:`TrainerState.from_payload` accepts nothing it cannot prove consistent: conflicting clocks,
malformed counters, an open accumulation window or a damaged RNG inventory fail with one error
naming the file and every bad field, instead of being normalized into a plausible state.

The call order of a training loop, and who calls each step:

1. every microbatch, the loop: ``clocks.record(outcome)`` with the trainer's
   :class:`Outcome` (``ACCUMULATING`` until the window closes as ``APPLIED`` or ``SKIPPED``);
2. save, the checkpoint facade: ``TrainerState.capture(clocks, rng=..., scheduler=...,
   scheduler_identity=..., optimizer=...)`` -- refuses an open window -- then
   ``torch.save(state.to_payload(), "trainer.pt")`` on rank 0;
3. resume, the checkpoint facade: ``TrainerState.from_payload(torch.load(...), source=path)``,
   then :func:`check_scheduler_identity` BEFORE loading model, optimizer or scheduler state,
   then ``state.to_clocks()`` for the loop and :func:`~statecraft.checkpoint.rng.restore_rank_rng`
   on every rank.
"""

from __future__ import annotations

import copy
import enum
import math
import re
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import attrs
import torch

from statecraft.checkpoint.rng import (
    RngInventory,
    _deep_equal,
    _describe,
    _is_int,
    _state_error,
)
from statecraft.errors import TrainerStateError

__all__ = [
    "SUPPORTED_SCHEDULER_IDENTITY_VERSIONS",
    "TRAINER_STATE_SCHEMA",
    "Outcome",
    "SchedulerIdentity",
    "TrainerState",
    "UpdateClocks",
    "check_scheduler_identity",
    "optimizer_is_pristine",
]

TRAINER_STATE_SCHEMA = "statecraft.trainer-state.v1"
SUPPORTED_SCHEDULER_IDENTITY_VERSIONS = frozenset({1})

_CORRUPT_FIX = (
    "This trainer state cannot be resumed exactly; restore trainer.pt from an intact copy, or "
    "start a new run from these weights instead of exact resume."
)
_PAYLOAD_KEYS = frozenset(
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
_IDENTITY_KEYS = ("name", "version", "params")
_CLOCK_NAMES = ("optimizer_step", "attempt_id", "skips_total", "skips_consecutive")


class Outcome(enum.Enum):
    """What one microbatch did to the optimizer attempt (the trainer's explicit return value)."""

    ACCUMULATING = "accumulating"
    """The attempt stays open; no optimizer clock advances."""
    APPLIED = "applied"
    """The whole window was finite; the optimizer (and scheduler) stepped; ``optimizer_step``
    advanced."""
    SKIPPED = "skipped"
    """A non-finite loss or gradient discarded the whole window; only attempt and skip counters
    advance."""


_PATH_PREFIX = re.compile(r"^[A-Za-z_][\w.\[\]']*:")


def _problems_of(exc: TrainerStateError, field: str) -> list[str]:
    """The problem lines of ``exc`` (built by ``_state_error``), re-rooted under ``field``."""
    lines = getattr(exc, "problems", [str(exc)])
    return [f"{field}.{p}" if _PATH_PREFIX.match(p) else f"{field}: {p}" for p in lines]


def _non_negative_int(instance: object, attribute: attrs.Attribute, value: Any) -> None:
    if not _is_int(value) or value < 0:
        raise TrainerStateError(
            f"{type(instance).__name__}.{attribute.name} must be an int >= 0 "
            f"(got {_describe(value)}); pass a non-negative count"
        )


def _clock_problems(
    *, optimizer_step: int, attempt_id: int, skips_total: int, skips_consecutive: int
) -> list[str]:
    """Cross-field rules of the clocks (each field already a non-negative int)."""
    problems = []
    if attempt_id < optimizer_step:
        problems.append(
            f"attempt_id: expected >= optimizer_step ({optimizer_step}), since every applied "
            f"update is an attempt; got {attempt_id}"
        )
    if skips_consecutive > skips_total:
        problems.append(
            f"skips_consecutive: expected <= skips_total ({skips_total}); got {skips_consecutive}"
        )
    return problems


@attrs.define
class UpdateClocks:
    """The optimizer-control clocks, advanced once per microbatch by :meth:`record`.

    ``optimizer_step`` counts applied updates, ``attempt_id`` counts closed windows (applied or
    skipped), the skip counters count discarded windows (``skips_consecutive`` since the last
    applied one), and ``open_microbatches`` counts microbatches in the open window. Gradients are
    not checkpointed, so save and resume require ``open_microbatches == 0``.

    Example:
        >>> clocks = UpdateClocks()
        >>> clocks.record(Outcome.ACCUMULATING)
        >>> clocks.quiescent
        False
        >>> clocks.record(Outcome.APPLIED)
        >>> (clocks.optimizer_step, clocks.attempt_id, clocks.quiescent)
        (1, 1, True)
    """

    optimizer_step: int = attrs.field(default=0, validator=_non_negative_int)
    attempt_id: int = attrs.field(default=0, validator=_non_negative_int)
    skips_total: int = attrs.field(default=0, validator=_non_negative_int)
    skips_consecutive: int = attrs.field(default=0, validator=_non_negative_int)
    open_microbatches: int = attrs.field(default=0, validator=_non_negative_int)

    def __attrs_post_init__(self) -> None:
        problems = _clock_problems(
            optimizer_step=self.optimizer_step,
            attempt_id=self.attempt_id,
            skips_total=self.skips_total,
            skips_consecutive=self.skips_consecutive,
        )
        if problems:
            raise _state_error(
                "UpdateClocks(...)", "update clocks", problems, "Pass consistent clocks."
            )

    def record(self, outcome: Outcome) -> None:
        """Advance the clocks by one microbatch's outcome.

        ``ACCUMULATING`` opens or extends the window; ``APPLIED`` closes it and advances
        ``optimizer_step`` and ``attempt_id`` and resets ``skips_consecutive``; ``SKIPPED``
        discards it and advances ``attempt_id`` and both skip counters.

        Raises:
            TrainerStateError: ``outcome`` is not an :class:`Outcome`.
        """
        if not isinstance(outcome, Outcome):
            raise TrainerStateError(
                f"record() expects an Outcome; got {_describe(outcome)}; pass Outcome.APPLIED, "
                "Outcome.SKIPPED or Outcome.ACCUMULATING"
            )
        if outcome is Outcome.ACCUMULATING:
            self.open_microbatches += 1
            return
        self.attempt_id += 1
        self.open_microbatches = 0
        if outcome is Outcome.APPLIED:
            self.optimizer_step += 1
            self.skips_consecutive = 0
        else:
            self.skips_total += 1
            self.skips_consecutive += 1

    @property
    def quiescent(self) -> bool:
        """True when no accumulation window is open (the only state that can be saved)."""
        return self.open_microbatches == 0

    def require_quiescent(self, action: str) -> None:
        """Fail unless no accumulation window is open.

        Args:
            action: what the caller is about to do, e.g. ``"save a checkpoint"``.

        Raises:
            TrainerStateError: the window is open.
        """
        if self.quiescent:
            return
        raise TrainerStateError(
            f"cannot {action}: the accumulation window is open with {self.open_microbatches} "
            f"microbatch(es) (optimizer_step={self.optimizer_step}, attempt_id={self.attempt_id}); "
            "gradients are not checkpointed, so save and resume need accum = 0. Record "
            "Outcome.APPLIED or Outcome.SKIPPED to close the window first."
        )


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
            raise _state_error(
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
            problems = [f"expected a dict with keys {list(_IDENTITY_KEYS)}; got {_describe(obj)}"]
            raise _state_error(source, "scheduler identity", problems, _CORRUPT_FIX)
        problems = [f"missing key {k!r}" for k in _IDENTITY_KEYS if k not in obj]
        problems += [f"unexpected key {k!r}" for k in obj if k not in _IDENTITY_KEYS]
        if not problems:
            problems = _identity_problems(obj["name"], obj["version"], obj["params"])
        if problems:
            raise _state_error(source, "scheduler identity", problems, _CORRUPT_FIX)
        return cls(obj["name"], obj["version"], obj["params"])

    def _summary(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in sorted(self.params.items()))
        return f"{self.name!r} v{self.version} ({params or 'no params'})"


def _identity_problems(name: Any, version: Any, params: Any) -> list[str]:
    problems = []
    if not isinstance(name, str) or not name:
        problems.append(f"name: expected a non-empty str; got {_describe(name)}")
    if not _is_int(version) or version < 1:
        problems.append(f"version: expected an int >= 1; got {_describe(version)}")
    if not isinstance(params, dict):
        problems.append(f"params: expected a dict of JSON scalars; got {_describe(params)}")
        return problems
    for key, value in params.items():
        if not isinstance(key, str):
            problems.append(f"params: expected str keys; got {_describe(key)}")
        elif not _json_scalar(value):
            problems.append(
                f"params.{key}: expected a str, int, finite float, bool or None; "
                f"got {_describe(value)}"
            )
    return problems


def _identity_diff(saved: SchedulerIdentity, current: SchedulerIdentity) -> list[str]:
    diffs = []
    for field in ("name", "version"):
        want, have = getattr(current, field), getattr(saved, field)
        if not _deep_equal(want, have):
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
        elif not _deep_equal(current.params[key], saved.params[key]):
            diffs.append(
                f"params.{key}: this run expects {_describe(current.params[key])}, "
                f"the checkpoint has {_describe(saved.params[key])}"
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
        raise _state_error(
            source,
            "scheduler identity (the schedule changed since the checkpoint)",
            diffs,
            f"Pass the same scheduler identity to resume exactly, or {new_run}.",
        )


def optimizer_is_pristine(optimizer: torch.optim.Optimizer) -> bool:
    """True when ``optimizer`` holds no per-parameter state, i.e. it never stepped.

    Limitation: only ``optimizer.state`` is read. An optimizer that keeps a step trace on its
    param groups (a shared group counter, lazily built master weights, as some fused Adam
    implementations do) can have stepped with an empty per-parameter state and is then wrongly
    reported pristine; such optimizers need their own probe.

    Raises:
        TrainerStateError: ``optimizer`` has no ``state`` mapping.

    Example:
        >>> opt = torch.optim.AdamW(torch.nn.Linear(2, 2).parameters())
        >>> optimizer_is_pristine(opt)
        True
    """
    state = getattr(optimizer, "state", None)
    if not isinstance(state, Mapping):
        raise TrainerStateError(
            f"optimizer_is_pristine() expects a torch optimizer with a 'state' mapping; got "
            f"{_describe(optimizer)}; pass the torch.optim.Optimizer itself"
        )
    return all(not entry for entry in state.values())


def _weights_only_problems(value: Any, path: str, *, json_only: bool) -> list[str]:
    """Every path under ``value`` that ``torch.load(weights_only=True)`` (or JSON) cannot hold."""
    if value is None or type(value) in (str, int, float, bool):
        return []
    if not json_only and type(value) in (torch.Tensor, torch.nn.Parameter):
        return []
    containers: tuple[type, ...] = (dict,) if json_only else (dict, OrderedDict)
    if type(value) in containers:
        problems = []
        for key, item in value.items():
            if json_only and not isinstance(key, str):
                problems.append(f"{path}: expected str keys; got {_describe(key)}")
            problems += _weights_only_problems(item, f"{path}[{key!r}]", json_only=json_only)
        return problems
    if type(value) is list or (not json_only and type(value) is tuple):
        problems = []
        for i, item in enumerate(value):
            problems += _weights_only_problems(item, f"{path}[{i}]", json_only=json_only)
        return problems
    allowed = (
        "dict (str keys), list, str, int, float, bool or None"
        if json_only
        else "dict, list, tuple, str, int, float, bool, None or a plain tensor"
    )
    return [f"{path}: expected {allowed}; got {_describe(value)}"]


@attrs.frozen(kw_only=True)
class TrainerState:
    """A quiescent snapshot of the trainer's control state: the payload of ``trainer.pt``.

    Construction checks the clocks (non-negative ints, ``attempt_id >= optimizer_step``,
    ``skips_consecutive <= skips_total``) and that ``scheduler_state`` and ``extra`` hold only
    what ``torch.load(weights_only=True)`` (for ``extra``: JSON) can read back, so a state that
    exists can be saved and resumed. The accumulation window is always closed (``accum = 0``).

    Attributes:
        optimizer_step: applied optimizer updates (``iter`` in legacy files).
        attempt_id: closed accumulation windows, applied or skipped.
        skips_total: discarded (non-finite) windows.
        skips_consecutive: discarded windows since the last applied one.
        rng: every rank's RNG streams, or ``None`` (not recorded).
        scheduler_state: the scheduler's ``state_dict()``, or ``None``.
        scheduler_identity: the schedule's construction identity, or ``None`` (legacy schedule).
        optimizer_pristine: the optimizer had never stepped (written only when True).
        extra: the loop's own small JSON values.

    Raises:
        TrainerStateError: on construction, listing every bad field.
    """

    optimizer_step: int
    attempt_id: int
    skips_total: int = 0
    skips_consecutive: int = 0
    rng: RngInventory | None
    scheduler_state: dict[str, Any] | None = attrs.field(
        default=None, eq=attrs.cmp_using(eq=_deep_equal), hash=False
    )
    scheduler_identity: SchedulerIdentity | None = None
    optimizer_pristine: bool = False
    extra: dict[str, Any] = attrs.field(
        factory=dict, eq=attrs.cmp_using(eq=_deep_equal), hash=False
    )

    def __attrs_post_init__(self) -> None:
        problems = []
        for name in _CLOCK_NAMES:
            value = getattr(self, name)
            if not _is_int(value) or value < 0:
                problems.append(f"{name}: expected an int >= 0; got {_describe(value)}")
        if not problems:
            problems += _clock_problems(**{name: getattr(self, name) for name in _CLOCK_NAMES})
        if self.rng is not None and not isinstance(self.rng, RngInventory):
            problems.append(f"rng: expected an RngInventory or None; got {_describe(self.rng)}")
        if self.scheduler_state is not None:
            if type(self.scheduler_state) not in (dict, OrderedDict):
                got = _describe(self.scheduler_state)
                problems.append(f"scheduler_state: expected a dict or None; got {got}")
            else:
                problems += _weights_only_problems(
                    self.scheduler_state, "scheduler_state", json_only=False
                )
        if self.scheduler_identity is not None and not isinstance(
            self.scheduler_identity, SchedulerIdentity
        ):
            problems.append(
                "scheduler_identity: expected a SchedulerIdentity or None; "
                f"got {_describe(self.scheduler_identity)}"
            )
        if type(self.optimizer_pristine) is not bool:
            problems.append(
                f"optimizer_pristine: expected a bool; got {_describe(self.optimizer_pristine)}"
            )
        if type(self.extra) is not dict:
            problems.append(f"extra: expected a dict; got {_describe(self.extra)}")
        else:
            problems += _weights_only_problems(self.extra, "extra", json_only=True)
        if problems:
            raise _state_error(
                "TrainerState(...)", "trainer state", problems, "Pass the values listed above."
            )

    @classmethod
    def capture(
        cls,
        clocks: UpdateClocks,
        *,
        rng: RngInventory | None,
        scheduler: Any = None,
        scheduler_identity: SchedulerIdentity | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> TrainerState:
        """Snapshot the live training objects; later mutation of them does not change it.

        Args:
            clocks: the loop's clocks; the window must be closed.
            rng: from :func:`~statecraft.checkpoint.rng.gather_rng_inventory`, or ``None``.
            scheduler: anything with ``state_dict()`` (deep-copied), or ``None``.
            scheduler_identity: the schedule's identity, or ``None`` (legacy schedule).
            optimizer: decides ``optimizer_pristine`` via :func:`optimizer_is_pristine`.
            extra: the loop's own small JSON values (deep-copied).

        Raises:
            TrainerStateError: the accumulation window is open, or a value is unsaveable.
        """
        if not isinstance(clocks, UpdateClocks):
            raise TrainerStateError(
                f"TrainerState.capture() expects UpdateClocks; got {_describe(clocks)}"
            )
        clocks.require_quiescent("capture the trainer state")
        return cls(
            optimizer_step=clocks.optimizer_step,
            attempt_id=clocks.attempt_id,
            skips_total=clocks.skips_total,
            skips_consecutive=clocks.skips_consecutive,
            rng=rng,
            scheduler_state=None if scheduler is None else copy.deepcopy(scheduler.state_dict()),
            scheduler_identity=scheduler_identity,
            optimizer_pristine=optimizer is not None and optimizer_is_pristine(optimizer),
            extra={} if extra is None else copy.deepcopy(dict(extra)),
        )

    def to_clocks(self) -> UpdateClocks:
        """Fresh, quiescent :class:`UpdateClocks` holding these values (for the resumed loop)."""
        return UpdateClocks(
            optimizer_step=self.optimizer_step,
            attempt_id=self.attempt_id,
            skips_total=self.skips_total,
            skips_consecutive=self.skips_consecutive,
        )

    def to_payload(self) -> dict[str, Any]:
        """The ``weights_only``-safe dict to ``torch.save`` as ``trainer.pt``.

        Returns:
            Keys ``schema``, ``optimizer_step``, ``iter`` (legacy alias, same value),
            ``attempt_id``, ``skips_total``, ``skips_consecutive``, ``open_microbatches`` (always
            0), ``rng``, ``scheduler``, ``scheduler_identity``, ``extra``, and
            ``optimizer_pristine`` only when True. Containers are copies.
        """
        payload: dict[str, Any] = {
            "schema": TRAINER_STATE_SCHEMA,
            "optimizer_step": self.optimizer_step,
            "iter": self.optimizer_step,
            "attempt_id": self.attempt_id,
            "skips_total": self.skips_total,
            "skips_consecutive": self.skips_consecutive,
            "open_microbatches": 0,
            "rng": None if self.rng is None else self.rng.to_payload(),
            "scheduler": copy.deepcopy(self.scheduler_state),
            "scheduler_identity": (
                None if self.scheduler_identity is None else self.scheduler_identity.to_payload()
            ),
            "extra": copy.deepcopy(self.extra),
        }
        if self.optimizer_pristine:
            payload["optimizer_pristine"] = True
        return payload

    @classmethod
    def from_payload(cls, payload: object, *, source: str) -> TrainerState:
        """Validate a loaded ``trainer.pt`` payload and build the state, or fail with every reason.

        A payload without ``schema`` is a legacy file: ``attempt_id`` defaults to the optimizer
        step, the skip counters to 0, unknown keys are ignored. A payload with the current schema
        must hold only its own keys. Nothing contradictory is normalized: ``optimizer_step`` and
        ``iter`` must agree when both exist, an open accumulation window fails, a malformed RNG
        inventory fails (it is never taken for a missing one).

        Args:
            payload: what ``torch.load(path, weights_only=True)`` returned.
            source: the file, named in the error.

        Returns:
            The validated state.

        Raises:
            TrainerStateError: naming ``source`` and each bad field with expected vs got; its
                ``problems`` attribute lists the same lines.
        """
        if not isinstance(payload, dict):
            raise _state_error(
                source,
                "trainer state",
                [f"expected a dict payload; got {_describe(payload)}"],
                _CORRUPT_FIX,
            )
        problems: list[str] = []
        legacy = "schema" not in payload
        if not legacy:
            if payload["schema"] != TRAINER_STATE_SCHEMA:
                problems.append(
                    f"schema: expected {TRAINER_STATE_SCHEMA!r} (or none, for a legacy file); got "
                    f"{_describe(payload['schema'])}; a newer or foreign writer made this file, "
                    "read it with the statecraft release that wrote it"
                )
            problems += [
                f"unexpected key {k!r} (not part of {TRAINER_STATE_SCHEMA})"
                for k in payload
                if k not in _PAYLOAD_KEYS
            ]

        def count(name: str, default: int | None) -> int | None:
            """The counter ``name``, its legacy default when absent, None when malformed."""
            value = payload.get(name, default)
            if name in payload and (not _is_int(value) or value < 0):
                problems.append(f"{name}: expected an int >= 0; got {_describe(value)}")
                return None
            return value

        step, alias = count("optimizer_step", None), count("iter", None)
        if "optimizer_step" not in payload and "iter" not in payload:
            problems.append("optimizer_step: missing (and no legacy 'iter' either)")
        if step is not None and alias is not None and step != alias:
            problems.append(
                f"optimizer_step and iter conflict: optimizer_step={step}, iter={alias}; "
                "they are the same clock and must agree"
            )
        step = alias if step is None else step
        clocks = {
            "optimizer_step": step,
            "attempt_id": count("attempt_id", step),
            "skips_total": count("skips_total", 0),
            "skips_consecutive": count("skips_consecutive", 0),
        }
        if None not in clocks.values():
            problems += _clock_problems(**clocks)
        if "open_microbatches" in payload:
            open_mb = payload["open_microbatches"]
            if not _is_int(open_mb):
                problems.append(f"open_microbatches: expected the int 0; got {_describe(open_mb)}")
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
                problems += _problems_of(exc, "rng")
        scheduler_state = payload.get("scheduler")
        if scheduler_state is not None and not isinstance(scheduler_state, dict):
            problems.append(
                f"scheduler: expected a state_dict (dict) or None; got {_describe(scheduler_state)}"
            )
        identity = None
        if payload.get("scheduler_identity") is not None:
            try:
                identity = SchedulerIdentity.from_payload(
                    payload["scheduler_identity"], source=source
                )
            except TrainerStateError as exc:
                problems += _problems_of(exc, "scheduler_identity")
        pristine = payload.get("optimizer_pristine", False)
        if "optimizer_pristine" in payload and pristine is not True:
            problems.append(
                f"optimizer_pristine: expected True (the key is written only when true); "
                f"got {_describe(pristine)}"
            )
        extra = payload.get("extra", {})
        if type(extra) is not dict:
            problems.append(f"extra: expected a dict; got {_describe(extra)}")
        else:
            problems += _weights_only_problems(extra, "extra", json_only=True)
        if problems:
            raise _state_error(source, "trainer state", problems, _CORRUPT_FIX)
        try:
            return cls(
                **clocks,
                rng=rng,
                scheduler_state=scheduler_state,
                scheduler_identity=identity,
                optimizer_pristine=pristine,
                extra=extra,
            )
        except TrainerStateError as exc:
            problems = list(getattr(exc, "problems", [str(exc)]))
            raise _state_error(source, "trainer state", problems, _CORRUPT_FIX) from None
