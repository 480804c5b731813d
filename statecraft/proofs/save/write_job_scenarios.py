"""Crash scenarios of the ``write_job`` machine (save, then retention), run by ``tests/`` and
``statecraft crashcheck``.

Each scenario runs the production write job machine with its production bindings, whose
effects run the production ``save`` and ``retention`` machines, over the production
``LocalStore`` on a :class:`~statecraft.storage.SimWorld` disk. A scenario runs one write job,
or two back to back as an asynchronous trainer does them: job ``N+1``, then job ``N+2`` whose
payloads are a snapshot taken only after job ``N+1`` was joined (one in-flight write per role;
the staging buffers are reused, so the next snapshot waits for the previous write). The I/O of
the two jobs is therefore sequential, and the explorer crashes it at every operation of both.

Recovery is what a restarted training process does: ``resume=auto`` (the production resume
machine, loading into fresh torch objects), then the jobs from the step it resumed at on (the
job of the adopted step again, whose save only completes the committed iteration, then its
retention finishes what a crashed pass left; the later jobs in full). The checks are in
:mod:`statecraft.proofs.save.write_job_checks` (``specs/write_job.toml``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from statecraft.checkpoint.archive.destination import ArchiveDestination
from statecraft.checkpoint.archive.upload_bindings import upload_checkpoint
from statecraft.checkpoint.async_writes.staging import StagingBuffers
from statecraft.checkpoint.retention.policies import LatestN
from statecraft.checkpoint.retention.run import RetentionPlan
from statecraft.checkpoint.save.write_job_bindings import WriteJobContext
from statecraft.engine import CrashPlan, Machine, RunResult
from statecraft.engine.crash import IoGate, IoRecord
from statecraft.proofs import damaged_trees as damage
from statecraft.proofs.archive.upload_scenarios import REMOTE_PREFIX
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
)
from statecraft.proofs.validation.scenarios import save_evaluation_pending
from statecraft.storage.base import Store
from statecraft.storage.objects import SimBucket
from statecraft.storage.sim import SimWorld

__all__ = [
    "JobRun",
    "WriteJobRecovery",
    "WriteJobScenario",
    "snapshot_payloads",
    "write_job_scenarios",
]

#: the files of every checkpoint the scenarios save (no data source: fewer operations)
PLAN_FILES = ("model.pt", "optim.pt", "trainer.pt")


def retention_plan(
    optim_last: int, model_last: int, *, require_uploaded: bool = False
) -> RetentionPlan:
    """``RetentionPlan`` from the knobs (0 = keep all; ``upload.enabled`` ->
    ``require_uploaded``), as ``from_config`` resolves them."""
    return RetentionPlan(
        optimizer=LatestN(optim_last) if optim_last else None,
        model=LatestN(model_last) if model_last else None,
        require_uploaded=require_uploaded,
    )


def snapshot_payloads(
    staging: StagingBuffers, payloads: Mapping[str, Callable[[], Any]]
) -> dict[str, Callable[[], Any]]:
    """What an asynchronous save hands its job: every payload produced now and copied into
    the role's reused staging buffers (the live objects may change afterwards), each served
    by a producer. The previous job that read ``staging`` must have been joined."""
    snapshot = staging.snapshot({name: produce() for name, produce in payloads.items()})
    return {name: functools.partial(_served, value) for name, value in snapshot.payloads.items()}


def _served(value: Any) -> Any:
    return value


@attrs.frozen
class JobRun:
    """What one crashed (or reference) run of a scenario did, for the checks.

    Attributes:
        targets: the iterations of the jobs that started, in order.
        starts: the gate's operation count when each job started (its first operation's
            index).
        durable_at: the operation count when each job's ``on_durable`` fired (``None``: it
            did not).
        results: the write job results of the jobs that returned.
    """

    targets: tuple[int, ...]
    starts: tuple[int, ...]
    durable_at: tuple[int | None, ...]
    results: tuple[RunResult, ...]


@attrs.frozen
class WriteJobRecovery:
    """What the restarted process did and saw.

    Attributes:
        first: its ``resume=auto``.
        redone: the iterations whose jobs it ran (from the adopted step on).
        results: those jobs' results.
        seen: the disk as the redone jobs found it (after resume, which writes nothing).
        io: the store operations the redone jobs performed.
        run: starts and durable points of the redone jobs (as :class:`JobRun`).
    """

    first: ResumeObservation
    redone: tuple[int, ...]
    results: tuple[RunResult, ...]
    seen: DiskView
    io: tuple[IoRecord, ...]
    run: JobRun


@attrs.define
class WriteJobScenario:
    """Run the write jobs of ``targets`` (in order) after the ``previous`` full checkpoints
    (and the ``pending`` evaluation-pending validation checkpoints) were committed.

    Attributes:
        optim_last / model_last: the retention knobs (``keep_optim_last`` /
            ``keep_model_last``; 0 keeps all).
        asynchronous: the jobs' payloads are snapshots in one role's reused staging buffers
            (:func:`snapshot_payloads`), taken when the job is handed over, after the previous
            job was joined.
        machine_factory: the write job machine (tests swap in deliberately broken ones).
        inject_faults: the explorer also fails each operation (``False``: crash points only,
            when another scenario already injects a fault at every operation of one job).
        save_machine_factory: the save machine the jobs run.
        upload: the jobs archive each saved iteration to the world's bucket (upload enabled:
            retention then requires ``.uploaded``); the setup archives ``previous`` too.
        last_run: the latest crashed run (the explorer checks each crash state of a run before
            it starts the next run).
    """

    name: str
    targets: tuple[int, ...]
    previous: tuple[int, ...] = ()
    pending: tuple[int, ...] = ()
    optim_last: int = 1
    model_last: int = 0
    asynchronous: bool = True
    inject_faults: bool = True
    machine_factory: Callable[[], Machine] = attrs.field(
        default=lambda: shipped_machine("write_job")
    )
    save_machine_factory: Callable[[], Machine] = attrs.field(
        default=lambda: shipped_machine("save")
    )
    upload: bool = False
    machine: str = "write_job"
    recovery_may_fail: bool = False
    last_run: JobRun | None = attrs.field(default=None, eq=False, repr=False)
    _expected: DiskView | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def plan_files(self) -> tuple[str, ...]:
        return PLAN_FILES

    @property
    def protected(self) -> tuple[int, ...]:
        """Iterations retention must never touch (pending validations)."""
        return self.pending

    def store(self, world: SimWorld) -> Store:
        return world.local_store(CHECKPOINTS_ROOT)

    def context(
        self,
        store: Store,
        iteration: int,
        *,
        salt: int,
        on_durable: Callable[[], None],
        staging: StagingBuffers,
        bucket: SimBucket | None = None,
    ) -> WriteJobContext:
        """The one place the harness builds a write job's context. The crashed run's jobs
        of an asynchronous scenario serialize a snapshot in ``staging`` (taken after the
        previous job of the run ended); the restarted process's jobs save synchronously (the
        bytes are the same; the snapshot is proven by the run)."""
        save = save_context(store, iteration, with_data=False, salt=salt)
        if self.asynchronous and salt == SALT_RUN:
            save.payloads = snapshot_payloads(staging, save.payloads)
        destination = None
        if self.upload and bucket is not None:
            destination = ArchiveDestination(bucket, REMOTE_PREFIX)
        return WriteJobContext(
            save=save,
            retention=retention_plan(
                self.optim_last, self.model_last, require_uploaded=self.upload
            ),
            save_machine=self.save_machine_factory(),
            retention_machine=shipped_machine("retention"),
            on_durable=on_durable,
            destination=destination,
        )

    def setup(self, world: SimWorld) -> None:
        store = self.store(world)
        for iteration in sorted((*self.previous, *self.pending)):
            if iteration in self.pending:
                save_evaluation_pending(
                    store, iteration, salt=SALT_SETUP, location=CHECKPOINTS_ROOT
                )
                continue
            ctx = save_context(store, iteration, with_data=False, salt=SALT_SETUP)
            shipped_machine("save").recover(ctx).raise_for_failure()
            if self.upload:
                upload_checkpoint(store, iteration, ArchiveDestination(world.bucket, REMOTE_PREFIX))

    def _jobs(
        self,
        world: SimWorld,
        targets: tuple[int, ...],
        *,
        salt: int,
        crash: CrashPlan | None = None,
        recover: bool = False,
    ) -> tuple[JobRun, RunResult]:
        """Run the jobs of ``targets`` in order on ``world``; stop after a failed one (the
        next save joins it and raises). ``crash``: the plan over the whole sequence (effect
        indices count across the jobs)."""
        starts: list[int] = []
        durable: list[int | None] = []
        results: list[RunResult] = []
        trace: list[Any] = []
        offset = 0
        staging = StagingBuffers()  # one role: reused by each job of the run, after a join
        run = JobRun((), (), (), ())
        try:
            for iteration in targets:
                gate = world.gate
                starts.append(gate.count)
                durable.append(None)
                slot = len(durable) - 1

                def mark(slot: int = slot, gate: IoGate = gate) -> None:
                    durable[slot] = gate.count

                ctx = self.context(
                    self.store(world),
                    iteration,
                    salt=salt,
                    on_durable=mark,
                    staging=staging,
                    bucket=world.bucket,
                )
                plan = _shifted(crash, offset)
                machine = self.machine_factory()
                result = (
                    machine.recover(ctx, crash=plan, gate=gate)
                    if recover
                    else machine.run(ctx, crash=plan, gate=gate)
                )
                results.append(result)
                trace.extend(result.trace)
                offset += len(result.trace)
                if result.failed:
                    break
        finally:
            run = JobRun(
                tuple(targets[: len(starts)]), tuple(starts), tuple(durable), tuple(results)
            )
            if not recover:
                self.last_run = run
        last = results[-1]
        return run, attrs.evolve(last, trace=tuple(trace))

    def run(self, world: SimWorld, *, crash: CrashPlan | None) -> RunResult:
        self.last_run = None
        return self._jobs(world, self.targets, salt=SALT_RUN, crash=crash)[1]

    def expected(self) -> DiskView:
        """The disk after the uncrashed run (memoized): what recovery must reach."""
        if self._expected is None:
            world = SimWorld()
            self.setup(world)
            world.settle()
            saved = self.last_run
            self._jobs(world, self.targets, salt=SALT_RUN, crash=None)
            self.last_run = saved
            self._expected = DiskView.of(world)
        return self._expected

    def _resume(self, world: SimWorld) -> ResumeObservation:
        store = self.store(world)
        seen = DiskView.of(world)
        gate = IoGate()
        world.rearm(gate)
        damage.PAYLOAD_RAN.clear()
        objects = fresh_objects(with_data=False)
        ctx = resume_context(store, objects)
        shipped_machine("resume").run(ctx).raise_for_failure()
        if ctx.result is None:
            raise RuntimeError("resume machine ended without a result")
        loaded = LoadedState.of(objects, ctx.tracked.clocks) if ctx.result.resumed else None
        return ResumeObservation(
            ctx.result, seen, tuple(gate.log), loaded, tuple(damage.PAYLOAD_RAN)
        )

    def recover(self, world: SimWorld) -> WriteJobRecovery:
        with preserved_rng():
            first = self._resume(world)
            step = first.result.step if first.result.resumed else -1
            redone = tuple(t for t in self.targets if t >= step)
            seen = DiskView.of(world)
            gate = IoGate()
            world.rearm(gate)
            run, _ = (
                self._jobs(world, redone, salt=SALT_RETRY, recover=True)
                if redone
                else (JobRun((), (), (), ()), None)
            )
            for result in run.results:
                result.raise_for_failure()
        return WriteJobRecovery(first, redone, run.results, seen, tuple(gate.log), run)


def _shifted(crash: CrashPlan | None, offset: int) -> CrashPlan | None:
    """``crash`` for a job whose effects start at index ``offset`` of the sequence (``None``
    when its effect point lies in an earlier job; an I/O point is global to the gate)."""
    if crash is None or crash.at_io is not None:
        return crash
    if crash.before_effect is not None:
        k = crash.before_effect - offset
        return CrashPlan(before_effect=k) if k >= 0 else None
    assert crash.after_effect is not None
    k = crash.after_effect - offset
    return CrashPlan(after_effect=k) if k >= 0 else None


def write_job_scenarios() -> list[WriteJobScenario]:
    """The scenarios ``statecraft crashcheck`` runs for the write job machine."""
    return [
        WriteJobScenario("one-job-keep-model-1", targets=(4,), previous=(2,), model_last=1),
        WriteJobScenario(
            "two-async-jobs-keep-optim-1-model-2",
            targets=(4, 6),
            previous=(2,),
            optim_last=1,
            model_last=2,
            inject_faults=False,
        ),
        WriteJobScenario(
            "pending-validation-untouched",
            targets=(6,),
            previous=(2,),
            pending=(4,),
            optim_last=1,
            model_last=1,
            asynchronous=False,
            inject_faults=False,
        ),
        WriteJobScenario(
            "one-job-upload-then-keep-model-1-require-uploaded",
            targets=(4,),
            previous=(2,),
            optim_last=1,
            model_last=1,
            upload=True,
        ),
    ]
