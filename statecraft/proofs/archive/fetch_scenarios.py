"""Crash scenarios of the ``fetch`` machine, run by ``tests/`` and ``statecraft crashcheck``.

The setup writes one partial artifact (the production artifact machine) and one full checkpoint
(the production save machine) on a source root of a :class:`~statecraft.storage.SimWorld` disk
and archives both into the world's simulated bucket the way upload and publish lay them out
(payloads, an artifact's archive declaration with every file's size and sha256, the commit record
last). The run is the production fetch machine over the production ``LocalStore`` rooted at
``/dst``; recovery is what a restarted ``statecraft archive fetch`` does: run the fetch again.
What the checks compare against is :attr:`FetchScenario.expected`, the archived files' bytes as
the setup read them from the source tree (no production decoding).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import attrs

from statecraft.checkpoint.archive.declaration import DECLARATION_NAME, ArchiveDeclaration
from statecraft.checkpoint.archive.fetch_bindings import FetchContext
from statecraft.checkpoint.archive.inventory import ArchiveEntry
from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.engine import CrashPlan, Machine, RunResult
from statecraft.engine.crash import IoGate, IoRecord
from statecraft.proofs.artifacts.scenarios import artifact_context
from statecraft.proofs.save.scenarios import save_context, shipped_machine
from statecraft.proofs.training import SALT_SETUP
from statecraft.storage.sim import SimWorld

__all__ = [
    "ARTIFACT_PREFIX",
    "CHECKPOINT_PREFIX",
    "DST_ROOT",
    "FetchRecovery",
    "FetchScenario",
    "fetch_scenarios",
]

DST_ROOT = "/dst"
_SRC = "/src/run"
ARTIFACT_PREFIX = "proj/run/checkpoint_artifacts"
CHECKPOINT_PREFIX = "proj/run/checkpoints"
_ARTIFACT_ITER = 4
_CHECKPOINT_ITER = 2
_ARTIFACT_MANIFEST = ".posttrain-checkpoint-artifact.json"
_MANIFEST = ".posttrain-manifest.json"


@attrs.frozen
class FetchRecovery:
    """What the restarted fetch did: its result, its store operations, and the destination
    as it found it."""

    retry: RunResult
    retry_io: tuple[IoRecord, ...]
    seen: dict[str, bytes]


def _archive(world: SimWorld, root: str, iteration: int, prefix: str, *, declare: bool):
    """Put every file of ``root/iter_N`` into the bucket under ``prefix/iter_N`` (commit
    record last, an artifact's declaration first); returns the archived tree."""
    directory = f"{root}/{iter_dirname(iteration)}"
    tree = world.fs.tree(directory)
    key = f"{prefix}/{iter_dirname(iteration)}"
    commit = _ARTIFACT_MANIFEST if declare else _MANIFEST
    if declare:
        files = [
            ArchiveEntry(p, len(d), hashlib.sha256(d).hexdigest()) for p, d in sorted(tree.items())
        ]
        declaration = ArchiveDeclaration.of(iteration, files)
        world.bucket.put(f"{key}/{DECLARATION_NAME}", declaration.encode())
    for path in sorted(p for p in tree if p != commit):
        world.bucket.put(f"{key}/{path}", tree[path])
    world.bucket.put(f"{key}/{commit}", tree[commit])
    return tree


@attrs.define
class FetchScenario:
    """Fetch the archived ``kind`` (``artifact`` or ``checkpoint``) to ``/dst/iter_N``.

    Attributes:
        tamper: a payload of the archive is replaced (same size, other bytes, no sha256
            metadata) before the fetch: it must never be placed.
        existing: ``/dst/iter_N`` exists before the fetch (it must stay as it was).
        leftover: staging leftovers of an earlier fetch lie beside the destination.
        machine_factory: the fetch machine (tests swap in deliberately broken ones).
        expected: the archived files (relative path -> bytes), filled by :meth:`setup`.
        existing_tree: what ``/dst/iter_N`` held before the fetch (``existing``).
        last_run: the last :meth:`run`'s result (``None`` when it crashed).
    """

    name: str
    kind: str = "artifact"
    tamper: bool = False
    existing: bool = False
    leftover: bool = False
    machine_factory: Callable[[], Machine] = attrs.field(default=lambda: shipped_machine("fetch"))
    machine: str = "fetch"
    recovery_may_fail: bool = False
    expected: dict[str, bytes] = attrs.field(factory=dict)
    existing_tree: dict[str, bytes] = attrs.field(factory=dict)
    last_run: RunResult | None = None

    @property
    def iteration(self) -> int:
        return _ARTIFACT_ITER if self.kind == "artifact" else _CHECKPOINT_ITER

    @property
    def dest_name(self) -> str:
        return iter_dirname(self.iteration)

    @property
    def remote_prefix(self) -> str:
        prefix = ARTIFACT_PREFIX if self.kind == "artifact" else CHECKPOINT_PREFIX
        return f"{prefix}/{self.dest_name}"

    def context(self, world: SimWorld) -> FetchContext:
        return FetchContext(
            bucket=world.bucket,
            remote_prefix=self.remote_prefix,
            dst=world.local_store(DST_ROOT),
            name=self.dest_name,
        )

    def setup(self, world: SimWorld) -> None:
        if self.kind == "artifact":
            store = world.local_store(f"{_SRC}/checkpoint_artifacts")
            ctx = artifact_context(
                store, _ARTIFACT_ITER, ("model",), with_data=False, salt=SALT_SETUP
            )
            shipped_machine("artifact").recover(ctx).raise_for_failure()
            root = f"{_SRC}/checkpoint_artifacts"
        else:
            store = world.local_store(f"{_SRC}/checkpoints")
            save = save_context(store, _CHECKPOINT_ITER, with_data=False, salt=SALT_SETUP)
            shipped_machine("save").recover(save).raise_for_failure()
            root = f"{_SRC}/checkpoints"
        prefix = ARTIFACT_PREFIX if self.kind == "artifact" else CHECKPOINT_PREFIX
        self.expected = _archive(
            world, root, self.iteration, prefix, declare=self.kind == "artifact"
        )
        if self.tamper:
            victim = "model.pt"
            genuine = self.expected[victim]
            forged = bytes(b ^ 0xFF for b in genuine[-16:])
            world.bucket.tamper(f"{self.remote_prefix}/{victim}", genuine[:-16] + forged)
        dst = world.local_store(DST_ROOT)
        if self.existing:
            dst.make_dirs(self.dest_name)
            dst.write_atomic(f"{self.dest_name}/notes.txt", b"the user's own directory\n")
            self.existing_tree = world.fs.tree(f"{DST_ROOT}/{self.dest_name}")
        if self.leftover:
            stale = f".{self.dest_name}.fetch-7-3/{self.dest_name}"
            dst.make_dirs(stale)
            dst.write_atomic(f"{stale}/model.pt", b"half a download")

    def run(self, world: SimWorld, *, crash: CrashPlan | None) -> RunResult:
        self.last_run = None
        self.last_run = self.machine_factory().recover(
            self.context(world), crash=crash, gate=world.gate
        )
        return self.last_run

    def recover(self, world: SimWorld) -> FetchRecovery:
        gate = IoGate()
        world.rearm(gate)
        seen = dict(world.fs.tree(f"{DST_ROOT}/{self.dest_name}"))
        retry = shipped_machine("fetch").recover(self.context(world))
        return FetchRecovery(retry, tuple(gate.log), seen)


def fetch_scenarios() -> list[FetchScenario]:
    """The scenarios ``statecraft crashcheck`` runs for the fetch machine (one tiny model:
    few files, few bytes)."""
    return [
        FetchScenario("fetch-artifact"),
        FetchScenario("fetch-checkpoint", kind="checkpoint"),
        FetchScenario("tampered-artifact-payload", tamper=True),
        FetchScenario("tampered-checkpoint-payload", kind="checkpoint", tamper=True),
        FetchScenario("existing-destination", existing=True),
        FetchScenario("staging-leftovers-swept", leftover=True),
    ]
