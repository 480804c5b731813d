"""Crash scenarios of the ``archive_prune`` machine (remote retention's removal of one
iteration), run by ``tests/`` and ``statecraft crashcheck``.

The setup saves full checkpoints with the production save machine on a
:class:`~statecraft.storage.SimWorld` disk and archives them with the production upload
machine to the world's :class:`~statecraft.storage.objects.SimBucket` (which survives every
crash kind), then adds what a prune must never touch: a published artifact of the same
iteration under ``checkpoint_artifacts/`` and an unrelated key. The run removes
``<prefix>/iter_2`` with the production ``archive_prune`` machine; recovery is the rerun a
restarted process (the next save's retention pass, or ``statecraft archive prune``) performs.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from statecraft.checkpoint.archive.remote_prune_bindings import RemotePruneContext
from statecraft.engine import CrashPlan, Machine, RunResult
from statecraft.engine.crash import IoGate
from statecraft.proofs.archive.upload_scenarios import REMOTE_PREFIX, upload_context
from statecraft.proofs.oracle import CHECKPOINTS_ROOT, iteration_name
from statecraft.proofs.save.scenarios import save_context, shipped_machine
from statecraft.proofs.training import SALT_SETUP, preserved_rng
from statecraft.storage.sim import SimWorld

__all__ = ["ArchivePruneScenario", "PruneRecovery", "archive_prune_scenarios"]

#: keys the prune must never touch (an artifact of the pruned iteration, another tree)
ARTIFACT_KEY = f"{REMOTE_PREFIX}/checkpoint_artifacts/{iteration_name(2)}/model.pt"
OTHER_KEY = f"{REMOTE_PREFIX}/notes/{iteration_name(2)}/readme.txt"


@attrs.frozen
class PruneRecovery:
    """What the rerun prune did: its result and the keys left under the pruned prefix."""

    rerun: RunResult
    left: tuple[str, ...]


@attrs.define
class ArchivePruneScenario:
    """Remove ``<prefix>/iter_<target>`` after ``uploaded`` were archived.

    Attributes:
        unpublished_before: the setup deletes the target's commit record (a prune crashed
            after its first step, or an upload interrupted before its manifest).
        machine_factory: the ``archive_prune`` machine (tests swap in broken ones).
    """

    name: str
    target: int = 2
    uploaded: tuple[int, ...] = (2, 4)
    unpublished_before: bool = False
    inject_faults: bool = True
    machine_factory: Callable[[], Machine] = attrs.field(
        default=lambda: shipped_machine("archive_prune")
    )
    machine: str = "archive_prune"
    recovery_may_fail: bool = False

    @property
    def key_prefix(self) -> str:
        return f"{REMOTE_PREFIX}/{iteration_name(self.target)}"

    def setup(self, world: SimWorld) -> None:
        store = world.local_store(CHECKPOINTS_ROOT)
        for iteration in self.uploaded:
            ctx = save_context(store, iteration, with_data=False, salt=SALT_SETUP)
            shipped_machine("save").recover(ctx).raise_for_failure()
            uploaded = shipped_machine("upload").recover(upload_context(world, iteration))
            uploaded.raise_for_failure()
        world.bucket.put(ARTIFACT_KEY, b"an artifact of iteration 2: never pruned with it")
        world.bucket.put(OTHER_KEY, b"a key whose path merely contains iter_000000002/")
        if self.unpublished_before:
            world.bucket.delete(f"{self.key_prefix}/.posttrain-manifest.json")

    def context(self, world: SimWorld) -> RemotePruneContext:
        return RemotePruneContext(world.bucket, self.key_prefix)

    def run(self, world: SimWorld, *, crash: CrashPlan | None) -> RunResult:
        return self.machine_factory().recover(self.context(world), crash=crash, gate=world.gate)

    def recover(self, world: SimWorld) -> PruneRecovery:
        world.rearm(IoGate())
        with preserved_rng():
            rerun = self.machine_factory().recover(self.context(world))
        left = tuple(world.bucket.list(f"{self.key_prefix}/"))
        return PruneRecovery(rerun, left)


def archive_prune_scenarios() -> list[ArchivePruneScenario]:
    """The scenarios ``statecraft crashcheck`` runs for the archive_prune machine."""
    return [
        ArchivePruneScenario("prune-published-iteration"),
        ArchivePruneScenario(
            "collect-unpublished-remainder", unpublished_before=True, inject_faults=False
        ),
    ]
