"""What a requeued process does after a stop, for the emergency scenarios
(:mod:`statecraft.proofs.stop.scenarios`): ``resume=auto`` over the attempt's checkpoints
and artifacts (:func:`resume_seen`), then, when it adopted a pending validation checkpoint,
that checkpoint's pending stage (:func:`finish_pending`). The records here are what the checks
(:mod:`statecraft.proofs.stop.checks`) judge.
"""

from __future__ import annotations

import attrs

from statecraft.checkpoint.kernel.validation_records import ValidationStage, read_stage
from statecraft.checkpoint.resume.bindings import ResumeResult
from statecraft.engine import RunResult
from statecraft.engine.crash import IoGate, IoRecord
from statecraft.errors import ArtifactResumeError
from statecraft.proofs.artifacts.oracle import ArtifactView
from statecraft.proofs.artifacts.scenarios import resume_auto
from statecraft.proofs.oracle import CHECKPOINTS_ROOT, DiskView
from statecraft.proofs.save.scenarios import shipped_machine
from statecraft.proofs.training import LoadedState
from statecraft.proofs.validation.scenarios import CountingEvaluator, ValidationScenario
from statecraft.storage.sim import SimWorld

__all__ = ["EmergencyRecovery", "ResumeSeen", "finish_pending", "record_io", "resume_seen"]


@attrs.frozen
class ResumeSeen:
    """One ``resume=auto``: its result (``None`` when it refused because of a newer
    artifact; ``refused`` holds the error), what it loaded, the disk as it found it, and the
    adopted checkpoint's validation stage."""

    result: ResumeResult | None
    refused: ArtifactResumeError | None
    loaded: LoadedState | None
    seen: DiskView
    artifacts: ArtifactView
    stage: ValidationStage = ValidationStage.NONE


@attrs.frozen
class EmergencyRecovery:
    """What the requeued process did and saw.

    Attributes:
        requeue: the emergency machine's ``recover`` in the requeued process.
        requeue_io: the store operations it performed (must be none).
        requeue_writes: the saves it started (must be none).
        first: its ``resume=auto``.
        finished: the validation machine's pending stage when resume adopted the pending
            emergency checkpoint (``None`` otherwise).
        finish_io: the store operations of that stage.
    """

    requeue: RunResult
    requeue_io: tuple[IoRecord, ...]
    requeue_writes: tuple[str, ...]
    first: ResumeSeen
    finished: RunResult | None
    finish_io: tuple[IoRecord, ...]


def record_io(world: SimWorld) -> IoGate:
    """Route ``world``'s I/O through a fresh gate whose log is what the next step did."""
    gate = IoGate()
    world.rearm(gate)
    return gate


def resume_seen(world: SimWorld) -> ResumeSeen:
    """The production ``resume=auto`` into fresh torch objects, with the attempt's artifacts
    (a refusal because of a newer artifact is an answer, not an error)."""
    store = world.local_store(CHECKPOINTS_ROOT)
    run = resume_auto(world, with_data=False)
    seen, view, objects, ctx = run.seen, run.view, run.objects, run.ctx
    if run.result is None:
        return ResumeSeen(None, run.refused, None, seen, view)
    assert ctx.result is not None
    loaded = LoadedState.of(objects, ctx.tracked.clocks) if ctx.result.resumed else None
    stage = ValidationStage.NONE
    chosen = ctx.chosen
    if ctx.result.resumed and chosen is not None and chosen.trainer is not None:
        stage = read_stage(store, chosen.iteration, chosen.trainer.validation).stage
    return ResumeSeen(ctx.result, None, loaded, seen, view, stage)


def finish_pending(
    world: SimWorld, first: ResumeSeen, target: int
) -> tuple[RunResult | None, tuple[IoRecord, ...]]:
    """When ``first`` adopted ``target`` at a pending validation stage: the validation
    machine's recover without a save (what the resumed facade runs), and its operations."""
    result = first.result
    adopted = result is not None and result.resumed and result.step == target
    if not adopted or first.stage is ValidationStage.NONE:
        return None, ()
    gate = record_io(world)
    pending = ValidationScenario("finish", target=target)
    ctx = pending.context(world.local_store(CHECKPOINTS_ROOT), CountingEvaluator(gate), salt=None)
    finished = shipped_machine("validation").recover(ctx, gate=gate)
    finished.raise_for_failure()
    return finished, tuple(gate.log)
