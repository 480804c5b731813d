"""The effect bindings of the ``emergency`` machine (``machines/emergency.toml``).

The emergency transaction is what a stop decision at a step boundary runs instead of the due
boundary: read what the step already holds on disk (:func:`read_step_coverage`), decide what
to write (:func:`~statecraft.checkpoint.stop.emergency_plan.decide_emergency`), write it
synchronously unless the step is covered (``ctx.write``: the facade's save, every rank), and
only once that save is durable write ``<RUN_TS>/DONE.json`` with ``preempted: <reason>``
(:mod:`statecraft.checkpoint.stop.run_done`). The table is the order; this module says how each
step acts. See ``specs/emergency.toml`` for the guarantees, proven by ``statecraft crashcheck
--machine emergency``.

::

    ctx = EmergencyContext(config=config, decision=decision, step=120, validation_due=False,
                           attempt=attempt, filesystem=None, write=write, lease=lease)
    report = run_emergency(ctx, shipped_machine("emergency"), collective)
    report.kind, report.path            # EmergencyKind.CHECKPOINT, "checkpoints/iter_000000120"

The decision (``ctx.decision``) is taken once, before the transaction starts; nothing in it
reads the termination watch again, so a second signal during the save changes neither the
save nor the recorded reason.

Failure modes: the save's error ends the run in ``save_failed`` (no ``DONE.json`` is written;
the previous checkpoint and ``latest`` are intact, the save machine's contract);
``write_done``'s error ends it in ``done_failed`` (the emergency checkpoint is durable; only
the record is missing). :func:`run_emergency` raises either, the original exception.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

import attrs

from statecraft.checkpoint.fencing.lease import WriterLease
from statecraft.checkpoint.kernel.artifact_verify import verify_artifact
from statecraft.checkpoint.kernel.catalog import CheckpointState, classify
from statecraft.checkpoint.kernel.components import ComponentPlan
from statecraft.checkpoint.kernel.layout import (
    ARTIFACT_MANIFEST_NAME,
    ARTIFACTS_DIR,
    CHECKPOINTS_DIR,
    MANIFEST_NAME,
    RunAttempt,
    iter_dirname,
)
from statecraft.checkpoint.stop import run_done
from statecraft.checkpoint.stop.emergency_plan import (
    EmergencyBoundary,
    StepCoverage,
    decide_emergency,
)
from statecraft.checkpoint.stop.records import (
    DoneRecord,
    EmergencyKind,
    EmergencyReport,
    StopDecision,
)
from statecraft.checkpoint.stop.run_done import done_record, read_done
from statecraft.engine import Bindings, Machine
from statecraft.engine.tagging import Role, collect_bindings, effect, guard, observer
from statecraft.errors import CheckpointError
from statecraft.parallel.collectives import Collective
from statecraft.parallel.coordinated import rank_zero_effects
from statecraft.storage.base import Store
from statecraft.storage.filesystem import Filesystem, OsFilesystem
from statecraft.storage.local import LocalStore

if TYPE_CHECKING:
    from statecraft.checkpoint.config.schema import CheckpointConfig

__all__ = [
    "COUNTED_STATES",
    "COVERAGE_LEVEL",
    "EmergencyContext",
    "covering_path",
    "emergency_bindings",
    "emergency_report",
    "read_step_coverage",
    "run_emergency",
]

log = logging.getLogger("statecraft.emergency")

#: the catalog states of ``checkpoints/iter_N`` that cover a step (a committed full
#: checkpoint at any validation stage; weights-only, invalidated, partial, corrupt do not)
COUNTED_STATES = frozenset(
    {
        CheckpointState.COMMITTED,
        CheckpointState.EVALUATION_PENDING,
        CheckpointState.PUBLICATION_PENDING,
        CheckpointState.PUBLISHED,
    }
)

#: the verification level of the coverage check: every recorded file present with its size,
#: every file parsed (a digest pass would cost a second read of a checkpoint at a stop)
COVERAGE_LEVEL = "size"


def _open(path: str, fs: Filesystem) -> Store | None:
    """A store on directory ``path``, or ``None`` when it does not exist (never created)."""
    stat = fs.stat(path)
    if stat is None or not stat.is_dir:
        return None
    return LocalStore(path, fs=fs)


def read_step_coverage(
    attempt: RunAttempt, filesystem: Filesystem | None, step: int
) -> StepCoverage:
    """What step ``step`` of ``attempt`` holds on disk, committed: ``checkpoints/iter_N`` a
    committed full checkpoint (:data:`COUNTED_STATES`, verified at :data:`COVERAGE_LEVEL`),
    and the plan of a committed, verifying ``checkpoint_artifacts/iter_N``. Reads only; never
    creates a directory; a damaged or partial directory covers nothing (never raises for it).
    """
    fs = filesystem or OsFilesystem()
    checkpoint = False
    store = _open(str(attempt.checkpoints_dir.absolute()), fs)
    if store is not None:
        entry = classify(store, step, level=COVERAGE_LEVEL, keep_payloads=False)
        checkpoint = entry.state in COUNTED_STATES
    artifact: ComponentPlan | None = None
    damaged = False
    artifacts = _open(str(attempt.artifacts_dir.absolute()), fs)
    name = iter_dirname(step)
    if artifacts is not None and artifacts.stat(name) is not None:
        try:
            verified = verify_artifact(artifacts, step, level=COVERAGE_LEVEL)
        except Exception as exc:  # a damaged or uncommitted artifact covers nothing
            log.debug("checkpoint_artifacts/%s covers nothing: %s", name, exc)
            manifests = (ARTIFACT_MANIFEST_NAME, MANIFEST_NAME)
            damaged = any(artifacts.stat(f"{name}/{m}") is not None for m in manifests)
        else:
            artifact = ComponentPlan.of(verified.manifest.components)
    return StepCoverage(checkpoint=checkpoint, artifact=artifact, artifact_damaged=damaged)


def covering_path(coverage: StepCoverage, step: int) -> str:
    """The run-dir relative directory that covers ``step`` (the full checkpoint first)."""
    root = CHECKPOINTS_DIR if coverage.checkpoint else ARTIFACTS_DIR
    return f"{root}/{iter_dirname(step)}"


@attrs.define
class EmergencyContext:
    """One emergency transaction: the save at a stop, then ``DONE.json``.

    Attributes:
        config: the run's checkpoint config (its ``emergency_checkpoint_components``).
        decision: the stop decision (``stop`` true; its reason is recorded, its
            ``decided_at`` starts the decision-to-durable interval). Never re-read from the
            watch: a second signal changes nothing.
        step: the optimizer step of the boundary (the iteration saved).
        validation_due: a validation was due at this boundary (the save is then the full
            evaluation-pending checkpoint; the requeued run evaluates it).
        attempt: the run's attempt (``DONE.json`` lives in its run dir).
        filesystem: the filesystem the stores act through (``None``: the real OS).
        write: runs the decided save synchronously on every rank (rank 0 writes) and returns
            the committed directory relative to the run dir; raises on failure (nothing of
            ``DONE.json`` is written then).
        lease: this process's writer lease, checked before ``DONE.json`` is written
            (``None``: the harness's single writer).
        clock: ``time.time`` (the scenarios' clock in the proofs).
        read_coverage: what the step holds on disk and the run-dir relative directory that
            covers it, for a run that saves elsewhere than ``checkpoints/`` (a multi-role
            loop's ``role_checkpoints/``); ``None``: :func:`read_step_coverage`.
        coverage: what the step held on disk (set by ``decide``).
        boundary: the decision (set by ``decide``).
        path: the committed (or covering) directory, run-dir relative.
        seconds_to_durable: from ``decision.decided_at`` to the save durable.
        saves: how many times ``write`` was called in this transaction (at most one).
        done: the record written (set by ``write_done``).
    """

    coordinated: ClassVar[tuple[str, ...]] = (
        "coverage",
        "boundary",
        "path",
        "seconds_to_durable",
        "done",
    )

    config: CheckpointConfig
    decision: StopDecision
    step: int
    validation_due: bool
    attempt: RunAttempt
    filesystem: Filesystem | None
    write: Callable[[EmergencyBoundary], str]
    lease: WriterLease | None = None
    clock: Callable[[], float] = time.time
    read_coverage: Callable[[int], tuple[StepCoverage, str]] | None = None
    coverage: StepCoverage | None = None
    boundary: EmergencyBoundary | None = None
    path: str | None = None
    seconds_to_durable: float | None = None
    saves: int = 0
    done: DoneRecord | None = None

    @property
    def reason(self) -> str:
        """The recorded stop reason."""
        if self.decision.reason is None:
            raise CheckpointError(
                f"the emergency transaction of step {self.step} was started without a stop "
                "decision (StopDecision(stop=False)); only a stop runs it"
            )
        return self.decision.reason

    @property
    def where(self) -> str:
        return str(self.attempt.run_dir)

    def step_coverage(self) -> tuple[StepCoverage, str]:
        """What the step holds on disk, and the directory that covers it (reads only)."""
        if self.read_coverage is not None:
            return self.read_coverage(self.step)
        coverage = read_step_coverage(self.attempt, self.filesystem, self.step)
        return coverage, covering_path(coverage, self.step)


def run_emergency(
    ctx: EmergencyContext, machine: Machine, collective: Collective
) -> EmergencyReport:
    """Run the emergency transaction from its start to ``done``; every rank calls it.

    Args:
        ctx: the transaction (the same on every rank but for ``write``'s rank-local work).
        machine: the loaded ``emergency`` machine (``shipped_machine("emergency")``).
        collective: the ranks' collective (a world of one decides alone).

    Returns:
        the report (the same record on every rank: rank 0's fields are broadcast).

    Raises:
        Exception: the save's error, its original type (state ``save_failed``): nothing of
            ``DONE.json`` was written; the previous checkpoint and ``latest`` are intact.
        StoreError / OSError / WriterLeaseError: ``DONE.json`` could not be written (state
            ``done_failed``); the emergency checkpoint is durable.
    """
    call = rank_zero_effects(collective, machine.bindings.roles)
    machine.run(ctx, call=call).raise_for_failure()
    return emergency_report(ctx)


def emergency_report(ctx: EmergencyContext) -> EmergencyReport:
    """The report of a finished transaction.

    Raises:
        CheckpointError: the transaction did not decide or did not reach a durable save.
    """
    if ctx.boundary is None or ctx.path is None or ctx.seconds_to_durable is None:
        raise CheckpointError(
            f"{ctx.where}: the emergency transaction of step {ctx.step} ended without a "
            "decision and a durable save; nothing to report"
        )
    return EmergencyReport(
        reason=ctx.reason,
        step=ctx.step,
        kind=ctx.boundary.kind,
        components=ctx.boundary.plan.components,
        path=ctx.path,
        seconds_to_durable=ctx.seconds_to_durable,
    )


# ----------------------------------------------------------------------------- observe
@observer()
def observe_emergency(ctx: EmergencyContext) -> str:
    """What a restarted process finds of this step's stop: ``done`` (``DONE.json`` records
    this step with a reason), ``durable`` (the step is covered on disk, no such record: the
    process died between the save and the record), else ``nothing``. Never writes."""
    try:
        record = read_done(ctx.attempt, ctx.filesystem)
    except CheckpointError:
        record = None
    if record is not None and record.step == ctx.step and record.preempted is not None:
        return "done"
    coverage, _ = ctx.step_coverage()
    if coverage.checkpoint or coverage.artifact is not None:
        return "durable"
    return "nothing"


# ----------------------------------------------------------------------------- guards
@guard()
def covered(ctx: EmergencyContext) -> bool:
    """The decision is ``COVERED``: the step already holds every component of the plan."""
    return ctx.boundary is not None and ctx.boundary.kind is EmergencyKind.COVERED


# ----------------------------------------------------------------------------- effects
@effect(role=Role.COORDINATOR)
def decide(ctx: EmergencyContext) -> None:
    """Read the step's coverage from disk and decide what the save writes (rank 0; the
    decision is broadcast)."""
    ctx.coverage, _ = ctx.step_coverage()
    boundary = decide_emergency(
        ctx.config, validation_due=ctx.validation_due, coverage=ctx.coverage
    )
    if boundary.escalated:
        why = (
            "holds a manifest that does not verify"
            if ctx.coverage.artifact_damaged
            else "lacks a component of the run plan"
        )
        log.warning(
            "stop at step %d: checkpoint_artifacts/%s %s and a committed artifact is never "
            "re-committed: saving the full plan instead",
            ctx.step,
            iter_dirname(ctx.step),
            why,
        )
    ctx.boundary = boundary


@effect(role=Role.COORDINATOR)
def skip_save(ctx: EmergencyContext) -> None:
    """The step is covered: nothing is written; the covering directory is recorded."""
    if ctx.coverage is None:  # pragma: no cover - decide always runs first
        raise CheckpointError(f"{ctx.where}: skip_save ran before decide")
    if ctx.read_coverage is None:
        ctx.path = covering_path(ctx.coverage, ctx.step)
    else:
        _, ctx.path = ctx.read_coverage(ctx.step)
    ctx.seconds_to_durable = max(0.0, ctx.clock() - ctx.decision.decided_at)


@effect(role=Role.EVERY_RANK)
def write_emergency(ctx: EmergencyContext) -> None:
    """Run the decided save on every rank (``ctx.write``), synchronously; record the
    committed directory and the decision-to-durable time.

    Raises:
        CheckpointError: a second save in one transaction (nothing is written).
        Exception: the save's own error (the previous checkpoint is intact).
    """
    if ctx.boundary is None:  # pragma: no cover - decide always runs first
        raise CheckpointError(f"{ctx.where}: write_emergency ran before decide")
    if ctx.saves:
        raise CheckpointError(
            f"{ctx.where}: a second emergency save of step {ctx.step} was about to start; "
            "one stop saves once: nothing was written"
        )
    ctx.saves += 1
    ctx.path = ctx.write(ctx.boundary)
    ctx.seconds_to_durable = max(0.0, ctx.clock() - ctx.decision.decided_at)


@effect(role=Role.COORDINATOR)
def write_done(ctx: EmergencyContext) -> None:
    """Write ``<RUN_TS>/DONE.json`` with ``preempted: <reason>`` naming the durable
    directory (rank 0), after checking the writer lease.

    Raises:
        CheckpointError: no durable save is recorded (nothing is written).
        WriterLeaseError / StoreError / OSError: the record is not written.
    """
    if ctx.path is None or ctx.boundary is None:
        raise CheckpointError(
            f"{ctx.where}: DONE.json was about to be written before the emergency save of "
            f"step {ctx.step} was durable; the table must save first: nothing was written"
        )
    if ctx.lease is not None:
        ctx.lease.check()
    record = done_record(
        step=ctx.step,
        preempted=ctx.reason,
        checkpoint=ctx.path,
        saved=ctx.boundary.kind is not EmergencyKind.COVERED,
        seconds_to_durable=ctx.seconds_to_durable,
    )
    run_done.write_done(ctx.attempt, ctx.filesystem, record)
    ctx.done = record


def emergency_bindings() -> Bindings:
    """The bindings of this module's table, collected from the tags above."""
    return collect_bindings(sys.modules[__name__])
