"""Crash scenarios of ``checkpoint_format=incremental`` (``specs/incremental_gc.toml``), run by
``tests/`` and ``statecraft crashcheck --machine incremental_gc``.

Every save uses the production ``save`` machine with the production
:class:`~statecraft.writers.incremental.IncrementalWriter` (every tensor a blob:
``min_blob_bytes=1``) on a :class:`~statecraft.storage.SimWorld` disk. Each iteration's model
holds the proofs' ``Linear`` (its values change with the iteration) plus ``frozen.weight``,
one live tensor every save shares (the frozen base of a LoRA run), so its blob is referenced
by every iteration.

- ``collect-after-pruning``: iterations 1, 2 and 3 saved, then iteration 1 removed as
  retention removes it; the run is the ``incremental_gc`` machine; recovery reruns it.
- ``save-then-collect``: iterations 1 and 2 saved; the run is the write job of iteration 3
  (save, retention keeping the newest two, then the collection); recovery is the restarted
  process's write job of iteration 3 (the save machine's recover first).
- ``in-place-update``: as ``save-then-collect``, but between the setup's saves and the run
  the frozen tensor is overwritten through ``.data`` (which leaves its version counter as it
  was): iteration 3 must hold the new bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import torch

from statecraft.checkpoint.incremental.gc_bindings import GcContext, collect_blobs
from statecraft.checkpoint.kernel.machines import shipped_machine
from statecraft.checkpoint.kernel.plan import INCREMENTAL_PLAN
from statecraft.checkpoint.retention.policies import LatestN
from statecraft.checkpoint.retention.run import RetentionPlan
from statecraft.checkpoint.save.bindings import SaveContext
from statecraft.checkpoint.save.write_job_bindings import WriteJobContext
from statecraft.engine import CrashPlan, Machine, RunResult
from statecraft.engine.crash import IoGate
from statecraft.proofs.oracle import CHECKPOINTS_ROOT, iteration_name
from statecraft.proofs.training import SALT_RUN, SALT_SETUP, expected_payloads, preserved_rng
from statecraft.storage.base import Store
from statecraft.storage.sim import SimWorld
from statecraft.writers.base import Writer
from statecraft.writers.incremental import DurableBlobs, IncrementalWriter

__all__ = [
    "FROZEN_KEY",
    "IncrementalScenario",
    "frozen_values",
    "incremental_gc_scenarios",
    "incremental_writer",
]

FROZEN_KEY = "frozen.weight"


def frozen_values(updated: bool) -> torch.Tensor:
    """The frozen tensor's values: as the setup saved them, or after the in-place update."""
    return torch.arange(16, dtype=torch.float32) + (100.0 if updated else 0.0)


def incremental_writer(durable: DurableBlobs) -> Writer:
    """The production incremental writer with every tensor stored as a blob (``durable``:
    the blobs the process wrote durably, shared by its saves)."""
    return IncrementalWriter(min_blob_bytes=1, durable=durable)


@attrs.define
class IncrementalScenario:
    """One incremental scenario (see the module doc).

    Attributes:
        kind: ``"gc"`` (the run is the collection) or ``"job"`` (the run is a write job).
        saved: the iterations the setup saves.
        pruned: iterations the setup removes after saving (as retention does).
        target: the iteration the write job saves (``kind="job"``).
        update_in_place: the setup overwrites the frozen tensor through ``.data`` after its
            saves (``kind="job"``).
        writer_factory: the writer of every save (broken variants swap it).
        gc_factory: the ``incremental_gc`` machine (broken variants swap it).
        live: the frozen tensor every save shares (one object, as a live model's).
        process: the blobs the setup's process wrote durably; its run continues that
            process (the recovery is a new one, with none).
    """

    name: str
    kind: str
    saved: tuple[int, ...]
    pruned: tuple[int, ...] = ()
    target: int = 3
    update_in_place: bool = False
    inject_faults: bool = True
    writer_factory: Callable[[DurableBlobs], Writer] = incremental_writer
    gc_factory: Callable[[], Machine] = attrs.field(
        default=lambda: shipped_machine("incremental_gc")
    )
    machine: str = "incremental_gc"
    recovery_may_fail: bool = False
    live: torch.Tensor = attrs.field(factory=lambda: frozen_values(False))
    process: DurableBlobs = attrs.field(factory=DurableBlobs)

    def store(self, world: SimWorld) -> Store:
        return world.local_store(CHECKPOINTS_ROOT)

    def expected_frozen(self, iteration: int) -> torch.Tensor:
        """What iteration ``iteration`` must hold as the frozen tensor."""
        return frozen_values(self.update_in_place and iteration == self.target)

    def expected_model(self, iteration: int) -> dict[str, torch.Tensor]:
        """Every tensor iteration ``iteration``'s ``model.pt`` must hold."""
        with preserved_rng():
            model = dict(expected_payloads(iteration, with_data=False)["model.pt"]())
        model[FROZEN_KEY] = self.expected_frozen(iteration)
        return model

    def _payloads(self, iteration: int, salt: int) -> dict[str, Callable[[], Any]]:
        with preserved_rng():
            payloads = dict(expected_payloads(iteration, with_data=False, salt=salt))
        model = payloads["model.pt"]
        live = self.live
        payloads["model.pt"] = lambda: {**model(), FROZEN_KEY: live.detach()}
        return payloads

    def save_context(
        self, store: Store, iteration: int, salt: int, durable: DurableBlobs
    ) -> SaveContext:
        return SaveContext(
            store=store,
            plan=INCREMENTAL_PLAN.save_plan(iteration, with_data=False),
            payloads=self._payloads(iteration, salt),
            writer=self.writer_factory(durable),
        )

    def setup(self, world: SimWorld) -> None:
        store = self.store(world)
        self.live.data.copy_(frozen_values(False))  # bypasses the version counter
        self.process = DurableBlobs()
        for iteration in self.saved:
            ctx = self.save_context(store, iteration, SALT_SETUP, self.process)
            shipped_machine("save").recover(ctx).raise_for_failure()
        for iteration in self.pruned:
            store.delete_tree(iteration_name(iteration))
        if self.update_in_place:
            self.live.data.copy_(frozen_values(True))  # bypasses the version counter

    def gc_context(self, world: SimWorld) -> GcContext:
        return GcContext(self.store(world))

    def job_context(self, world: SimWorld, salt: int, durable: DurableBlobs) -> WriteJobContext:
        store = self.store(world)
        gc = self.gc_factory
        return WriteJobContext(
            save=self.save_context(store, self.target, salt, durable),
            retention=RetentionPlan(optimizer=None, model=LatestN(2)),
            save_machine=shipped_machine("save"),
            retention_machine=shipped_machine("retention"),
            collect=lambda s: collect_blobs(s, machine=gc()),
        )

    def run(self, world: SimWorld, *, crash: CrashPlan | None) -> RunResult:
        if self.kind == "gc":
            return self.gc_factory().run(self.gc_context(world), crash=crash, gate=world.gate)
        job = shipped_machine("write_job")
        # the run continues the setup's process (a copy: each crash point starts alike)
        durable = DurableBlobs()
        durable.known = set(self.process.known)
        return job.run(self.job_context(world, SALT_RUN, durable), crash=crash, gate=world.gate)

    def recover(self, world: SimWorld) -> RunResult:
        world.rearm(IoGate())
        with preserved_rng():
            if self.kind == "gc":
                return self.gc_factory().recover(self.gc_context(world))
            context = self.job_context(world, SALT_RUN, DurableBlobs())  # a new process
            return shipped_machine("write_job").recover(context)


def incremental_gc_scenarios() -> list[IncrementalScenario]:
    """The scenarios ``statecraft crashcheck`` runs for the incremental_gc machine."""
    return [
        IncrementalScenario("collect-after-pruning", "gc", saved=(1, 2, 3), pruned=(1,)),
        IncrementalScenario("save-then-collect", "job", saved=(1, 2)),
        IncrementalScenario(
            "in-place-update", "job", saved=(1, 2), update_in_place=True, inject_faults=False
        ),
    ]
