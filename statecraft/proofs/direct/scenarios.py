"""Crash scenarios of the ``direct_save`` machine, run by ``tests/`` and ``statecraft crashcheck``.

Each scenario runs the production direct-save machine with its production bindings over the
production :class:`~statecraft.storage.objects.ObjectStore` on the world's
:class:`~statecraft.storage.objects.SimBucket` (the only thing that survives every crash kind;
node loss leaves nothing else). Several ranks are simulated by several shard writers in one
process: rank ``r`` PUTs ``iter_N/<component>/__r_0.distcp`` for every component, then the
coordinator PUTs each component's ``.metadata`` (naming every rank's shard with its size and
digest), the order DCP's ``save`` gives (every rank's ``write_data``, then the coordinator's
``finish``). The writer lease is the production ``ObjectStoreLease`` (a fixed clock: it never
expires within a scenario) and latest goes through the production ``write_pointer_fenced``
(If-Match on the etag this writer last saw).

Recovery is what a restarted training process does: it observes the bucket and retries the
same save (same plan, same bytes: it resumed from the checkpoint latest names and trained to
the same step); what the retry saw and did is recorded for
:mod:`statecraft.proofs.direct.checks`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from statecraft.checkpoint.direct.bindings import (
    DirectPlan,
    DirectSaveContext,
    planned_manifest,
)
from statecraft.checkpoint.fencing.object_lease import (
    ObjectStoreLease,
    acquire_object_lease,
    read_object_lease,
    write_pointer_fenced,
)
from statecraft.checkpoint.kernel.layout import LATEST_POINTER, MANIFEST_NAME, iter_dirname
from statecraft.engine import CrashPlan, Machine, RunResult
from statecraft.engine.crash import IoGate, IoRecord
from statecraft.proofs.save.scenarios import shipped_machine
from statecraft.storage.base import FileRecord, Store
from statecraft.storage.objects import ObjectStore
from statecraft.storage.sim import SimWorld

__all__ = [
    "LEASE_KEY",
    "ROOT_PREFIX",
    "DirectRecovery",
    "DirectScenario",
    "control_payloads",
    "direct_context",
    "direct_save_scenarios",
    "shard_objects",
]

#: the root every scenario saves under (``s3://sim-bucket/<ROOT_PREFIX>``)
ROOT_PREFIX = "proj/group/run/20260101-000000/checkpoints"
LEASE_KEY = f"{ROOT_PREFIX}/.statecraft-lease.json"
WRITER_A = "host-a"
WRITER_B = "host-b"
SALT_SETUP = "setup"
SALT_RUN = "run"


def root_store(world: SimWorld) -> ObjectStore:
    """The production object store over this world's bucket at the scenarios' root."""
    return world.object_store(ROOT_PREFIX)


def shard_objects(plan: DirectPlan, salt: str) -> dict[str, bytes]:
    """Every DCP object of ``plan`` (path relative to the root -> bytes), in write order:
    every rank's shards, then each component's ``.metadata`` naming them."""
    from statecraft.storage.digest import Digest

    iter_dir = iter_dirname(plan.iteration)
    out: dict[str, bytes] = {}
    for rank in range(plan.world_size):
        for component in plan.components:
            body = f"{component} rank {rank} of {iter_dir} ({salt})\n".encode() * (3 + rank)
            out[f"{iter_dir}/{component}/__{rank}_0.distcp"] = body
    for component in plan.components:
        shards = {
            p.rsplit("/", 1)[1]: {"size": len(d), "digest": str(Digest.of(d))}
            for p, d in out.items()
            if p.startswith(f"{iter_dir}/{component}/")
        }
        out[f"{iter_dir}/{component}/.metadata"] = json.dumps(shards, sort_keys=True).encode()
    return out


def control_payloads(plan: DirectPlan, salt: str) -> dict[str, bytes]:
    """The control files of ``plan`` (``trainer.pt`` [+ ``data.pt``])."""
    return {n: f"{n} of {iter_dirname(plan.iteration)} ({salt})".encode() for n in plan.control}


@attrs.define
class SimShardWriter:
    """The simulated ranks' DCP save: rank by rank, then the coordinator's ``.metadata``.

    ``after_shards`` (the stale-writer scenario) runs once every shard is written, before
    the ``.metadata``: another writer takes the lease over there.
    """

    salt: str
    after_shards: Callable[[Store], None] | None = None

    def __call__(self, ctx: DirectSaveContext) -> Mapping[str, FileRecord]:
        records: dict[str, FileRecord] = {}
        for path, data in shard_objects(ctx.plan, self.salt).items():
            if path.endswith("/.metadata") and self.after_shards is not None:
                hook, self.after_shards = self.after_shards, None
                hook(ctx.store)
            records[path] = ctx.store.write_atomic(path, data)
        return records


#: the harness's fixed clock (unix seconds; 2026-01-01): leases never expire during a scenario
CLOCK_NOW = 1_767_225_600.0
LEASE_TTL_S = 600.0


def _clock() -> float:
    return CLOCK_NOW


def take_lease(world: SimWorld, host: str) -> ObjectStoreLease:
    """``host`` acquires the root's lease (a deliberate takeover when another holds it), with
    the gate off: another process did it, outside the run being crashed."""
    gate, world.bucket.gate = world.bucket.gate, None
    try:
        return acquire_object_lease(
            root_store(world), ttl_s=LEASE_TTL_S, takeover=True, clock=_clock, host=host, pid=1
        )
    finally:
        world.bucket.gate = gate


def held_lease(world: SimWorld) -> ObjectStoreLease:
    """The lease as its live owner holds it (the process that took it is the one saving):
    the current record and etag, and latest's etag as that owner last saw it."""
    store = root_store(world)
    found = read_object_lease(store)
    if found is None:
        raise AssertionError("the scenario's setup took no lease")
    record, etag = found
    lease = ObjectStoreLease(store, record, etag, clock=_clock)
    lease.observe(LATEST_POINTER)
    return lease


def stale_lease(world: SimWorld, host: str) -> ObjectStoreLease:
    """The lease ``host`` held before another writer took it over (its etag is gone)."""
    store = root_store(world)
    found = read_object_lease(store)
    assert found is not None
    record = attrs.evolve(found[0], owner=f"{host}:1:stale", host=host, generation=1)
    lease = ObjectStoreLease(store, record, '"stale-etag"', clock=_clock)
    lease.observe(LATEST_POINTER)
    return lease


def direct_context(
    world: SimWorld,
    plan: DirectPlan,
    *,
    salt: str = SALT_RUN,
    lease: ObjectStoreLease | None = None,
    after_shards: Callable[[Store], None] | None = None,
) -> DirectSaveContext:
    """The one place the harness builds a direct save's context (this world's bucket, the
    production lease and fenced pointer write)."""
    lease = lease if lease is not None else held_lease(world)
    return DirectSaveContext(
        store=lease.store,
        plan=plan,
        control=control_payloads(plan, salt),
        write_shards=SimShardWriter(salt, after_shards),
        lease=lease,
        write_pointer=_fenced,
        writer={"host": lease.record.host, "pid": 1, "owner": lease.owner},
        lease_generation=lease.generation,
    )


def _fenced(store: Store, lease: Any, path: str, data: bytes) -> None:
    assert isinstance(store, ObjectStore)
    write_pointer_fenced(store, lease, path, data)


def _lease_host(world: SimWorld) -> str | None:
    found = read_object_lease(root_store(world))
    return None if found is None else found[0].host


def commit_directly(world: SimWorld, plan: DirectPlan, salt: str) -> None:
    """Run the production machine to commit ``plan`` (the setup's earlier saves)."""
    ctx = direct_context(world, plan, salt=salt)
    shipped_machine("direct_save").recover(ctx).raise_for_failure()


def bucket_objects(world: SimWorld) -> dict[str, bytes]:
    """Every object under the root (key relative to the root -> bytes)."""
    base = ROOT_PREFIX + "/"
    return {k[len(base) :]: d for k, (d, _) in world.bucket.objects.items() if k.startswith(base)}


def committed_iterations(objects: Mapping[str, bytes]) -> set[str]:
    """``iter_N`` names holding a manifest."""
    return {p.split("/", 1)[0] for p in objects if p.endswith("/" + MANIFEST_NAME)}


@attrs.frozen
class DirectRecovery:
    """What the restarted process did and saw.

    Attributes:
        retry: the retried save's result; retry_context: its context.
        seen: the root's objects as the retry found them.
        retry_io: the bucket operations the retry performed.
    """

    retry: RunResult
    retry_context: DirectSaveContext
    seen: dict[str, bytes]
    retry_io: tuple[IoRecord, ...]


@attrs.define
class DirectScenario:
    """Save ``plan`` after the setup committed ``previous`` (each at ``world_size``).

    Attributes:
        previous: iterations committed by the production machine in the setup.
        partial_setup: the setup leaves partial objects of ``plan``'s iteration (a crashed
            save's shards of other bytes, an orphan control generation; no manifest).
        manifest_setup: the setup commits ``plan``'s manifest but latest still names the
            newest of ``previous`` (a crash between the commit and latest).
        latest_setup: ... and latest too (an ambiguous latest PUT that took effect).
        takeover_during: another writer takes the lease over after the shards are written.
        drift: the run saves the iteration from another model (another state layout) than
            the setup committed.
        expect_failure: the run (and its retry) must fail closed with this error type name.
        machine_factory: the machine (tests swap in deliberately broken ones).
    """

    name: str
    plan: DirectPlan
    previous: tuple[int, ...] = ()
    partial_setup: bool = False
    manifest_setup: bool = False
    latest_setup: bool = False
    takeover_during: bool = False
    drift: bool = False
    expect_failure: str | None = None
    inject_faults: bool = True
    machine_factory: Callable[[], Machine] = attrs.field(
        default=lambda: shipped_machine("direct_save")
    )
    machine: str = "direct_save"
    recovery_may_fail: bool = False

    @property
    def iter_dir(self) -> str:
        return iter_dirname(self.plan.iteration)

    @property
    def run_plan(self) -> DirectPlan:
        if not self.drift:
            return self.plan
        return attrs.evolve(self.plan, layout=("xxh3_128:other-model", "xxh3_128:other-optim"))

    def setup(self, world: SimWorld) -> None:
        take_lease(world, WRITER_A)
        for iteration in self.previous:
            commit_directly(world, attrs.evolve(self.plan, iteration=iteration), SALT_SETUP)
        if self.manifest_setup:
            ctx = direct_context(world, self.plan)
            machine = shipped_machine("direct_save")
            machine.run(ctx, start="planned", crash=None)  # the whole save ...
            if not self.latest_setup:  # ... then latest put back (a crash before it)
                store = root_store(world)
                if self.previous:
                    from statecraft.checkpoint.kernel.layout import format_latest

                    store.write_atomic(LATEST_POINTER, format_latest(max(self.previous)))
                else:
                    store.delete(LATEST_POINTER)
        if self.partial_setup:
            store = root_store(world)
            leftovers = shard_objects(self.plan, "crashed")
            for path in sorted(leftovers)[:3]:
                store.write_atomic(path, leftovers[path])
            store.write_atomic(
                f"{self.iter_dir}/.posttrain/generations/00000001/trainer.pt", b"orphan"
            )

    def _context(self, world: SimWorld) -> DirectSaveContext:
        after = None
        if self.takeover_during:

            def after(store: Store) -> None:
                take_lease(world, WRITER_B)

        return direct_context(world, self.run_plan, after_shards=after)

    def run(self, world: SimWorld, *, crash: CrashPlan | None) -> RunResult:
        return self.machine_factory().recover(self._context(world), crash=crash, gate=world.gate)

    def recover(self, world: SimWorld) -> DirectRecovery:
        seen = bucket_objects(world)
        if self.takeover_during and _lease_host(world) == WRITER_B:
            lease = stale_lease(world, WRITER_A)  # the stale process goes on with its lease
        else:
            lease = take_lease(world, WRITER_A)  # a restarted process takes the lease over
        gate = IoGate()
        world.rearm(gate)
        ctx = direct_context(world, self.run_plan, lease=lease)  # the same save again
        retry = self.machine_factory().recover(ctx)
        return DirectRecovery(retry, ctx, seen, tuple(gate.log))


def manifest_bytes_for(ctx: DirectSaveContext) -> bytes:
    """The manifest ``ctx`` would commit (for the broken variants)."""
    return planned_manifest(ctx).encode()


def direct_save_scenarios() -> list[DirectScenario]:
    """The scenarios ``statecraft crashcheck`` runs for the direct save (2 simulated ranks,
    two DCP components, trainer.pt and data.pt)."""
    plan = DirectPlan(
        iteration=4,
        world_size=2,
        control=("trainer.pt", "data.pt"),
        layout=("xxh3_128:model-layout", "xxh3_128:optim-layout"),
    )
    return [
        DirectScenario("first-save-empty-root", plan),
        DirectScenario("save-after-previous", plan, previous=(2,)),
        DirectScenario("retry-over-partial-leftovers", plan, previous=(2,), partial_setup=True),
        DirectScenario(
            "manifest-committed-latest-behind", plan, previous=(2,), manifest_setup=True
        ),
        DirectScenario(
            "committed-latest-confirmed",
            plan,
            previous=(2,),
            manifest_setup=True,
            latest_setup=True,
            inject_faults=False,
        ),
        DirectScenario(
            "stale-writer-lease-taken-over",
            plan,
            previous=(2,),
            takeover_during=True,
            expect_failure="WriterLeaseError",
            recovery_may_fail=True,
        ),
        DirectScenario(
            "plan-drift-refused",
            plan,
            previous=(2,),
            manifest_setup=True,
            drift=True,
            expect_failure="PlanDriftError",
            inject_faults=False,
        ),
    ]
