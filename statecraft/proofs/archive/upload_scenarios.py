"""Crash scenarios of the ``upload`` machine, run by ``tests/`` and ``statecraft crashcheck``.

Each scenario runs the production upload machine with its production bindings over the
production ``LocalStore`` (the checkpoints root of a :class:`~statecraft.storage.SimWorld`
disk, whose full checkpoints the setup saved with the production save machine) and the
world's :class:`~statecraft.storage.objects.SimBucket` (it survives every crash kind; node
loss leaves only it). Recovery is what a restarted training process does: (optionally) a
retention pass with ``require_uploaded`` over the disk as the crash left it, then the retry of
the upload; what each step saw and did is recorded for
:mod:`statecraft.proofs.archive.upload_checks`.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from statecraft.checkpoint.archive.destination import ArchiveDestination
from statecraft.checkpoint.archive.marker import UploadedMarker, write_marker
from statecraft.checkpoint.archive.upload_bindings import SMALL_FILE_BYTES, UploadContext
from statecraft.checkpoint.retention.policies import LatestN
from statecraft.checkpoint.retention.run import RetentionPlan, run_retention
from statecraft.engine import CrashPlan, Machine, RunResult
from statecraft.engine.crash import IoGate, IoRecord
from statecraft.proofs.oracle import CHECKPOINTS_ROOT, iteration_name
from statecraft.proofs.save.scenarios import save_context, shipped_machine
from statecraft.proofs.training import SALT_SETUP, preserved_rng
from statecraft.storage.sim import SimWorld

__all__ = [
    "REMOTE_PREFIX",
    "RemoteObjectSeen",
    "UploadRecovery",
    "UploadScenario",
    "legacy_receipt",
    "stale_remote_object",
    "upload_context",
    "upload_scenarios",
]

#: the checkpoints-root prefix the scenarios archive to (mirrors CHECKPOINTS_ROOT)
REMOTE_PREFIX = CHECKPOINTS_ROOT.strip("/").split("/", 1)[1]


def upload_context(
    world: SimWorld, iteration: int, *, hash_limit: int = SMALL_FILE_BYTES
) -> UploadContext:
    """The one place the harness builds an upload's context (this world's disk and bucket)."""
    return UploadContext(
        store=world.local_store(CHECKPOINTS_ROOT),
        iteration=iteration,
        destination=ArchiveDestination(world.bucket, REMOTE_PREFIX),
        hash_limit=hash_limit,
    )


@attrs.frozen
class RemoteObjectSeen:
    """An object as a run found it: size, the sha256 in its metadata (``""``: none), bytes."""

    size: int
    sha256: str
    data: bytes


def remote_objects(world: SimWorld) -> dict[str, RemoteObjectSeen]:
    """Every object of the world's bucket as it stands."""
    bucket = world.bucket
    return {
        key: RemoteObjectSeen(len(data), bucket.sha256.get(key, ""), data)
        for key, (data, _) in bucket.objects.items()
    }


@attrs.frozen
class UploadRecovery:
    """What the restarted process did and saw.

    Attributes:
        retained: the checkpoints root after the recovery's retention pass (``None``: the
            scenario runs none), relative path -> bytes.
        retry: the retried upload's result.
        retry_context: its context (counts, inventory, receipt).
        retry_seen: the checkpoints root as the retry found it (relative path -> bytes).
        remote_before: the bucket as the retry found it.
        retry_io: the store and bucket operations the retry performed.
    """

    retained: dict[str, bytes] | None
    retry: RunResult
    retry_context: UploadContext
    retry_seen: dict[str, bytes]
    remote_before: dict[str, RemoteObjectSeen]
    retry_io: tuple[IoRecord, ...]


@attrs.define
class UploadScenario:
    """Upload ``target`` after the full checkpoints ``previous`` were committed.

    Attributes:
        hash_limit: files up to this size are hashed (0: only the control files; bulk then
            relies on size alone).
        uploaded_before: run a complete upload of ``target`` in the setup (the run then finds
            its receipt).
        retention_model_last: > 0: the recovery first runs retention with ``require_uploaded``
            and ``keep_model_last`` of this (the saved iteration: the newest of ``previous``).
        setup_extra: applied to the world after the setup's commits (then made durable).
        machine_factory: the upload machine (tests swap in deliberately broken ones).
    """

    name: str
    target: int
    previous: tuple[int, ...] = (2, 4)
    hash_limit: int = SMALL_FILE_BYTES
    uploaded_before: bool = False
    retention_model_last: int = 0
    setup_extra: Callable[[SimWorld], None] | None = None
    inject_faults: bool = True
    machine_factory: Callable[[], Machine] = attrs.field(default=lambda: shipped_machine("upload"))
    machine: str = "upload"
    recovery_may_fail: bool = False

    @property
    def iter_dir(self) -> str:
        return iteration_name(self.target)

    @property
    def remote_prefix(self) -> str:
        return f"{REMOTE_PREFIX}/{self.iter_dir}"

    def setup(self, world: SimWorld) -> None:
        store = world.local_store(CHECKPOINTS_ROOT)
        for iteration in self.previous:
            ctx = save_context(store, iteration, with_data=False, salt=SALT_SETUP)
            shipped_machine("save").recover(ctx).raise_for_failure()
        if self.uploaded_before:
            first = upload_context(world, self.target, hash_limit=self.hash_limit)
            shipped_machine("upload").recover(first).raise_for_failure()
        if self.setup_extra is not None:
            self.setup_extra(world)

    def run(self, world: SimWorld, *, crash: CrashPlan | None) -> RunResult:
        ctx = upload_context(world, self.target, hash_limit=self.hash_limit)
        return self.machine_factory().recover(ctx, crash=crash, gate=world.gate)

    def recover(self, world: SimWorld) -> UploadRecovery:
        with preserved_rng():
            retained = None
            if self.retention_model_last > 0:
                plan = RetentionPlan(
                    model=LatestN(self.retention_model_last), require_uploaded=True
                )
                world.rearm(IoGate())
                store = world.local_store(CHECKPOINTS_ROOT)
                run_retention(store, plan, saved_iteration=max(self.previous), lease=None)
                retained = world.fs.tree(CHECKPOINTS_ROOT)
            retry_seen = world.fs.tree(CHECKPOINTS_ROOT)
            remote_before = remote_objects(world)
            gate = IoGate()
            world.rearm(gate)
            ctx = upload_context(world, self.target, hash_limit=self.hash_limit)
            retry = self.machine_factory().recover(ctx)  # the retry runs the same code
        return UploadRecovery(retained, retry, ctx, retry_seen, remote_before, tuple(gate.log))


def stale_remote_object(iteration: int, name: str, data: bytes) -> Callable[[SimWorld], None]:
    """A foreign object of other bytes (no sha256 metadata) already at ``iter_N/<name>``'s key:
    a same-name skip would keep it."""

    def apply(world: SimWorld) -> None:
        world.bucket.tamper(f"{REMOTE_PREFIX}/{iteration_name(iteration)}/{name}", data)

    return apply


def preuploaded_object(iteration: int, name: str) -> Callable[[SimWorld], None]:
    """``iter_N/<name>`` already uploaded (by an earlier, interrupted upload)."""

    def apply(world: SimWorld) -> None:
        path = f"{iteration_name(iteration)}/{name}"
        store = world.local_store(CHECKPOINTS_ROOT)
        world.bucket.upload_from(f"{REMOTE_PREFIX}/{path}", store, path)

    return apply


def legacy_receipt(iteration: int) -> Callable[[SimWorld], None]:
    """A one-line ``.uploaded`` of an earlier release in ``iter_N`` (binds nothing: redone)."""

    def apply(world: SimWorld) -> None:
        store = world.local_store(CHECKPOINTS_ROOT)
        store.write_atomic(f"{iteration_name(iteration)}/.uploaded", b"uploaded\n")

    return apply


def _both(*steps: Callable[[SimWorld], None]) -> Callable[[SimWorld], None]:
    def apply(world: SimWorld) -> None:
        for step in steps:
            step(world)

    return apply


def foreign_receipt(iteration: int) -> Callable[[SimWorld], None]:
    """A v1 receipt of ``iter_N`` binding another bucket (redone for this destination)."""

    def apply(world: SimWorld) -> None:
        from statecraft.checkpoint.archive.inventory import ArchiveEntry
        from statecraft.checkpoint.archive.marker import DestinationRecord

        store = world.local_store(CHECKPOINTS_ROOT)
        marker = UploadedMarker(
            kind="checkpoint",
            iteration=iteration,
            destination=DestinationRecord("elsewhere:9000", "other-bucket", "x/iter"),
            files=(ArchiveEntry("model.pt", 1, None),),
        )
        write_marker(store, iteration_name(iteration), marker)

    return apply


def upload_scenarios() -> list[UploadScenario]:
    """The scenarios ``statecraft crashcheck`` runs for the upload machine (tiny checkpoints:
    four files each)."""
    return [
        UploadScenario("fresh-upload", target=4),
        UploadScenario(
            "bulk-unhashed-over-stale-and-partial-remote",
            target=4,
            hash_limit=0,
            setup_extra=_both(
                stale_remote_object(4, "model.pt", b"stale bytes of another run"),
                preuploaded_object(4, "optim.pt"),
            ),
        ),
        UploadScenario(
            "legacy-receipt-redone", target=4, setup_extra=legacy_receipt(4), inject_faults=False
        ),
        UploadScenario(
            "receipt-of-another-bucket-redone",
            target=4,
            setup_extra=foreign_receipt(4),
            inject_faults=False,
        ),
        UploadScenario("already-uploaded-settles", target=4, uploaded_before=True),
        UploadScenario(
            "older-checkpoint-then-retention-require-uploaded",
            target=2,
            retention_model_last=1,
        ),
    ]
