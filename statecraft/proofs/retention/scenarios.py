"""Crash scenarios of the ``retention`` machine, run by ``tests/`` and ``statecraft
crashcheck``.

Each scenario commits full checkpoints with the production save machine (real torch objects,
:mod:`statecraft.proofs.training`) over the production ``LocalStore`` on a
:class:`~statecraft.storage.SimWorld` disk, adds what the pass must meet (a pending or
published validation checkpoint with its records, ``.uploaded`` markers, a partial leftover,
an invalidated leftover, a partial artifact beside the root), then runs the production
retention machine after the save of ``saved``. Recovery is what a restarted training process
does: ``resume=auto`` (the production resume machine, loading into fresh torch objects), then
the next pass of retention (:func:`~statecraft.checkpoint.retention.run.run_retention`). The
checks are in :mod:`statecraft.proofs.retention.checks` (``specs/retention.toml``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import attrs

from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.checkpoint.kernel.retention_records import (
    INVALIDATED_MARKER,
    UPLOADED_MARKER,
    DecisionRow,
    InvalidatedRecord,
)
from statecraft.checkpoint.kernel.validation_records import (
    EVALUATED_RECORD,
    PUBLISHED_RECORD,
    EvaluatedRecord,
    PublishedRecord,
)
from statecraft.checkpoint.retention.bindings import RetentionContext
from statecraft.checkpoint.retention.policies import AnyOf, BestN, LatestN, RetentionPolicy
from statecraft.checkpoint.retention.run import RetentionPlan, RetentionReport, run_retention
from statecraft.engine import CrashPlan, Machine, RunResult
from statecraft.engine.crash import IoGate, IoRecord
from statecraft.proofs import damaged_trees as damage
from statecraft.proofs.oracle import CHECKPOINTS_ROOT, DiskView
from statecraft.proofs.save.scenarios import (
    ResumeObservation,
    resume_context,
    save_context,
    shipped_machine,
)
from statecraft.proofs.training import (
    SALT_SETUP,
    LoadedState,
    fresh_objects,
    preserved_rng,
)
from statecraft.proofs.validation.scenarios import (
    IDENTITY,
    expected_metrics,
    save_evaluation_pending,
)
from statecraft.storage.base import Store
from statecraft.storage.sim import SimWorld

__all__ = [
    "ARTIFACTS_ROOT",
    "PLAN_FILES",
    "Reference",
    "RetentionRecovery",
    "RetentionScenario",
    "retention_scenarios",
]

ARTIFACTS_ROOT = CHECKPOINTS_ROOT.rsplit("/", 1)[0] + "/checkpoint_artifacts"
PLAN_FILES = ("model.pt", "optim.pt", "trainer.pt")  # every scenario saves without data.pt


@attrs.frozen
class Reference:
    """The uncrashed pass on the scenario's starting disk: its decision, what it gave to
    retention (iterations deleted, made weights-only; garbage directories) and the disk it
    left (the end state a rerun after any crash must reach)."""

    rows: tuple[DecisionRow, ...]
    to_delete: tuple[int, ...]
    to_prune: tuple[int, ...]
    garbage: tuple[str, ...]
    end: DiskView


@attrs.frozen
class RetentionRecovery:
    """What the restarted process did and saw: ``resume=auto``, then the next retention pass
    (``rerun``, which found the disk ``rerun_seen`` and performed ``rerun_io``)."""

    first: ResumeObservation
    rerun: RetentionReport
    rerun_seen: DiskView
    rerun_io: tuple[IoRecord, ...]


def _record(world: SimWorld) -> IoGate:
    gate = IoGate()
    world.rearm(gate)
    return gate


@attrs.define
class RetentionScenario:
    """A retention pass after the save of ``saved`` (committed, durable), over the checkpoints
    committed in setup.

    Attributes:
        committed: iterations committed by regular saves (``saved`` included).
        published: iterations saved by a durable validation and published (their evaluated
            record holds :func:`expected_metrics`).
        pending: iterations saved by a durable validation whose evaluation is pending.
        uploaded: iterations given an ``.uploaded`` marker.
        partial: iterations left as an interrupted save's leftovers (no manifest).
        invalidated: committed iterations a killed pass had just invalidated (marker
            published, manifest still there).
        earlier_pass: a completed pass (same plan) ran after the save of this iteration,
            before the later iterations were committed (its decision record is on disk).
        machine_factory: the retention machine (tests swap in deliberately broken ones).
    """

    name: str
    plan: RetentionPlan
    saved: int
    committed: tuple[int, ...] = ()
    published: tuple[int, ...] = ()
    pending: tuple[int, ...] = ()
    uploaded: tuple[int, ...] = ()
    partial: tuple[int, ...] = ()
    invalidated: tuple[int, ...] = ()
    earlier_pass: int | None = None
    machine_factory: Callable[[], Machine] = attrs.field(
        default=lambda: shipped_machine("retention")
    )
    machine: str = "retention"
    recovery_may_fail: bool = False
    _reference: Reference | None = attrs.field(default=None, eq=False, repr=False)
    _resumes: dict[str, ResumeObservation] = attrs.field(factory=dict, eq=False, repr=False)

    @property
    def plan_files(self) -> tuple[str, ...]:
        return PLAN_FILES

    def store(self, world: SimWorld) -> Store:
        return world.local_store(CHECKPOINTS_ROOT)

    def context(self, store: Store) -> RetentionContext:
        """The one place the harness builds a retention context."""
        return RetentionContext(store, self.plan, self.saved, None)

    # ------------------------------------------------------------------ setup
    def _validation_save(self, world: SimWorld, iteration: int) -> None:
        save_evaluation_pending(
            self.store(world), iteration, salt=SALT_SETUP, location=CHECKPOINTS_ROOT
        )

    def setup(self, world: SimWorld) -> None:
        store = self.store(world)
        everything = sorted({*self.committed, *self.published, *self.pending, *self.invalidated})
        for iteration in everything:
            if iteration in self.published or iteration in self.pending:
                self._validation_save(world, iteration)
            else:
                ctx = save_context(store, iteration, with_data=False, salt=SALT_SETUP)
                shipped_machine("save").recover(ctx).raise_for_failure()
            name = iter_dirname(iteration)
            if iteration in self.published:
                metrics = expected_metrics(iteration)
                evaluated = EvaluatedRecord(iteration, metrics, IDENTITY)
                store.create_exclusive(f"{name}/{EVALUATED_RECORD}", evaluated.encode())
                published = PublishedRecord(iteration).encode()
                store.create_exclusive(f"{name}/{PUBLISHED_RECORD}", published)
            if iteration in self.uploaded:
                store.create_exclusive(f"{name}/{UPLOADED_MARKER}", b"uploaded\n")
            if iteration in self.invalidated:
                record = InvalidatedRecord(iteration, "latest 1").encode()
                store.create_exclusive(f"{name}/{INVALIDATED_MARKER}", record)
            if iteration == self.earlier_pass:
                run_retention(
                    store,
                    self.plan,
                    saved_iteration=iteration,
                    lease=None,
                    machine=shipped_machine("retention"),
                )
        for iteration in self.partial:
            damage.leftovers_of(iteration)(world)
        artifacts = world.local_store(ARTIFACTS_ROOT)
        artifacts.make_dirs("iter_000000003")
        artifacts.write_atomic("iter_000000003/model.pt", b"a partial artifact's payload")

    # ------------------------------------------------------------------ run / recover
    def run(self, world: SimWorld, *, crash: CrashPlan | None) -> RunResult:
        ctx = self.context(self.store(world))
        return self.machine_factory().recover(ctx, crash=crash, gate=world.gate)

    def reference(self) -> Reference:
        """The uncrashed pass on a fresh copy of the starting disk (computed once)."""
        if self._reference is None:
            world = SimWorld()
            with preserved_rng():
                self.setup(world)
            world.settle()
            ctx = self.context(self.store(world))
            self.machine_factory().recover(ctx).raise_for_failure()
            self._reference = Reference(
                ctx.rows, ctx.to_delete, ctx.to_prune, ctx.garbage, DiskView.of(world)
            )
        return self._reference

    def _resume(self, world: SimWorld) -> ResumeObservation:
        """``resume=auto`` on ``world``. Resume only reads: its observation is a function of
        the disk it finds, so it is memoized by that disk's content (every file and name of the
        run directory) when it performed no store operation; thousands of crash states share
        the few distinct disks a resume can meet (retention never touches what it adopts)."""
        seen = DiskView.of(world)
        key = hashlib.sha256(
            repr(
                (
                    sorted(seen.files.items()),
                    seen.names,
                    sorted(world.fs.tree(ARTIFACTS_ROOT).items()),
                )
            ).encode()
        ).hexdigest()
        if key in self._resumes:
            return self._resumes[key]
        observation = self._resume_uncached(world, seen)
        if not observation.io:
            self._resumes[key] = observation
        return observation

    def _resume_uncached(self, world: SimWorld, seen: DiskView) -> ResumeObservation:
        store = self.store(world)
        gate = _record(world)
        objects = fresh_objects(with_data=False)
        ctx = resume_context(store, objects)
        shipped_machine("resume").run(ctx).raise_for_failure()
        if ctx.result is None:
            raise RuntimeError("resume machine ended without a result")
        loaded = LoadedState.of(objects, ctx.tracked.clocks) if ctx.result.resumed else None
        return ResumeObservation(ctx.result, seen, tuple(gate.log), loaded, ())

    def recover(self, world: SimWorld) -> RetentionRecovery:
        with preserved_rng():
            first = self._resume(world)
            seen = DiskView.of(world)
            gate = _record(world)
            report = run_retention(
                self.store(world),
                self.plan,
                saved_iteration=self.saved,
                lease=None,
                machine=self.machine_factory(),
            )
        return RetentionRecovery(first, report, seen, tuple(gate.log))


def retention_scenarios() -> list[RetentionScenario]:
    """The scenarios ``statecraft crashcheck`` runs for the retention machine (each kept small:
    every crash state runs a resume and a rerun)."""
    optim1 = LatestN(1)
    best_or_newest: tuple[RetentionPolicy, ...] = (LatestN(1), BestN(1, "val_loss", mode="max"))
    return [
        RetentionScenario(
            "keep-optim-last-1-over-3-partial-leftover",
            RetentionPlan(optimizer=optim1),
            saved=6,
            committed=(2, 4, 6),
            partial=(3,),
        ),
        RetentionScenario(
            "second-pass-after-a-recorded-one",
            RetentionPlan(optimizer=optim1),
            saved=8,
            committed=(2, 4, 6, 8),
            earlier_pass=6,
        ),
        RetentionScenario(
            "keep-model-last-1-pending-validation",
            RetentionPlan(optimizer=optim1, model=LatestN(1)),
            saved=6,
            committed=(2, 6),
            pending=(4,),
        ),
        RetentionScenario(
            "best-n-by-metric",
            RetentionPlan(model=AnyOf(best_or_newest)),
            saved=6,
            committed=(6,),
            published=(2, 4),
        ),
        RetentionScenario(
            "require-uploaded",
            RetentionPlan(optimizer=optim1, model=LatestN(1), require_uploaded=True),
            saved=6,
            committed=(2, 4, 6),
            uploaded=(2, 6),
        ),
        RetentionScenario(
            "invalidated-leftover-finished",
            RetentionPlan(),
            saved=4,
            committed=(4,),
            invalidated=(2,),
        ),
    ]
