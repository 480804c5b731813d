"""Crash scenarios of the ``validation`` machine, run by ``tests/`` and ``statecraft
crashcheck``.

Each scenario runs the production validation machine with its production bindings over the
production ``LocalStore`` on a :class:`~statecraft.storage.SimWorld` disk; its save step is the
production :func:`~statecraft.checkpoint.save.saving.save_full_checkpoint` (the production save
machine's ``recover``) of real torch objects (:func:`~statecraft.proofs.training.tracked_at`).
The evaluation is a deterministic :class:`CountingEvaluator` that records every call and the
I/O operation count when it returned, so the checks can tell whether a record was created
after the evaluation succeeded.

Recovery is what a restarted training process does: ``resume=auto`` (the production resume
machine, loading into fresh torch objects), then, when the adopted checkpoint is the target
with a validation stage, the validation machine's ``recover`` without a save (the path of
:func:`~statecraft.checkpoint.validation.saving.finish_pending_validation`) with a fresh
counting evaluator; otherwise the whole transaction again. The checks are in
:mod:`statecraft.proofs.validation.checks` (``specs/validation.toml``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from statecraft.checkpoint.kernel.evaluation import Evaluation
from statecraft.checkpoint.kernel.validation_records import (
    ValidationIdentity,
    ValidationStage,
    ValidationState,
    read_stage,
)
from statecraft.checkpoint.save.saving import save_full_checkpoint
from statecraft.checkpoint.validation.bindings import ValidationContext
from statecraft.engine import CrashPlan, Machine, RunResult
from statecraft.engine.crash import IoGate, IoRecord, SimulatedCrash
from statecraft.proofs import damaged_trees as damage
from statecraft.proofs.oracle import CHECKPOINTS_ROOT, DiskView
from statecraft.proofs.save.scenarios import (
    ResumeObservation,
    resume_context,
    save_context,
    shipped_machine,
)
from statecraft.proofs.training import (
    SALT_RETRY,
    SALT_RUN,
    SALT_SETUP,
    LoadedState,
    fresh_objects,
    preserved_rng,
    rng_at,
    tracked_at,
)
from statecraft.storage.base import Store
from statecraft.storage.sim import SimWorld

__all__ = [
    "IDENTITY",
    "CountingEvaluator",
    "ValidationRecovery",
    "ValidationScenario",
    "expected_metrics",
    "save_evaluation_pending",
    "validation_scenarios",
]

#: the validation identity every scenario runs under
IDENTITY = ValidationIdentity(
    True,
    "heldout-shard-0",
    ValidationIdentity.config_digest(
        {
            "every": 2,
            "save_checkpoint": True,
            "checkpoint_components": ["model", "optimizer", "training_state"],
            "before_training": False,
        }
    ),
)


def save_evaluation_pending(store: Store, iteration: int, *, salt: int, location: str) -> Any:
    """The production save of a durable validation's checkpoint at ``iteration`` (the
    harness's tracked objects for ``salt``, stage ``EVALUATION_PENDING``): the one place the
    proofs and tests commit an evaluation-pending checkpoint."""
    return save_full_checkpoint(
        tracked_at(iteration, salt=salt),
        store,
        rng=rng_at(iteration),
        data=None,
        step=iteration,
        lease=None,
        machine=shipped_machine("save"),
        location=location,
        validation=ValidationState(IDENTITY, ValidationStage.EVALUATION_PENDING),
    )


def expected_metrics(step: int) -> dict[str, float]:
    """What the deterministic evaluation returns at ``step``."""
    return {"val_loss": 1.0 / (step + 1), "val_accuracy": step / (step + 10)}


class CountingEvaluator:
    """The loop's evaluation, deterministic: records each call (the step) and, for each call
    that returned, the number of store operations its gate had counted by then (the index the
    next operation gets). ``fails``: every call raises instead (a held-out shard is away)."""

    def __init__(self, gate: IoGate | None, *, fails: bool = False) -> None:
        self.gate = gate
        self.fails = fails
        self.calls: list[int] = []
        self.returned_at: list[int] = []

    def __repr__(self) -> str:
        return f"CountingEvaluator(calls={self.calls}, returned_at={self.returned_at})"

    def __call__(self, step: int) -> dict[str, float]:
        self.calls.append(step)
        if self.fails:
            raise RuntimeError("held-out shard 0 is unavailable")
        self.returned_at.append(self.gate.count if self.gate is not None else 0)
        return expected_metrics(step)


def _record(world: SimWorld) -> IoGate:
    gate = IoGate()
    world.rearm(gate)
    return gate


@attrs.frozen
class ValidationRecovery:
    """What the restarted process did and saw.

    Attributes:
        first: its ``resume=auto``.
        path: ``"finish"`` (the adopted target was pending: the machine's recover without a
            save) or ``"again"`` (the whole transaction, save included).
        result: the validation run's result.
        seen: the disk as the validation run found it (after resume, which writes nothing).
        io: the store operations the validation run performed.
        evaluator: its evaluation (calls, returns).
        context: its context (metrics, announcement).
    """

    first: ResumeObservation
    path: str
    result: RunResult
    seen: DiskView
    io: tuple[IoRecord, ...]
    evaluator: CountingEvaluator
    context: ValidationContext


@attrs.define
class ValidationScenario:
    """Validate ``target`` durably after the ``previous`` full checkpoints were committed.

    Attributes:
        run_fails: the crashed run's evaluation fails (the recovery's succeeds).
        resumed_at_evaluated: setup leaves ``target`` committed evaluation-pending with its
            evaluated record (the process was killed right after recording); the run is a
            resumed run's finish (no save).
        machine_factory: the validation machine to run (tests swap in broken ones).
        last_run: the evaluation of the latest crashed run (the explorer checks each crash
            state of a run before it starts the next run).
    """

    name: str
    target: int
    previous: tuple[int, ...] = (2,)
    run_fails: bool = False
    resumed_at_evaluated: bool = False
    machine_factory: Callable[[], Machine] = attrs.field(
        default=lambda: shipped_machine("validation")
    )
    machine: str = "validation"
    recovery_may_fail: bool = False
    last_run: CountingEvaluator | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def plan_files(self) -> tuple[str, ...]:
        return ("model.pt", "optim.pt", "trainer.pt")

    def store(self, world: SimWorld) -> Store:
        return world.local_store(CHECKPOINTS_ROOT)

    def context(
        self, store: Store, evaluator: CountingEvaluator, *, salt: int | None
    ) -> ValidationContext:
        """The one place the harness builds a validation context; ``salt=None``: a resumed
        run's finish (no save)."""
        save: Callable[[], Any] | None = None
        if salt is not None:

            def save() -> Any:
                return save_evaluation_pending(
                    store, self.target, salt=salt, location=CHECKPOINTS_ROOT
                )

        return ValidationContext(
            store=store,
            iteration=self.target,
            evaluation=Evaluation(evaluator, IDENTITY.source),
            identity=IDENTITY,
            save=save,
        )

    def setup(self, world: SimWorld) -> None:
        for iteration in self.previous:
            ctx = save_context(self.store(world), iteration, with_data=False, salt=SALT_SETUP)
            shipped_machine("save").recover(ctx).raise_for_failure()
        self.store(world)
        if self.resumed_at_evaluated:
            pending = self.context(self.store(world), CountingEvaluator(None), salt=SALT_SETUP)
            try:  # killed right after record_evaluation (effect #2)
                shipped_machine("validation").recover(pending, crash=CrashPlan(after_effect=2))
            except SimulatedCrash:
                pass
            else:  # pragma: no cover - the crash plan always fires
                raise RuntimeError("setup of a resumed-at-evaluated scenario did not crash")

    def run(self, world: SimWorld, *, crash: CrashPlan | None) -> RunResult:
        evaluator = CountingEvaluator(world.gate, fails=self.run_fails)
        self.last_run = evaluator
        salt = None if self.resumed_at_evaluated else SALT_RUN
        ctx = self.context(self.store(world), evaluator, salt=salt)
        return self.machine_factory().recover(ctx, crash=crash, gate=world.gate)

    def _resume(self, world: SimWorld) -> tuple[ResumeObservation, ValidationStage]:
        store = self.store(world)
        seen = DiskView.of(world)
        gate = _record(world)
        damage.PAYLOAD_RAN.clear()
        objects = fresh_objects(with_data=False)
        ctx = resume_context(store, objects)
        shipped_machine("resume").run(ctx).raise_for_failure()
        if ctx.result is None:
            raise RuntimeError("resume machine ended without a result")
        loaded = LoadedState.of(objects, ctx.tracked.clocks) if ctx.result.resumed else None
        observation = ResumeObservation(
            ctx.result, seen, tuple(gate.log), loaded, tuple(damage.PAYLOAD_RAN)
        )
        stage = ValidationStage.NONE
        chosen = ctx.chosen
        if ctx.result.resumed and chosen is not None and chosen.trainer is not None:
            stage = read_stage(store, chosen.iteration, chosen.trainer.validation).stage
        return observation, stage

    def recover(self, world: SimWorld) -> ValidationRecovery:
        with preserved_rng():
            first, stage = self._resume(world)
            adopted_target = first.result.resumed and first.result.step == self.target
            path = "finish" if adopted_target and stage is not ValidationStage.NONE else "again"
            seen = DiskView.of(world)
            gate = _record(world)
            evaluator = CountingEvaluator(gate)
            salt = None if path == "finish" else SALT_RETRY
            ctx = self.context(self.store(world), evaluator, salt=salt)
            result = self.machine_factory().recover(ctx, gate=gate)
            result.raise_for_failure()
        return ValidationRecovery(first, path, result, seen, tuple(gate.log), evaluator, ctx)


def validation_scenarios() -> list[ValidationScenario]:
    """The scenarios ``statecraft crashcheck`` runs for the validation machine."""
    return [
        ValidationScenario("validate-next", target=4, previous=(2,)),
        ValidationScenario(
            "evaluation-fails-then-retry-succeeds", target=4, previous=(), run_fails=True
        ),
        ValidationScenario("resumed-at-evaluated", target=4, resumed_at_evaluated=True),
    ]
