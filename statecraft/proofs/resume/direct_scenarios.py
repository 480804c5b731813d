"""Crash scenarios of the ``resume`` machine over a direct object-store root
(``checkpoint_store.backend=object_store``), run by ``tests/`` and
``statecraft crashcheck --machine resume``.

Each scenario saves real training state (:func:`~statecraft.proofs.training.tracked_at`: a
model, AdamW with state, StepLR, RNG streams and clocks that identify the iteration) with the
production direct save (:func:`~statecraft.checkpoint.direct.saving.direct_save_context`, real
DCP shards) into the production :class:`~statecraft.storage.objects.ObjectStore` on the world's
:class:`~statecraft.storage.objects.SimBucket`, under the production object-store lease. The
explorer crashes that save at every I/O boundary. Recovery is what a restarted process does:
resume (the production resume machine over the production
:class:`~statecraft.checkpoint.direct.resume_source.DirectResumeSource`, loading into fresh
torch objects), retry the save (taking the lease over), resume again. Before each resume the
recovery records the bucket exactly as that resume found it and the operations it performed,
so :mod:`statecraft.proofs.resume.direct_checks` judges what each resume saw and did.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from statecraft.checkpoint.direct.resume import run_direct_resume
from statecraft.checkpoint.direct.resume_source import DirectResumeSource
from statecraft.checkpoint.direct.save_context import DirectSaveContext
from statecraft.checkpoint.direct.saving import direct_save_context
from statecraft.checkpoint.fencing.object_lease import ObjectStoreLease
from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.checkpoint.kernel.machines import shipped_machine
from statecraft.checkpoint.resume.records import ResumeResult, Tracked
from statecraft.engine import CrashPlan, RunResult
from statecraft.engine.crash import IoGate, IoRecord
from statecraft.parallel.collectives import SingleProcess
from statecraft.proofs import damaged_trees as damage
from statecraft.proofs.direct.scenarios import (
    ROOT_PREFIX,
    WRITER_A,
    bucket_objects,
    held_lease,
    root_store,
    take_lease,
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
    "ROOT_URI",
    "DirectResumeObservation",
    "DirectResumeRecovery",
    "DirectResumeScenario",
    "SourceFactory",
    "direct_resume_scenarios",
    "drop_object",
    "flip_shard",
]

#: the root's URI as resume names it (``ResumeResult.source`` is ``<ROOT_URI>/iter_N``)
ROOT_URI = f"s3://sim-bucket/{ROOT_PREFIX}"

#: builds the resume source over the root (tests swap in deliberately broken ones)
SourceFactory = Callable[[Store, str], DirectResumeSource]


@attrs.frozen
class DirectResumeObservation:
    """One ``resume=auto`` of the restarted process over the direct root.

    Attributes:
        result: what resume decided (``None``: it refused, see ``error``).
        error: the refusal (``None`` when it decided).
        seen: the root's objects exactly as resume found them (key relative to the root).
        io: the bucket operations that changed bytes or names while it ran (should be none).
        loaded: the state the live objects held afterwards (``None`` unless it resumed).
        payloads_ran: hostile pickle payloads that executed while it ran (should be none).
    """

    result: ResumeResult | None
    error: Exception | None
    seen: dict[str, bytes]
    io: tuple[IoRecord, ...]
    loaded: LoadedState | None
    payloads_ran: tuple[str, ...]


@attrs.frozen
class DirectResumeRecovery:
    """What the restarted process did: resume, retry the save, resume again."""

    first: DirectResumeObservation
    retry: RunResult
    after: DirectResumeObservation

    @property
    def resumes(self) -> tuple[DirectResumeObservation, DirectResumeObservation]:
        return (self.first, self.after)


def _save_context(lease: ObjectStoreLease, iteration: int, salt: int) -> DirectSaveContext:
    """The production direct save of the run's state at ``iteration`` under ``lease``."""
    return direct_save_context(
        tracked_at(iteration, salt=salt),
        lease.store,
        collective=SingleProcess(),
        rng=rng_at(iteration),
        data=None,
        step=iteration,
        lease=lease,
    )


def flip_shard(iteration: int, component: str = "model") -> Callable[[SimWorld], None]:
    """Damage: one bit of rank 0's ``component`` shard of ``iteration`` flipped (same size)."""

    def apply(world: SimWorld) -> None:
        key = f"{ROOT_PREFIX}/{iter_dirname(iteration)}/{component}/__0_0.distcp"
        data = bytearray(world.bucket.objects[key][0])
        data[len(data) // 2] ^= 0x01
        world.bucket.tamper(key, bytes(data))

    return apply


def drop_object(iteration: int, path: str) -> Callable[[SimWorld], None]:
    """Damage: the object ``iter_N/<path>`` deleted (its manifest still names it)."""

    def apply(world: SimWorld) -> None:
        world.bucket.delete(f"{ROOT_PREFIX}/{iter_dirname(iteration)}/{path}")

    return apply


@attrs.define
class DirectResumeScenario:
    """Save ``target`` into the direct root after ``previous`` were committed; recovery
    resumes, retries the save, resumes again.

    Attributes:
        setup_extra: damage applied after the previous checkpoints are committed.
        source_factory: the resume source (tests swap in deliberately broken ones).
    """

    name: str
    target: int
    previous: tuple[int, ...] = ()
    setup_extra: Callable[[SimWorld], None] | None = None
    source_factory: SourceFactory = DirectResumeSource
    machine: str = "resume"
    recovery_may_fail: bool = False
    inject_faults: bool = True

    def setup(self, world: SimWorld) -> None:
        take_lease(world, WRITER_A)
        for iteration in self.previous:
            ctx = _save_context(held_lease(world), iteration, SALT_SETUP)
            shipped_machine("direct_save").recover(ctx).raise_for_failure()
        if self.setup_extra is not None:
            self.setup_extra(world)

    def run(self, world: SimWorld, *, crash: CrashPlan | None) -> RunResult:
        ctx = _save_context(held_lease(world), self.target, SALT_RUN)
        return shipped_machine("direct_save").recover(ctx, crash=crash, gate=world.gate)

    def _observe_resume(self, world: SimWorld) -> DirectResumeObservation:
        seen = bucket_objects(world)
        gate = IoGate()
        world.rearm(gate)
        damage.PAYLOAD_RAN.clear()
        objects = fresh_objects(with_data=False)
        tracked = Tracked(
            model=objects.model, optimizer=objects.optimizer, scheduler=objects.scheduler
        )
        source = self.source_factory(root_store(world), ROOT_URI)
        result: ResumeResult | None = None
        error: Exception | None = None
        try:
            result = run_direct_resume(tracked, source, mode="auto", collective=SingleProcess())
        except Exception as exc:  # a refusal is an outcome the checks judge
            error = exc
        loaded = (
            LoadedState.of(objects, tracked.clocks)
            if result is not None and result.resumed
            else None
        )
        return DirectResumeObservation(
            result, error, seen, tuple(gate.log), loaded, tuple(damage.PAYLOAD_RAN)
        )

    def recover(self, world: SimWorld) -> DirectResumeRecovery:
        with preserved_rng():
            first = self._observe_resume(world)
            lease = take_lease(world, WRITER_A)  # the restarted process takes the lease over
            world.rearm(IoGate())
            retry = shipped_machine("direct_save").recover(
                _save_context(lease, self.target, SALT_RETRY)
            )
            retry.raise_for_failure()
            after = self._observe_resume(world)
        return DirectResumeRecovery(first, retry, after)


def direct_resume_scenarios() -> list[DirectResumeScenario]:
    """The direct-root scenarios ``statecraft crashcheck --machine resume`` runs."""
    return [
        DirectResumeScenario("direct-first-save", target=2),
        DirectResumeScenario("direct-next-save", target=4, previous=(2,)),
        # latest names a damaged checkpoint: found by verification (an object the manifest
        # names is gone), or only when its shard is read in place (a flipped bit)
        DirectResumeScenario(
            "direct-latest-names-missing-object",
            target=6,
            previous=(2, 4),
            setup_extra=drop_object(4, "optim/.metadata"),
        ),
        DirectResumeScenario(
            "direct-latest-names-flipped-shard",
            target=6,
            previous=(2, 4),
            setup_extra=flip_shard(4),
            inject_faults=False,
        ),
    ]
