"""Crash scenarios of the shipped checkpoint machines, run by ``tests/`` and ``statecraft
crashcheck``.

Each scenario runs the production save machine with its production bindings over the
production ``LocalStore``, acting on a :class:`~statecraft.storage.SimWorld` disk. Recovery
is what a restarted training process does: ``resume=auto`` (the production resume machine,
loading into real torch objects: model, AdamW, StepLR, data cursor, RNG streams, clocks), then
the retry of the interrupted save, then another ``resume=auto``. Before each of the three the
recovery records a :class:`~statecraft.proofs.oracle.DiskView` of the disk exactly as that step
found it and the store operations the step performed, so the checks in
:mod:`statecraft.proofs.save.checks` and :mod:`statecraft.proofs.resume.checks` judge what each
step saw and did (``specs/save.toml``, ``specs/resume.toml``).

Every construction of a ``SaveContext`` or ``ResumeContext`` is in :func:`save_context` and
:func:`resume_context`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from statecraft.checkpoint.kernel.machines import shipped_machine
from statecraft.checkpoint.kernel.plan import CHECKPOINT_PLAN
from statecraft.checkpoint.resume.bindings import ResumeContext, ResumeResult, Tracked
from statecraft.checkpoint.save.bindings import SaveContext
from statecraft.engine import CrashPlan, Machine, RunResult
from statecraft.engine.crash import IoGate, IoRecord
from statecraft.proofs import damaged_trees as damage
from statecraft.proofs.oracle import CHECKPOINTS_ROOT, DiskView
from statecraft.proofs.training import (
    SALT_RETRY,
    SALT_RUN,
    SALT_SETUP,
    FreshObjects,
    LoadedState,
    expected_payloads,
    fresh_objects,
    preserved_rng,
)
from statecraft.storage.base import Store
from statecraft.storage.sim import SimWorld

__all__ = [
    "CHECKPOINTS_ROOT",
    "Recovery",
    "ResumeObservation",
    "SaveScenario",
    "expected_payloads",
    "resume_context",
    "save_context",
    "save_scenarios",
]


def save_context(
    store: Store, iteration: int, *, with_data: bool, salt: int, copies: bool = False
) -> SaveContext:
    """The one place the harness builds a save transaction's context (``copies``: with a
    moving old policy and reference, ``old.pt`` and ``ref.pt``)."""
    return SaveContext(
        store=store,
        plan=CHECKPOINT_PLAN.save_plan(
            iteration, with_data=with_data, copies=("old", "ref") if copies else ()
        ),
        payloads=expected_payloads(iteration, with_data=with_data, salt=salt, copies=copies),
    )


def resume_context(store: Store, objects: FreshObjects) -> ResumeContext:
    """The one place the harness builds a resume's context (``resume=auto``)."""
    tracked = Tracked(
        model=objects.model,
        optimizer=objects.optimizer,
        scheduler=objects.scheduler,
        data=objects.data,
        old=objects.old,
        ref=objects.ref,
    )
    return ResumeContext(mode="auto", tracked=tracked, store=store)


@attrs.frozen
class ResumeObservation:
    """One ``resume=auto`` of the restarted process, as the checks judge it.

    Attributes:
        result: what resume decided.
        seen: the disk exactly as resume found it (before it ran).
        io: the store operations that changed bytes or names while it ran (should be none).
        loaded: the state the live objects held afterwards (``None`` for a fresh start).
        payloads_ran: hostile pickle payloads that executed while it ran (should be none).
    """

    result: ResumeResult
    seen: DiskView
    io: tuple[IoRecord, ...]
    loaded: LoadedState | None
    payloads_ran: tuple[str, ...]


@attrs.frozen
class Recovery:
    """What the restarted process did and saw: resume, retry the save, resume again."""

    first: ResumeObservation
    retry: RunResult
    retry_seen: DiskView
    retry_io: tuple[IoRecord, ...]
    after: ResumeObservation

    @property
    def resume(self) -> ResumeResult:
        return self.first.result

    @property
    def resume_after(self) -> ResumeResult:
        return self.after.result

    @property
    def resumes(self) -> tuple[ResumeObservation, ResumeObservation]:
        return (self.first, self.after)


def _record(world: SimWorld) -> IoGate:
    """Route ``world``'s I/O through a fresh gate whose log is what the next step did."""
    gate = IoGate()
    world.rearm(gate)
    return gate


@attrs.define
class SaveScenario:
    """Save ``target`` after ``previous`` checkpoints were committed.

    Attributes:
        setup_extra: damage or leftovers applied to the disk after the previous checkpoints
            are committed (then made durable), e.g. a half-written ``iter_<target>``.
        machine_factory: the save machine to run (tests swap in deliberately broken tables).
        resume_factory: the resume machine the restarted process runs.
        store_factory: the store over the world's disk (tests swap in broken filesystems).
    """

    name: str
    target: int
    previous: tuple[int, ...] = ()
    with_data: bool = True
    setup_extra: Callable[[SimWorld], None] | None = None
    machine_factory: Callable[[], Machine] = attrs.field(default=lambda: shipped_machine("save"))
    resume_factory: Callable[[], Machine] = attrs.field(default=lambda: shipped_machine("resume"))
    store_factory: Callable[[SimWorld], Store] = attrs.field(
        default=lambda world: world.local_store(CHECKPOINTS_ROOT)
    )
    machine: str = "save"
    recovery_may_fail: bool = False
    copies: bool = False  # with a moving old policy and reference: old.pt, ref.pt

    @property
    def plan_files(self) -> tuple[str, ...]:
        """The files of the full plan this scenario saves (the oracle requires all of them)."""
        files = ("model.pt", "optim.pt", "trainer.pt") + (("data.pt",) if self.with_data else ())
        return files + (("old.pt", "ref.pt") if self.copies else ())

    def _save(
        self,
        world: SimWorld,
        iteration: int,
        *,
        salt: int,
        crash: CrashPlan | None = None,
        gate: Any = None,
    ) -> RunResult:
        ctx = save_context(
            self.store_factory(world),
            iteration,
            with_data=self.with_data,
            salt=salt,
            copies=self.copies,
        )
        return self.machine_factory().recover(ctx, crash=crash, gate=gate)

    def setup(self, world: SimWorld) -> None:
        for iteration in self.previous:
            store = world.local_store(CHECKPOINTS_ROOT)
            ctx = save_context(
                store, iteration, with_data=self.with_data, salt=SALT_SETUP, copies=self.copies
            )
            shipped_machine("save").recover(ctx).raise_for_failure()
        world.local_store(CHECKPOINTS_ROOT)
        if self.setup_extra is not None:
            self.setup_extra(world)

    def run(self, world: SimWorld, *, crash: CrashPlan | None) -> RunResult:
        return self._save(world, self.target, salt=SALT_RUN, crash=crash, gate=world.gate)

    def _observe_resume(self, world: SimWorld) -> ResumeObservation:
        store = self.store_factory(world)  # creating a missing root is the store's, not resume's
        seen = DiskView.of(world)
        gate = _record(world)
        damage.PAYLOAD_RAN.clear()
        objects = fresh_objects(with_data=self.with_data, copies=self.copies)
        ctx = resume_context(store, objects)
        self.resume_factory().run(ctx).raise_for_failure()
        if ctx.result is None:
            raise RuntimeError("resume machine ended without a result")
        loaded = LoadedState.of(objects, ctx.tracked.clocks) if ctx.result.resumed else None
        return ResumeObservation(
            ctx.result, seen, tuple(gate.log), loaded, tuple(damage.PAYLOAD_RAN)
        )

    def recover(self, world: SimWorld) -> Recovery:
        with preserved_rng():
            first = self._observe_resume(world)
            retry_seen = DiskView.of(world)
            gate = _record(world)
            retry = self._save(world, self.target, salt=SALT_RETRY)
            retry.raise_for_failure()
            retry_io = tuple(gate.log)
            after = self._observe_resume(world)
        return Recovery(first, retry, retry_seen, retry_io, after)


def _committed_without_pointer(iteration: int, pointer_to: int) -> Callable[[SimWorld], None]:
    def commit(world: SimWorld) -> None:
        store = world.local_store(CHECKPOINTS_ROOT)
        ctx = save_context(store, iteration, with_data=True, salt=SALT_SETUP)
        shipped_machine("save").recover(ctx).raise_for_failure()
        damage.stale_latest(pointer_to)(world)

    return commit


def _damaged(*damages: Callable[[SimWorld], None]) -> Callable[[SimWorld], None]:
    def apply(world: SimWorld) -> None:
        for one in damages:
            one(world)

    return apply


def save_scenarios() -> list[SaveScenario]:
    """The scenarios ``statecraft crashcheck`` runs for the save and resume machines."""
    return [
        SaveScenario("first-save", target=2, with_data=False),
        SaveScenario("next-save", target=4, previous=(2,)),
        # A moving old policy and reference (old.pt, ref.pt, written in the bulk phase): a torn
        # or missing copy file is never adopted (RESUME-VERIFIED requires both) and the adopted
        # copies are exactly the files' (RESUME-EXACT).
        SaveScenario("save-with-copies", target=4, previous=(2,), with_data=False, copies=True),
        SaveScenario(
            "retry-commits-pointer-only",
            target=4,
            previous=(2,),
            setup_extra=_committed_without_pointer(4, pointer_to=2),
        ),
        SaveScenario(
            "save-over-leftovers", target=4, previous=(2,), setup_extra=damage.leftovers_of(4)
        ),
        SaveScenario(
            "newest-is-corrupt",
            target=6,
            previous=(2, 4),
            setup_extra=damage.bit_flip(4, "model.pt"),
        ),
        # The newest committed manifest omits data.pt (left on disk): not a commit, so resume
        # passes over it and resumes iter 2 exactly (its data cursor included).
        SaveScenario(
            "manifest-omits-data",
            target=6,
            previous=(2, 4),
            setup_extra=damage.manifest_omits(4, "data.pt"),
        ),
        # Damaged trees, so resume's fallback rules are proven at every crash point. Each
        # combines a pointer damage with a checkpoint damage, without a data source (fewer
        # files per save: keeping crashcheck fast).
        SaveScenario(
            "stale-latest-newer-partial",
            target=6,
            previous=(2, 4),
            with_data=False,
            setup_extra=_damaged(damage.stale_latest(2), damage.newer_partial(8)),
        ),
        SaveScenario(
            "garbage-latest-size-disagrees",
            target=6,
            previous=(2, 4),
            with_data=False,
            setup_extra=_damaged(damage.garbage_latest(), damage.grown_file(4, "optim.pt")),
        ),
        SaveScenario(
            "dangling-latest-hostile-pickle",
            target=6,
            previous=(2, 4),
            with_data=False,
            setup_extra=_damaged(damage.dangling_latest(9), damage.hostile_pickle(4, "trainer.pt")),
        ),
    ]
