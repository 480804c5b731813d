"""Crash scenarios of the ``artifact`` machine, run by ``tests/`` and ``statecraft crashcheck``.

Each scenario runs the production artifact machine with its production bindings over the
production ``LocalStore`` rooted at ``checkpoint_artifacts/`` of a :class:`~statecraft.
storage.SimWorld` disk, beside a ``checkpoints/`` root whose previous full checkpoints the
setup saved with the production save machine. Recovery is what a restarted training process
does: ``resume=auto`` (the production resume machine, loading into real torch objects), the
retry of the interrupted artifact save, then ``resume=auto`` again; each step's view of the
disk and its store operations are recorded for :mod:`statecraft.proofs.artifacts.checks`.

The evaluation is a recording callable: :attr:`ArtifactScenario.calls` holds the outcome of
each call of the last :meth:`~ArtifactScenario.run` (the explorer checks every crash state of
one run before it starts the next), the retry's calls are in :class:`ArtifactRecovery`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from statecraft.checkpoint.artifacts.bindings import ArtifactContext
from statecraft.checkpoint.kernel.components import ComponentPlan
from statecraft.checkpoint.kernel.evaluation import Evaluation
from statecraft.checkpoint.resume.bindings import ResumeContext, ResumeResult, Tracked
from statecraft.engine import CrashPlan, Machine, RunResult
from statecraft.engine.crash import IoGate, IoRecord
from statecraft.errors import ArtifactResumeError
from statecraft.proofs.artifacts.oracle import (
    ARTIFACTS_ROOT,
    ArtifactView,
    foreign_manifest,
    garbage_artifact_manifest,
    partial_artifact,
)
from statecraft.proofs.oracle import CHECKPOINTS_ROOT, DiskView
from statecraft.proofs.save.scenarios import save_context, shipped_machine
from statecraft.proofs.training import (
    SALT_RETRY,
    SALT_RUN,
    SALT_SETUP,
    expected_payloads,
    fresh_objects,
    preserved_rng,
)
from statecraft.storage.base import Store
from statecraft.storage.sim import SimWorld

__all__ = [
    "ARTIFACTS_ROOT",
    "ArtifactRecovery",
    "ArtifactScenario",
    "AutoResume",
    "ResumeSeen",
    "artifact_context",
    "artifact_scenarios",
    "expected_metrics",
    "resume_auto",
]


def expected_metrics(iteration: int) -> dict[str, float]:
    """What the scenarios' evaluation returns at ``iteration``."""
    return {"val_loss": 0.5 + iteration / 100}


def _evaluation(calls: list[str], *, fails: bool) -> Evaluation:
    def evaluate(step: int) -> dict[str, float]:
        calls.append("failed" if fails else "ok")
        if fails:
            raise RuntimeError(f"held-out loss at step {step} is NaN")
        return expected_metrics(step)

    return Evaluation(evaluate, source="heldout")


def artifact_context(
    store: Store,
    iteration: int,
    components: tuple[str, ...],
    *,
    with_data: bool,
    salt: int,
    evaluation: Evaluation | None = None,
    evaluate_first: bool = False,
) -> ArtifactContext:
    """The one place the harness builds an artifact transaction's context."""
    plan = ComponentPlan.of(components)
    every = expected_payloads(iteration, with_data=with_data, salt=salt)
    return ArtifactContext(
        store=store,
        plan=plan,
        iteration=iteration,
        payloads={n: every[n] for n in plan.files(with_data=with_data)},
        with_data=with_data,
        evaluation=evaluation,
        evaluate_first=evaluate_first,
    )


@attrs.frozen
class ResumeSeen:
    """One ``resume=auto`` of the restarted process: its result (``None`` when it refused
    because of a newer artifact, ``refused`` then holds the error) and the checkpoints and
    artifacts as it found them."""

    result: ResumeResult | None
    refused: ArtifactResumeError | None
    seen: DiskView
    artifacts: ArtifactView


@attrs.frozen
class ArtifactRecovery:
    """What the restarted process did and saw: resume, retry the artifact save, resume."""

    first: ResumeSeen
    retry: RunResult
    retry_seen: ArtifactView
    retry_io: tuple[IoRecord, ...]
    retry_calls: tuple[str, ...]
    retry_metrics: dict[str, float] | None
    after: ResumeSeen

    @property
    def resumes(self) -> tuple[ResumeSeen, ResumeSeen]:
        return (self.first, self.after)


@attrs.define
class ArtifactScenario:
    """Save the artifact of ``components`` at ``target`` after the full checkpoints
    ``previous`` (and the artifacts ``previous_artifacts``, same plan) were committed.

    Attributes:
        validation: ``"none"``, ``"after"`` (a due cadence artifact, ephemeral validation
            after the commit) or ``"first"`` (requested by validation alone).
        fails / retry_fails: the evaluation of the crashed run / of the retry fails.
        setup_extra: damage applied after the setup's commits (then made durable).
        machine_factory: the artifact machine (tests swap in deliberately broken tables).
        calls: the evaluation outcomes of the last :meth:`run` (``"ok"`` / ``"failed"``).
        last_run: the last :meth:`run`'s result (``None`` when it crashed).
    """

    name: str
    target: int
    components: tuple[str, ...]
    previous: tuple[int, ...] = (2,)
    previous_artifacts: tuple[int, ...] = ()
    with_data: bool = False
    validation: str = "none"
    fails: bool = False
    retry_fails: bool = False
    setup_extra: Callable[[SimWorld], None] | None = None
    machine_factory: Callable[[], Machine] = attrs.field(
        default=lambda: shipped_machine("artifact")
    )
    machine: str = "artifact"
    recovery_may_fail: bool = False
    calls: list[str] = attrs.field(factory=list)
    last_run: RunResult | None = None

    @property
    def plan_files(self) -> tuple[str, ...]:
        return ComponentPlan.of(self.components).files(with_data=self.with_data)

    @property
    def checkpoint_files(self) -> tuple[str, ...]:
        """The files of the setup's full checkpoints."""
        return ("model.pt", "optim.pt", "trainer.pt") + (("data.pt",) if self.with_data else ())

    def _context(self, world: SimWorld, iteration: int, salt: int, calls: list[str] | None):
        evaluation = None
        if self.validation != "none" and calls is not None:
            fails = self.fails if salt == SALT_RUN else self.retry_fails
            evaluation = _evaluation(calls, fails=fails)
        return artifact_context(
            world.local_store(ARTIFACTS_ROOT),
            iteration,
            self.components,
            with_data=self.with_data,
            salt=salt,
            evaluation=evaluation,
            evaluate_first=self.validation == "first",
        )

    def setup(self, world: SimWorld) -> None:
        for iteration in self.previous:
            store = world.local_store(CHECKPOINTS_ROOT)
            ctx = save_context(store, iteration, with_data=self.with_data, salt=SALT_SETUP)
            shipped_machine("save").recover(ctx).raise_for_failure()
        world.local_store(CHECKPOINTS_ROOT)
        # The attempt's (empty) checkpoint_artifacts/ exists: its first creation is
        # LocalStore's, and after a failed fsync of the run directory there (fsyncgate) no
        # retry could make that entry durable again, for any store root.
        world.local_store(ARTIFACTS_ROOT)
        for iteration in self.previous_artifacts:
            ctx = self._context(world, iteration, SALT_SETUP, None)
            shipped_machine("artifact").recover(ctx).raise_for_failure()
        if self.setup_extra is not None:
            self.setup_extra(world)

    def run(self, world: SimWorld, *, crash: CrashPlan | None) -> RunResult:
        self.calls.clear()
        self.last_run = None
        ctx = self._context(world, self.target, SALT_RUN, self.calls)
        self.last_run = self.machine_factory().recover(ctx, crash=crash, gate=world.gate)
        return self.last_run

    def _resume(self, world: SimWorld) -> ResumeSeen:
        run = resume_auto(world, with_data=self.with_data)
        return ResumeSeen(run.result, run.refused, run.seen, run.view)

    def recover(self, world: SimWorld) -> ArtifactRecovery:
        with preserved_rng():
            first = self._resume(world)
            retry_seen = ArtifactView.of(world)
            gate = IoGate()
            world.rearm(gate)
            calls: list[str] = []
            ctx = self._context(world, self.target, SALT_RETRY, calls)
            retry = shipped_machine("artifact").recover(ctx)
            retry_io = tuple(gate.log)
            after = self._resume(world)
        return ArtifactRecovery(
            first, retry, retry_seen, retry_io, tuple(calls), ctx.metrics, after
        )


def artifact_scenarios() -> list[ArtifactScenario]:
    """The scenarios ``statecraft crashcheck`` runs for the artifact machine (a tiny model,
    few files per save, so the whole exploration stays fast)."""
    model = ("model",)
    return [
        ArtifactScenario("model-artifact", target=4, components=model),
        ArtifactScenario(
            "optimizer-and-training-state",
            target=4,
            components=("optimizer", "training_state"),
        ),
        ArtifactScenario(
            "cadence-artifact-then-validation-fails",
            target=4,
            components=model,
            validation="after",
            fails=True,
        ),
        ArtifactScenario(
            "validation-only-artifact", target=4, components=model, validation="first"
        ),
        ArtifactScenario(
            "validation-only-partial-fails-then-retry-passes",
            target=4,
            components=model,
            validation="first",
            fails=True,
        ),
        ArtifactScenario(
            "artifact-over-leftovers-beside-older-artifact",
            target=4,
            components=model,
            previous_artifacts=(3,),
            setup_extra=partial_artifact(4),
        ),
        ArtifactScenario(
            "second-save-to-committed-step",
            target=4,
            components=model,
            previous_artifacts=(4,),
            validation="after",
        ),
        ArtifactScenario(
            "damaged-artifact-manifest",
            target=4,
            components=model,
            setup_extra=garbage_artifact_manifest(4),
        ),
        ArtifactScenario(
            "full-checkpoint-manifest-in-artifact-dir",
            target=4,
            components=model,
            setup_extra=foreign_manifest(4),
        ),
    ]


@attrs.frozen
class AutoResume:
    """One production ``resume=auto`` over a simulated world (:func:`resume_auto`).

    Attributes:
        ctx: the resume context (its ``tracked`` objects loaded when it resumed).
        objects: the fresh torch objects it loaded into.
        result: the resume's result (``None`` when refused).
        refused: the ``ArtifactResumeError`` of a refusal because of a newer artifact.
        seen, view: the disk and the artifacts as they were before the resume.
    """

    ctx: ResumeContext
    objects: Any
    result: ResumeResult | None
    refused: ArtifactResumeError | None
    seen: DiskView
    view: ArtifactView


def resume_auto(world: SimWorld, *, with_data: bool) -> AutoResume:
    """The production ``resume=auto`` into fresh torch objects, with the attempt's artifacts
    (a refusal because of a newer artifact is an answer, not an error).

    Raises:
        what the resume machine raises otherwise.
    """
    store = world.local_store(CHECKPOINTS_ROOT)  # creating a missing root is the store's
    seen, view = DiskView.of(world), ArtifactView.of(world)
    objects = fresh_objects(with_data=with_data)
    tracked = Tracked(
        model=objects.model,
        optimizer=objects.optimizer,
        scheduler=objects.scheduler,
        data=objects.data,
    )
    present = world.fs.stat(ARTIFACTS_ROOT) is not None  # readers never create it
    artifacts = world.local_store(ARTIFACTS_ROOT) if present else None
    ctx = ResumeContext(mode="auto", tracked=tracked, store=store, artifacts=artifacts)
    result = shipped_machine("resume").run(ctx)
    if result.failed and isinstance(result.error, ArtifactResumeError):
        return AutoResume(ctx, objects, None, result.error, seen, view)
    result.raise_for_failure()
    if ctx.result is None:
        raise RuntimeError("resume machine ended without a result")
    return AutoResume(ctx, objects, ctx.result, None, seen, view)
