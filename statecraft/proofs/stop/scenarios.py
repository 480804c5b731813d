"""Crash scenarios of the ``emergency`` machine (the save at a stop, then ``DONE.json``), run
by ``tests/`` and ``statecraft crashcheck``.

Each scenario runs the production emergency machine with its production bindings over the
production ``LocalStore`` on a :class:`~statecraft.storage.SimWorld` disk. The context's
``write`` is what the facade's emergency step hands it: the production
:func:`~statecraft.checkpoint.save.saving.save_full_checkpoint` (the full plan; the
evaluation-pending one through
:func:`~statecraft.proofs.validation.scenarios.save_evaluation_pending` when a validation was
due), or the production artifact machine (a ``run`` plan without the
optimizer). The stop decision is taken before the machine starts, from a model of the
termination watch's flag-only handler (:class:`SignalLatch`); the second-signal scenario
delivers a second signal to it before every store operation of the save.

Recovery is what a requeued process does: the emergency machine's ``recover`` (it observes
the stop's traces and must end without any effect: the emergency save is never run again),
then ``resume=auto`` (the production resume machine, with the attempt's artifacts), then, when
it adopted a pending validation checkpoint, the validation machine's pending stage. The checks
are in :mod:`statecraft.proofs.stop.checks` (``specs/emergency.toml``).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from statecraft.checkpoint.config import CheckpointConfig
from statecraft.checkpoint.config.knobs import Component, EmergencyPlan
from statecraft.checkpoint.kernel.layout import ARTIFACTS_DIR, CHECKPOINTS_DIR, RunAttempt
from statecraft.checkpoint.save.saving import save_full_checkpoint
from statecraft.checkpoint.stop.bindings import EmergencyContext
from statecraft.checkpoint.stop.emergency_plan import EmergencyBoundary, emergency_plan
from statecraft.checkpoint.stop.records import (
    EmergencyKind,
    StopDecision,
    first_reason,
    signal_reason,
)
from statecraft.engine import CrashPlan, Machine, RunResult
from statecraft.proofs.artifacts.oracle import ARTIFACTS_ROOT
from statecraft.proofs.artifacts.scenarios import artifact_context
from statecraft.proofs.oracle import CHECKPOINTS_ROOT, iteration_name
from statecraft.proofs.save.scenarios import save_context, shipped_machine
from statecraft.proofs.stop.recovery import (
    EmergencyRecovery,
    finish_pending,
    record_io,
    resume_seen,
)
from statecraft.proofs.training import (
    SALT_RETRY,
    SALT_RUN,
    SALT_SETUP,
    preserved_rng,
    rng_at,
    tracked_at,
)
from statecraft.proofs.validation.scenarios import (
    save_evaluation_pending,
)
from statecraft.storage.sim import SimWorld

__all__ = [
    "ATTEMPT",
    "DONE_PATH",
    "RUN_DIR",
    "EmergencyRun",
    "EmergencyScenario",
    "SignalLatch",
    "emergency_scenarios",
    "lacks_a_component",
]

RUN_DIR = posixpath.dirname(CHECKPOINTS_ROOT)
ATTEMPT = RunAttempt(Path(RUN_DIR), posixpath.basename(RUN_DIR), False, False, "the scenario's")
DONE_PATH = f"{RUN_DIR}/DONE.json"
FULL: tuple[Component, ...] = ("model", "optimizer", "training_state")
FIRST_SIGNAL = "SIGUSR1"
SECOND_SIGNAL = "SIGTERM"
CLOCK = 1_000.0  # the scenarios' wall clock: deterministic records


class SignalLatch:
    """The flag-only handler of the termination watch, as a model: a delivered signal is
    only recorded (no I/O); the reason is the first recorded one."""

    def __init__(self) -> None:
        self.received: list[str] = []

    def deliver(self, name: str) -> None:
        self.received.append(name)

    def reason(self) -> str | None:
        return first_reason(signal_reason(n) for n in self.received[:1])


@attrs.define
class EmergencyRun:
    """What one crashed (or reference) run did, for the checks.

    Attributes:
        decision: the stop decision it ran under.
        latch: the termination handler's model (the second-signal scenario delivers to it).
        writes: the kind of every save ``write`` started, in order (at most one).
        delivered: second signals delivered while a save ran.
        context: the run's context.
    """

    decision: StopDecision
    latch: SignalLatch
    writes: list[str] = attrs.field(factory=list)
    delivered: int = 0
    context: EmergencyContext | None = None


@attrs.define
class EmergencyScenario:
    """Stop at ``target`` after the ``previous`` full checkpoints were committed.

    Attributes:
        emergency: ``emergency_checkpoint_components`` (``full`` / ``run``).
        components: ``checkpoint_components`` (the ``run`` plan's base).
        validation_due: a validation was due at the stop (a full evaluation-pending save).
        covered_checkpoint: setup commits the full checkpoint of ``target`` (the stop finds
            the step covered).
        covered_artifact: setup commits an artifact of ``target`` with these components
            (a validation artifact; ``()``: none).
        second_signal: a second termination signal arrives before every store operation of
            the emergency save.
        expected: the decision the scenario's uncrashed run must take (the checks judge the
            written directory against it).
        machine_factory: the emergency machine (tests swap in deliberately broken ones).
        inject_faults: the explorer also fails each operation.
        last_run: the latest crashed run (checked before the next run starts).
    """

    name: str
    target: int = 4
    previous: tuple[int, ...] = (2,)
    emergency: EmergencyPlan = "full"
    components: tuple[Component, ...] = FULL
    validation_due: bool = False
    covered_checkpoint: bool = False
    covered_artifact: tuple[str, ...] = ()
    second_signal: bool = False
    expected: EmergencyKind = EmergencyKind.CHECKPOINT
    inject_faults: bool = False
    machine_factory: Callable[[], Machine] = attrs.field(
        default=lambda: shipped_machine("emergency")
    )
    machine: str = "emergency"
    recovery_may_fail: bool = False
    last_run: EmergencyRun | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def config(self) -> CheckpointConfig:
        return CheckpointConfig(
            emergency_checkpoint_components=self.emergency,
            checkpoint_components=self.components,
        )

    @property
    def plan(self) -> tuple[str, ...]:
        """The plan the stop must find on disk afterwards (the full one when a validation was
        due: its resume needs exact state)."""
        if self.validation_due:
            return FULL
        return emergency_plan(self.config).components

    @property
    def plan_files(self) -> tuple[str, ...]:
        """The files of a full checkpoint (no data source)."""
        return ("model.pt", "optim.pt", "trainer.pt")

    @property
    def reason(self) -> str:
        """The reason every record of the stop must carry (the first signal's)."""
        return signal_reason(FIRST_SIGNAL)

    def setup(self, world: SimWorld) -> None:
        store = world.local_store(CHECKPOINTS_ROOT)
        for iteration in self.previous:
            ctx = save_context(store, iteration, with_data=False, salt=SALT_SETUP)
            shipped_machine("save").recover(ctx).raise_for_failure()
        if self.covered_checkpoint:
            ctx = save_context(store, self.target, with_data=False, salt=SALT_SETUP)
            shipped_machine("save").recover(ctx).raise_for_failure()
        # The attempt's (empty) checkpoint_artifacts/ exists (its first creation is the
        # store's; see the artifact scenarios).
        artifacts = world.local_store(ARTIFACTS_ROOT)
        if self.covered_artifact:
            actx = artifact_context(
                artifacts, self.target, self.covered_artifact, with_data=False, salt=SALT_SETUP
            )
            shipped_machine("artifact").recover(actx).raise_for_failure()

    def writer(
        self, world: SimWorld, run: EmergencyRun, salt: int
    ) -> Callable[[EmergencyBoundary], str]:
        """The context's ``write``: what the facade's emergency step does for one boundary
        (the production saves; synchronous)."""
        step = self.target

        def write(boundary: EmergencyBoundary) -> str:
            run.writes.append(boundary.kind.value)
            store = world.local_store(CHECKPOINTS_ROOT)
            if boundary.kind is EmergencyKind.EVALUATION_PENDING:
                save_evaluation_pending(store, step, salt=salt, location=CHECKPOINTS_ROOT)
            elif boundary.kind is EmergencyKind.CHECKPOINT:
                save_full_checkpoint(
                    tracked_at(step, salt=salt),
                    store,
                    rng=rng_at(step),
                    data=None,
                    step=step,
                    lease=None,
                    machine=shipped_machine("save"),
                    location=CHECKPOINTS_ROOT,
                )
            elif boundary.kind is EmergencyKind.ARTIFACT:
                actx = artifact_context(
                    world.local_store(ARTIFACTS_ROOT),
                    step,
                    boundary.plan.components,
                    with_data=False,
                    salt=salt,
                )
                shipped_machine("artifact").recover(actx).raise_for_failure()
                return f"{ARTIFACTS_DIR}/{iteration_name(step)}"
            else:  # pragma: no cover - the table never saves a covered step
                raise RuntimeError(f"write called for a {boundary.kind.value} boundary")
            return f"{CHECKPOINTS_DIR}/{iteration_name(step)}"

        return write

    def context(self, world: SimWorld, run: EmergencyRun, salt: int) -> EmergencyContext:
        """The one place the harness builds an emergency context."""
        ctx = EmergencyContext(
            config=self.config,
            decision=run.decision,
            step=self.target,
            validation_due=self.validation_due,
            attempt=ATTEMPT,
            filesystem=world.fs,
            write=self.writer(world, run, salt),
            lease=None,
            clock=lambda: CLOCK + 0.25,
        )
        run.context = ctx
        return ctx

    def new_run(self) -> EmergencyRun:
        """A run's stop decision, taken from the latch before the transaction starts."""
        latch = SignalLatch()
        latch.deliver(FIRST_SIGNAL)
        decision = StopDecision(True, latch.reason(), (0,), decided_at=CLOCK)
        return EmergencyRun(decision, latch)

    def run(self, world: SimWorld, *, crash: CrashPlan | None) -> RunResult:
        run = self.new_run()
        self.last_run = run
        ctx = self.context(world, run, SALT_RUN)
        gate = world.gate
        if not self.second_signal:
            return self.machine_factory().run(ctx, crash=crash, gate=gate)
        write = ctx.write

        def write_under_signals(boundary: EmergencyBoundary) -> str:
            # A second signal before every store operation of the save: the handler only
            # records it (what the watch's flag-only handler does).
            original = gate.before_io

            def before_io(op: str, target: str) -> Any:
                run.latch.deliver(SECOND_SIGNAL)
                run.delivered += 1
                return original(op, target)

            gate.before_io = before_io  # type: ignore[method-assign]
            try:
                return write(boundary)
            finally:
                del gate.before_io

        ctx.write = write_under_signals
        return self.machine_factory().run(ctx, crash=crash, gate=gate)

    def recover(self, world: SimWorld) -> EmergencyRecovery:
        with preserved_rng():
            gate = record_io(world)
            run = self.new_run()
            requeue = self.machine_factory().recover(
                self.context(world, run, SALT_RETRY), gate=gate
            )
            requeue_io = tuple(gate.log)
            first = resume_seen(world)
            finished, finish_io = finish_pending(world, first, self.target)
        return EmergencyRecovery(requeue, requeue_io, tuple(run.writes), first, finished, finish_io)


def emergency_scenarios() -> list[EmergencyScenario]:
    """The scenarios ``statecraft crashcheck`` runs for the emergency machine (a validation
    artifact lacking a component of the plan: the escalated ``run`` plan here; the ``full``
    plan's case is :func:`lacks_a_component`, run by the tests)."""
    return [
        EmergencyScenario("full-save", inject_faults=True),
        EmergencyScenario(
            "validation-due-evaluation-pending",
            validation_due=True,
            expected=EmergencyKind.EVALUATION_PENDING,
        ),
        EmergencyScenario(
            "run-artifact-model",
            emergency="run",
            components=("model",),
            expected=EmergencyKind.ARTIFACT,
        ),
        EmergencyScenario(
            "covered-by-full-checkpoint",
            covered_checkpoint=True,
            expected=EmergencyKind.COVERED,
        ),
        EmergencyScenario(
            "covered-by-validation-artifact",
            emergency="run",
            components=("model",),
            covered_artifact=("model",),
            expected=EmergencyKind.COVERED,
        ),
        EmergencyScenario(
            "run-plan-escalated-past-validation-artifact",
            emergency="run",
            components=("model", "training_state"),
            covered_artifact=("model",),
            expected=EmergencyKind.CHECKPOINT,
        ),
        EmergencyScenario("second-signal-during-save", second_signal=True),
    ]


def lacks_a_component() -> EmergencyScenario:
    """The ``full`` plan at a step whose validation artifact holds only ``[model]``: not
    covered, the full checkpoint is saved."""
    return EmergencyScenario(
        "validation-artifact-lacks-a-component",
        covered_artifact=("model",),
        expected=EmergencyKind.CHECKPOINT,
    )
