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
   then ``state.to_clocks()`` for the loop and :func:`~statecraft.checkpoint.state.restore_rank_rng`
   on every rank.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import attrs
import torch

from statecraft.checkpoint.state.clocks import (
    CLOCK_NAMES,
    UpdateClocks,
    clock_problems,
)
from statecraft.checkpoint.state.problems import (
    TRAINER_CORRUPT_FIX,
    deep_equal,
    describe,
    is_int,
    problems_of,
    state_error,
)
from statecraft.checkpoint.state.rng_inventory import RngInventory
from statecraft.checkpoint.state.scheduler_identity import SchedulerIdentity
from statecraft.errors import TrainerStateError

__all__ = ["TRAINER_STATE_SCHEMA", "TrainerState", "optimizer_is_pristine"]

TRAINER_STATE_SCHEMA = "statecraft.trainer-state.v1"

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
            f"{describe(optimizer)}; pass the torch.optim.Optimizer itself"
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
                problems.append(f"{path}: expected str keys; got {describe(key)}")
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
    return [f"{path}: expected {allowed}; got {describe(value)}"]


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
        default=None, eq=attrs.cmp_using(eq=deep_equal), hash=False
    )
    scheduler_identity: SchedulerIdentity | None = None
    optimizer_pristine: bool = False
    extra: dict[str, Any] = attrs.field(factory=dict, eq=attrs.cmp_using(eq=deep_equal), hash=False)

    def __attrs_post_init__(self) -> None:
        problems = []
        for name in CLOCK_NAMES:
            value = getattr(self, name)
            if not is_int(value) or value < 0:
                problems.append(f"{name}: expected an int >= 0; got {describe(value)}")
        if not problems:
            problems += clock_problems(**{name: getattr(self, name) for name in CLOCK_NAMES})
        if self.rng is not None and not isinstance(self.rng, RngInventory):
            problems.append(f"rng: expected an RngInventory or None; got {describe(self.rng)}")
        if self.scheduler_state is not None:
            if type(self.scheduler_state) not in (dict, OrderedDict):
                got = describe(self.scheduler_state)
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
                f"got {describe(self.scheduler_identity)}"
            )
        if type(self.optimizer_pristine) is not bool:
            problems.append(
                f"optimizer_pristine: expected a bool; got {describe(self.optimizer_pristine)}"
            )
        if type(self.extra) is not dict:
            problems.append(f"extra: expected a dict; got {describe(self.extra)}")
        else:
            problems += _weights_only_problems(self.extra, "extra", json_only=True)
        if problems:
            raise state_error(
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
            rng: from :func:`~statecraft.checkpoint.state.gather_rng_inventory`, or ``None``.
            scheduler: anything with ``state_dict()`` (deep-copied), or ``None``.
            scheduler_identity: the schedule's identity, or ``None`` (legacy schedule).
            optimizer: decides ``optimizer_pristine`` via :func:`optimizer_is_pristine`.
            extra: the loop's own small JSON values (deep-copied).

        Raises:
            TrainerStateError: the accumulation window is open, or a value is unsaveable.
        """
        if not isinstance(clocks, UpdateClocks):
            raise TrainerStateError(
                f"TrainerState.capture() expects UpdateClocks; got {describe(clocks)}"
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
            raise state_error(
                source,
                "trainer state",
                [f"expected a dict payload; got {describe(payload)}"],
                TRAINER_CORRUPT_FIX,
            )
        problems: list[str] = []
        legacy = "schema" not in payload
        if not legacy:
            if payload["schema"] != TRAINER_STATE_SCHEMA:
                problems.append(
                    f"schema: expected {TRAINER_STATE_SCHEMA!r} (or none, for a legacy file); got "
                    f"{describe(payload['schema'])}; a newer or foreign writer made this file, "
                    "read it with the statecraft release that wrote it"
                )
            problems += [
                f"unexpected key {k!r} (not part of {TRAINER_STATE_SCHEMA})"
                for k in payload
                if k not in _PAYLOAD_KEYS
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
                identity = SchedulerIdentity.from_payload(
                    payload["scheduler_identity"], source=source
                )
            except TrainerStateError as exc:
                problems += problems_of(exc, "scheduler_identity")
        pristine = payload.get("optimizer_pristine", False)
        if "optimizer_pristine" in payload and pristine is not True:
            problems.append(
                f"optimizer_pristine: expected True (the key is written only when true); "
                f"got {describe(pristine)}"
            )
        extra = payload.get("extra", {})
        if type(extra) is not dict:
            problems.append(f"extra: expected a dict; got {describe(extra)}")
        else:
            problems += _weights_only_problems(extra, "extra", json_only=True)
        if problems:
            raise state_error(source, "trainer state", problems, TRAINER_CORRUPT_FIX)
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
            raise state_error(source, "trainer state", problems, TRAINER_CORRUPT_FIX) from None
