"""Crash scenarios of the ``dcp_save`` machine, run by ``tests/`` and ``statecraft crashcheck``.

Each scenario runs the production ``dcp_save`` machine with its production bindings over the
production ``LocalStore`` on a :class:`~statecraft.storage.SimWorld` disk, in one process with
no process group: ``dcp.save`` drives our ``StoreStorageWriter`` with DCP's
``DefaultSavePlanner`` and writes :data:`FILES_PER_RANK` shard files per component, so every
shard write (temporary, fsync, rename, directory fsync) and each ``.metadata`` replace is an
I/O point the explorer crashes. Recovery is what a restarted process does: ``resume=auto``
(the production resume machine verifying DCP checkpoints and loading them into real torch
objects through the DCP reader), the retry of the interrupted save, another ``resume=auto``;
each step's disk view and I/O are recorded as in :mod:`statecraft.proofs.save.scenarios`.

The payloads are those of :mod:`statecraft.proofs.training` (every value derived from the
iteration), as DCP state dicts: the model's ``state_dict`` and the optimizer's FQN-keyed one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import attrs

from statecraft.checkpoint.kernel.machines import shipped_machine
from statecraft.checkpoint.resume.bindings import ResumeContext, Tracked
from statecraft.checkpoint.save.dcp_bindings import DcpSaveContext, dcp_save_plan
from statecraft.checkpoint.state import TrainerState
from statecraft.engine import CrashPlan, Machine, RunResult
from statecraft.engine.crash import IoGate
from statecraft.proofs import damaged_trees as damage
from statecraft.proofs.oracle import CHECKPOINTS_ROOT, DiskView
from statecraft.proofs.save.scenarios import Recovery, ResumeObservation
from statecraft.proofs.training import (
    SALT_RETRY,
    SALT_RUN,
    SALT_SETUP,
    Cursor,
    LoadedState,
    _objects_at,
    _rng_inventory,
    fresh_objects,
    preserved_rng,
)
from statecraft.storage.base import Store
from statecraft.storage.sim import SimWorld
from statecraft.writers.dcp import DcpWriter

__all__ = [
    "FILES_PER_RANK",
    "DcpSaveScenario",
    "dcp_payloads_at",
    "dcp_save_context",
    "dcp_save_scenarios",
]

#: shard files per component: each a separate durable publication (an I/O point)
FILES_PER_RANK = 2


@functools.lru_cache(maxsize=64)
def _payloads(iteration: int, with_data: bool, salt: int) -> dict[str, Callable[[], Any]]:
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    model, optimizer, scheduler, clocks = _objects_at(iteration)
    trainer = TrainerState.capture(
        clocks,
        rng=_rng_inventory(iteration),
        scheduler=scheduler,
        optimizer=optimizer,
        extra={"salt": salt},
    )
    optim_state = get_optimizer_state_dict(model, optimizer)
    payloads: dict[str, Callable[[], Any]] = {
        "model": model.state_dict,
        "optim": lambda: optim_state,
        "trainer.pt": trainer.to_payload,
    }
    if with_data:
        payloads["data.pt"] = Cursor(iteration, salt).state_dict
    return payloads


def dcp_payloads_at(
    iteration: int, *, with_data: bool, salt: int = SALT_SETUP
) -> dict[str, Callable[[], Any]]:
    """The payloads a DCP training run saves at ``iteration`` (one simulated rank)."""
    return dict(_payloads(iteration, with_data, salt))


def dcp_save_context(store: Store, iteration: int, *, with_data: bool, salt: int) -> DcpSaveContext:
    """The one place the harness builds a DCP save's context (a world of one)."""
    return DcpSaveContext(
        store=store,
        plan=dcp_save_plan(iteration, with_data=with_data),
        payloads=dcp_payloads_at(iteration, with_data=with_data, salt=salt),
        files_per_rank=FILES_PER_RANK,
    )


def _record(world: SimWorld) -> IoGate:
    gate = IoGate()
    world.rearm(gate)
    return gate


@attrs.define
class DcpSaveScenario:
    """Save ``target`` (DCP) after ``previous`` DCP checkpoints were committed.

    Attributes:
        setup_extra: damage or leftovers applied after the previous checkpoints are committed.
        machine_factory: the DCP save machine to run (tests swap in broken variants).
        store_factory: the store over the world's disk.
    """

    name: str
    target: int
    previous: tuple[int, ...] = ()
    with_data: bool = True
    setup_extra: Callable[[SimWorld], None] | None = None
    machine_factory: Callable[[], Machine] = attrs.field(
        default=lambda: shipped_machine("dcp_save")
    )
    resume_factory: Callable[[], Machine] = attrs.field(default=lambda: shipped_machine("resume"))
    store_factory: Callable[[SimWorld], Store] = attrs.field(
        default=lambda world: world.local_store(CHECKPOINTS_ROOT)
    )
    machine: str = "dcp_save"
    recovery_may_fail: bool = False
    inject_faults: bool = True

    def _save(
        self,
        world: SimWorld,
        iteration: int,
        *,
        salt: int,
        crash: CrashPlan | None = None,
        gate: Any = None,
    ) -> RunResult:
        ctx = dcp_save_context(
            self.store_factory(world), iteration, with_data=self.with_data, salt=salt
        )
        return self.machine_factory().recover(ctx, crash=crash, gate=gate)

    def setup(self, world: SimWorld) -> None:
        for iteration in self.previous:
            store = world.local_store(CHECKPOINTS_ROOT)
            ctx = dcp_save_context(store, iteration, with_data=self.with_data, salt=SALT_SETUP)
            shipped_machine("dcp_save").recover(ctx).raise_for_failure()
        world.local_store(CHECKPOINTS_ROOT)
        if self.setup_extra is not None:
            self.setup_extra(world)

    def run(self, world: SimWorld, *, crash: CrashPlan | None) -> RunResult:
        return self._save(world, self.target, salt=SALT_RUN, crash=crash, gate=world.gate)

    def _observe_resume(self, world: SimWorld) -> ResumeObservation:
        store = self.store_factory(world)
        seen = DiskView.of(world)
        gate = _record(world)
        damage.PAYLOAD_RAN.clear()
        objects = fresh_objects(with_data=self.with_data)
        tracked = Tracked(
            model=objects.model,
            optimizer=objects.optimizer,
            scheduler=objects.scheduler,
            data=objects.data,
        )
        ctx = ResumeContext(mode="auto", tracked=tracked, store=store, writer=DcpWriter())
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
        ctx = dcp_save_context(store, iteration, with_data=False, salt=SALT_SETUP)
        shipped_machine("dcp_save").recover(ctx).raise_for_failure()
        damage.stale_latest(pointer_to)(world)

    return commit


def _partial_shards(iteration: int) -> Callable[[SimWorld], None]:
    """An interrupted DCP save of ``iteration``: some shards and no manifest."""

    def leave(world: SimWorld) -> None:
        store = world.local_store(CHECKPOINTS_ROOT)
        base = f"iter_{iteration:09d}/model"
        store.make_dirs(base)
        store.write_atomic(f"{base}/__0_0.distcp", b"half a shard")
        store.write_atomic(f"{base}/__1_0.distcp", b"another rank's shard")

    return leave


def dcp_save_scenarios() -> list[DcpSaveScenario]:
    """The scenarios ``statecraft crashcheck --machine dcp_save`` runs."""
    return [
        DcpSaveScenario("dcp-first-save", target=2, with_data=False),
        DcpSaveScenario("dcp-next-save", target=4, previous=(2,), inject_faults=False),
        DcpSaveScenario(
            "dcp-retry-commits-pointer-only",
            target=4,
            previous=(2,),
            with_data=False,
            setup_extra=_committed_without_pointer(4, pointer_to=2),
            inject_faults=False,
        ),
        DcpSaveScenario(
            "dcp-save-over-partial-shards",
            target=4,
            previous=(2,),
            with_data=False,
            setup_extra=_partial_shards(4),
            inject_faults=False,
        ),
    ]
