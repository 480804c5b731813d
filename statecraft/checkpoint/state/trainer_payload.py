"""Trainer control state: update clocks, scheduler identity, and the payload of ``trainer.pt``.

``trainer.pt`` is the small control file of a checkpoint. It is written with ``torch.save`` and
read with ``torch.load(..., weights_only=True)``, so a :class:`TrainerState` holds only what that
load reads back (:func:`~statecraft.checkpoint.state.safe_values.unsafe_paths` is empty for its
scheduler state, loop state and stateful objects; capture refuses anything else with
:class:`~statecraft.errors.UnsafeStateError` before a save writes a byte), and
:meth:`TrainerState.from_payload` accepts nothing it cannot prove consistent: conflicting clocks,
malformed counters, an open accumulation window or a damaged RNG inventory fail with one error
naming the file and every bad field, instead of being normalized into a plausible state.

The call order of a training loop, and who calls each step:

1. every microbatch, the loop: ``clocks.record(outcome)`` with the trainer's
   :class:`Outcome` (``ACCUMULATING`` until the window closes as ``APPLIED`` or ``SKIPPED``);
2. save, the checkpoint facade: ``TrainerState.capture(clocks, rng=..., scheduler=...,
   scheduler_identity=..., optimizer=..., extra=loop_state, stateful=objects)`` -- refuses an
   open window and unloadable values -- then
   ``torch.save(state.to_payload(), "trainer.pt")`` on rank 0;
3. resume, the checkpoint facade: ``TrainerState.from_payload(torch.load(...), source=path)``,
   then :func:`check_scheduler_identity` BEFORE loading model, optimizer or scheduler state,
   then ``state.to_clocks()`` for the loop and :func:`~statecraft.checkpoint.state.restore_rank_rng`
   on every rank.

Schema versions: ``statecraft.trainer-state.v3`` (written) adds ``validation`` (the run's
validation identity and the checkpoint's validation stage at save time,
:class:`~statecraft.checkpoint.kernel.validation_records.ValidationState`); ``v2`` added
``stateful``
(name -> ``state_dict()`` of each named stateful object) and ``optimizer_class`` and let
``extra`` (the loop state) hold any weights_only-safe value, tensors included; ``v2``, ``v1``
and legacy (schema-less) files are still read (``validation=None``; v1 and legacy: no stateful
objects, no optimizer class).
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import attrs
import torch

from statecraft.checkpoint.state.canonical import canonical
from statecraft.checkpoint.state.clocks import (
    CLOCK_NAMES,
    UpdateClocks,
    clock_problems,
)
from statecraft.checkpoint.state.optimizer_facts import optimizer_class_name, optimizer_is_pristine
from statecraft.checkpoint.state.problems import (
    TRAINER_CORRUPT_FIX,
    deep_equal,
    describe,
    is_int,
    state_error,
)
from statecraft.checkpoint.state.rng_inventory import RngInventory
from statecraft.checkpoint.state.safe_values import require_safe, unsafe_paths
from statecraft.checkpoint.state.scheduler_identity import SchedulerIdentity
from statecraft.checkpoint.state.trainer_fields import (
    READABLE_TRAINER_SCHEMAS,
    TRAINER_STATE_SCHEMA,
    payload_fields,
    stateful_problems,
    value_problems,
)
from statecraft.checkpoint.state.validation_state import ValidationState
from statecraft.errors import TrainerStateError

__all__ = [
    "READABLE_TRAINER_SCHEMAS",
    "TRAINER_STATE_SCHEMA",
    "TrainerState",
    "optimizer_class_name",
    "optimizer_is_pristine",
]


@attrs.frozen(kw_only=True)
class TrainerState:
    """A quiescent snapshot of the trainer's control state: the payload of ``trainer.pt``.

    Construction checks the clocks (non-negative ints, ``attempt_id >= optimizer_step``,
    ``skips_consecutive <= skips_total``) and that ``scheduler_state`` and ``extra`` hold only
    what ``torch.load(weights_only=True)`` (for ``extra``: JSON) can read back, so a state that
    exists can be saved and resumed. The accumulation window is always closed (``accum = 0``).
    ``scheduler_state``, ``extra`` and ``stateful`` must load back with
    ``torch.load(weights_only=True)`` (tensors are allowed; NumPy values, sets on old torch,
    custom classes are not; see :mod:`~statecraft.checkpoint.state.safe_values`).

    Attributes:
        optimizer_step: applied optimizer updates (``iter`` in legacy files).
        attempt_id: closed accumulation windows, applied or skipped.
        skips_total: discarded (non-finite) windows.
        skips_consecutive: discarded windows since the last applied one.
        rng: every rank's RNG streams, or ``None`` (not recorded).
        scheduler_state: the scheduler's ``state_dict()``, or ``None``.
        scheduler_identity: the schedule's construction identity, or ``None`` (legacy schedule).
        optimizer_pristine: the optimizer had never stepped (written only when True).
        extra: the loop's own values (``Checkpointer.loop_state``): str keys, any
            weights_only-safe value (a prefetched batch tensor, ``model_args``, config).
        stateful: name -> ``state_dict()`` of each named stateful object
            (``track(stateful={"scaler": scaler})``); names are identifiers.
        optimizer_class: the tracked optimizer's ``"<module>.<qualname>"``, or ``None``
            (not recorded: a v1 or legacy file).
        validation: the run's validation identity and this checkpoint's validation stage at
            save time (``NONE`` for a regular save, ``EVALUATION_PENDING`` for a durable
            validation checkpoint), or ``None`` (not recorded: a file older than v3).

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
    stateful: dict[str, Any] = attrs.field(
        factory=dict, eq=attrs.cmp_using(eq=deep_equal), hash=False
    )
    optimizer_class: str | None = None
    validation: ValidationState | None = None

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
                problems += unsafe_paths(self.scheduler_state, "scheduler_state")
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
        problems += value_problems(self.extra, "extra")
        problems += stateful_problems(self.stateful)
        if self.optimizer_class is not None and type(self.optimizer_class) is not str:
            problems.append(
                f"optimizer_class: expected a str or None; got {describe(self.optimizer_class)}"
            )
        if self.validation is not None and not isinstance(self.validation, ValidationState):
            problems.append(
                f"validation: expected a ValidationState or None; got {describe(self.validation)}"
            )
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
        stateful: Mapping[str, Any] | None = None,
        unsafe_elsewhere: tuple[str, ...] = (),
        validation: ValidationState | None = None,
    ) -> TrainerState:
        """Snapshot the live training objects; later mutation of them does not change it.

        Every captured value is deep-copied, then checked: a value
        ``torch.load(weights_only=True)`` could not read back refuses the capture with one
        :class:`~statecraft.errors.UnsafeStateError` naming each key path (``loop_state``,
        ``stateful["scaler"]``, ``scheduler``), before anything is written.

        Args:
            clocks: the loop's clocks; the window must be closed.
            rng: from :func:`~statecraft.checkpoint.state.gather_rng_inventory`, or ``None``.
            scheduler: anything with ``state_dict()`` (deep-copied), or ``None``.
            scheduler_identity: the schedule's identity, or ``None`` (legacy schedule).
            optimizer: decides ``optimizer_pristine`` via :func:`optimizer_is_pristine` and
                ``optimizer_class`` via :func:`optimizer_class_name`.
            extra: the loop state (``Checkpointer.loop_state``; deep-copied).
            stateful: name -> named stateful object (its ``state_dict()`` is deep-copied).
            unsafe_elsewhere: lines already found in state captured with this one (every rank's
                data state), reported in the same refusal.
            validation: the run's validation identity and the stage this save records;
                ``None`` records ``ValidationState()`` (validation disabled, stage ``NONE``):
                every save records the run's identity.

        Raises:
            TrainerStateError: the accumulation window is open.
            UnsafeStateError: a value cannot be loaded back (every one is listed).
        """
        if not isinstance(clocks, UpdateClocks):
            raise TrainerStateError(
                f"TrainerState.capture() expects UpdateClocks; got {describe(clocks)}"
            )
        clocks.require_quiescent("capture the trainer state")
        loop_state = {} if extra is None else copy.deepcopy(dict(extra))
        objects = {name: copy.deepcopy(obj.state_dict()) for name, obj in (stateful or {}).items()}
        scheduler_state = None if scheduler is None else copy.deepcopy(scheduler.state_dict())
        require_safe(
            {"loop_state": loop_state, "stateful": objects, "scheduler": scheduler_state},
            action=f"save the checkpoint of step {clocks.optimizer_step}",
            found=unsafe_elsewhere,
        )
        return cls(
            optimizer_step=clocks.optimizer_step,
            attempt_id=clocks.attempt_id,
            skips_total=clocks.skips_total,
            skips_consecutive=clocks.skips_consecutive,
            rng=rng,
            scheduler_state=scheduler_state,
            scheduler_identity=scheduler_identity,
            optimizer_pristine=optimizer is not None and optimizer_is_pristine(optimizer),
            extra=loop_state,
            stateful=objects,
            optimizer_class=None if optimizer is None else optimizer_class_name(optimizer),
            validation=ValidationState() if validation is None else validation,
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
            0), ``rng``, ``scheduler``, ``scheduler_identity``, ``extra``, ``stateful``,
            ``optimizer_class``, ``validation`` (``ValidationState.to_payload()``, or
            ``None`` when not recorded), and ``optimizer_pristine`` only when True. Containers
            are copies; every value is in
            :func:`~statecraft.checkpoint.state.canonical.canonical` form (the same state
            gives the same bytes).
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
            "stateful": copy.deepcopy(self.stateful),
            "optimizer_class": self.optimizer_class,
            "validation": None if self.validation is None else self.validation.to_payload(),
        }
        if self.optimizer_pristine:
            payload["optimizer_pristine"] = True
        # the top level keeps the fixed order built above; every value is canonical
        return {key: canonical(value) for key, value in payload.items()}

    @classmethod
    def from_payload(cls, payload: object, *, source: str) -> TrainerState:
        """Validate a loaded ``trainer.pt`` payload and build the state, or fail with every reason.

        A payload without ``schema`` is a legacy file: ``attempt_id`` defaults to the optimizer
        step, the skip counters to 0, unknown keys are ignored. A payload with a schema of
        :data:`READABLE_TRAINER_SCHEMAS` must hold only that version's keys. Nothing
        contradictory is normalized: ``optimizer_step`` and ``iter`` must agree when both
        exist, an open accumulation window fails, a malformed RNG inventory fails (it is never
        taken for a missing one).

        Args:
            payload: what ``torch.load(path, weights_only=True)`` returned.
            source: the file, named in the error.

        Returns:
            The validated state.

        Raises:
            TrainerStateError: naming ``source`` and each bad field with expected vs got; its
                ``problems`` attribute lists the same lines.
        """
        fields = payload_fields(payload, source=source)
        try:
            return cls(**fields)
        except TrainerStateError as exc:
            problems = list(getattr(exc, "problems", [str(exc)]))
            raise state_error(source, "trainer state", problems, TRAINER_CORRUPT_FIX) from None
