"""Crash scenarios of the ``publish`` machine, run by ``tests/`` and ``statecraft crashcheck``.

Each scenario commits a tiny artifact with the production artifact machine under
``checkpoint_artifacts/`` of a :class:`~statecraft.storage.SimWorld` disk, optionally leaves an
earlier publish behind (crashed part-way, or complete) or damages the remote side, then runs the
production publish machine with its production bindings over the production ``LocalStore`` and
the world's :class:`~statecraft.storage.objects.SimBucket`. Recovery is what a restarted process
does: (for the ``recreate`` scenarios) save the artifact again with other bytes, then publish
again; what it found and did is recorded for :mod:`statecraft.proofs.archive.publish_checks`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from statecraft.checkpoint.archive.destination import ArchiveDestination
from statecraft.checkpoint.archive.publish_bindings import PublishContext
from statecraft.engine import CrashPlan, Machine, RunResult
from statecraft.engine.crash import IoGate, IoRecord, SimulatedCrash
from statecraft.proofs.artifacts.oracle import ARTIFACTS_ROOT, partial_artifact, tree_of
from statecraft.proofs.artifacts.scenarios import artifact_context
from statecraft.proofs.oracle import iteration_name
from statecraft.proofs.save.scenarios import shipped_machine
from statecraft.proofs.training import SALT_RETRY, SALT_RUN, SALT_SETUP
from statecraft.storage.sim import SimWorld

__all__ = [
    "DESTINATION_PREFIX",
    "PublishRecovery",
    "PublishScenario",
    "publish_scenarios",
    "remote_prefix",
]

#: the checkpoints-root prefix every scenario publishes under
DESTINATION_PREFIX = "proj/group/run/20260101-000000/checkpoints"


def remote_prefix(iteration: int) -> str:
    """Where the scenarios' artifact ``iteration`` is archived (spelled here, not derived)."""
    return f"proj/group/run/20260101-000000/checkpoint_artifacts/{iteration_name(iteration)}"


@attrs.frozen
class PublishRecovery:
    """What the restarted process found and did.

    Attributes:
        declaration: the remote declaration's bytes as the restart found them (``None``:
            absent).
        local: ``checkpoint_artifacts/`` as the retry started from (after a re-save).
        recreated: the restart saved the artifact again with other bytes first.
        retry: the retried publish's result; ``retry_io`` its store operations.
    """

    declaration: bytes | None
    local: dict[str, bytes]
    recreated: bool
    retry: RunResult
    retry_io: tuple[IoRecord, ...]


def _save_artifact(world: SimWorld, iteration: int, components: tuple[str, ...], salt: int) -> None:
    store = world.local_store(ARTIFACTS_ROOT)
    if store.stat(iteration_name(iteration)) is not None:
        store.delete_tree(iteration_name(iteration))
    ctx = artifact_context(store, iteration, components, with_data=False, salt=salt)
    if salt != SALT_SETUP and "model.pt" in ctx.payloads:  # the salt changes trainer.pt only
        ctx.payloads = {**ctx.payloads, "model.pt": _salted(ctx.payloads["model.pt"], salt)}
    shipped_machine("artifact").recover(ctx).raise_for_failure()


def _salted(producer: Callable[[], Any], salt: int) -> Callable[[], Any]:
    """A model state of other values (another training run's weights)."""
    return lambda: {name: value + salt for name, value in producer().items()}


def publish_context(world: SimWorld, iteration: int) -> PublishContext:
    """The one place the harness builds a publish transaction's context."""
    destination = ArchiveDestination(world.bucket, DESTINATION_PREFIX)
    return PublishContext(world.local_store(ARTIFACTS_ROOT), iteration, destination)


@attrs.define
class PublishScenario:
    """Publish artifact ``target`` of ``components``.

    Attributes:
        earlier: what an earlier publish left: ``"none"``, ``"crashed"`` (it crashed before
            its ``earlier_io``-th store operation) or ``"complete"``.
        resaved: after the earlier publish, the local artifact was saved again with other
            bytes (a different inventory than the one declared).
        recreate: the restart saves the artifact again with other bytes before retrying.
        uncommitted: the local artifact is an interrupted save's leftovers (no manifest).
        remote_damage: applied to the bucket after the setup (raw bytes).
        expect_error: the error class name the uncrashed run (and every retry) ends with.
        machine_factory: the publish machine of the crashed run and of the retry (tests swap
            in deliberately broken ones); the setup's publishes use the shipped one.
    """

    name: str
    target: int = 4
    components: tuple[str, ...] = ("model",)
    earlier: str = "none"
    earlier_io: int = 3
    resaved: bool = False
    recreate: bool = False
    uncommitted: bool = False
    remote_damage: Callable[[SimWorld], None] | None = None
    expect_error: str | None = None
    machine_factory: Callable[[], Machine] = attrs.field(default=lambda: shipped_machine("publish"))
    machine: str = "publish"
    recovery_may_fail: bool = False
    last_run: RunResult | None = None

    def setup(self, world: SimWorld) -> None:
        world.local_store(ARTIFACTS_ROOT)
        if self.uncommitted:
            partial_artifact(self.target)(world)
            return
        _save_artifact(world, self.target, self.components, SALT_SETUP)
        if self.earlier == "complete":
            shipped_machine("publish").recover(publish_context(world, self.target))
        elif self.earlier == "crashed":
            gate = IoGate()
            world.rearm(gate)
            try:
                shipped_machine("publish").recover(
                    publish_context(world, self.target),
                    crash=CrashPlan(at_io=self.earlier_io),
                    gate=gate,
                )
            except SimulatedCrash:
                pass
            world.rearm(IoGate())
        if self.resaved:
            _save_artifact(world, self.target, self.components, SALT_RUN)
        if self.remote_damage is not None:
            self.remote_damage(world)

    def run(self, world: SimWorld, *, crash: CrashPlan | None) -> RunResult:
        self.last_run = None
        ctx = publish_context(world, self.target)
        self.last_run = self.machine_factory().recover(ctx, crash=crash, gate=world.gate)
        return self.last_run

    def recover(self, world: SimWorld) -> PublishRecovery:
        key = f"{remote_prefix(self.target)}/.posttrain-archive.json"
        found = world.bucket.objects.get(key)
        declaration = None if found is None else found[0]
        if self.recreate:
            _save_artifact(world, self.target, self.components, SALT_RETRY)
        local = tree_of(world, ARTIFACTS_ROOT)
        gate = IoGate()
        world.rearm(gate)
        retry = self.machine_factory().recover(publish_context(world, self.target))
        return PublishRecovery(declaration, local, self.recreate, retry, tuple(gate.log))


def _garbage_declaration(iteration: int) -> Callable[[SimWorld], None]:
    def damage(world: SimWorld) -> None:
        world.bucket.put(f"{remote_prefix(iteration)}/.posttrain-archive.json", b'{"schema": "x')

    return damage


def publish_scenarios() -> list[PublishScenario]:
    """The scenarios ``statecraft crashcheck`` runs for the publish machine (a tiny model, one
    to three payloads, so the whole exploration stays fast)."""
    two = ("optimizer", "training_state")
    return [
        PublishScenario("publish-model-artifact"),
        PublishScenario("resume-crashed-publish", components=two, earlier="crashed"),
        PublishScenario("republish-published-artifact", earlier="complete"),
        PublishScenario("artifact-recreated-after-crash", recreate=True),
        PublishScenario(
            "different-inventory-declared",
            earlier="crashed",
            earlier_io=2,
            resaved=True,
            expect_error="ArchiveMismatchError",
        ),
        PublishScenario(
            "malformed-remote-declaration",
            remote_damage=_garbage_declaration(4),
            expect_error="CheckpointCorruptError",
        ),
        PublishScenario(
            "uncommitted-local-artifact", uncommitted=True, expect_error="ArchiveError"
        ),
    ]
