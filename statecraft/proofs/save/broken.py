"""The deliberately wrong full saves ``specs/save.toml`` declares (``[[broken]]``): each returns
the scenarios that run one wrong variant, and ``statecraft crashcheck --broken`` fails unless
exploring them violates the guarantees the spec says it must. Each breaks one real rule of the
save (an order, an fsync, a check); ``tests/save/test_crash_save.py`` and
``tests/engine/test_crash_blind_spots.py`` assert the specific messages.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from typing import Any

import attrs

from statecraft.checkpoint.kernel.layout import LATEST_POINTER
from statecraft.checkpoint.kernel.machines import load_machine, machine_bindings
from statecraft.checkpoint.resume import bindings as resume_tx
from statecraft.checkpoint.save import bindings as save_tx
from statecraft.engine import Bindings, Machine, parse_table
from statecraft.proofs.save.scenarios import CHECKPOINTS_ROOT, SaveScenario, save_scenarios
from statecraft.resources import machine_path
from statecraft.storage import LocalStore, SimWorld
from statecraft.storage.base import Store

__all__ = [
    "FsProxy",
    "committed_rewritten_identically",
    "committed_rewritten_with_fresh_payloads",
    "exclusive_create_by_rename",
    "fsync_error_retried_and_trusted",
    "manifest_omits_optimizer",
    "no_directory_fsync",
    "no_file_fsync",
    "pointer_before_control",
    "pointer_before_manifest",
    "pointer_replaced_by_delete_then_create",
    "resume_adopting_unverified",
    "resume_memoized_across_disk_loss",
    "retry_skips_the_pointer",
    "scenario",
    "swapped_save_table",
    "with_effects",
    "with_fs",
]


def scenario(name: str, **changes: Any) -> SaveScenario:
    """The shipped save scenario ``name`` with some of its factories swapped for broken ones."""
    (found,) = [s for s in save_scenarios() if s.name == name]
    return attrs.evolve(found, name=f"broken-{name}", **changes)


def with_effects(machine: str, **effects: Callable[[Any], None]) -> Callable[[], Machine]:
    """A factory of the shipped ``machine`` with some effects replaced."""

    def build() -> Machine:
        base = load_machine(machine)
        return Machine(base.table, base.bindings.merged(Bindings(effects=effects)))

    return build


# ------------------------------------------------------------------------ the wrong order
def swapped_save_table(a: str, b: str) -> Machine:
    """The shipped save table with the effects ``a`` and ``b`` run in each other's place."""
    data = tomllib.loads(machine_path("save").read_text())
    for t in data["transitions"]:
        if t["do"] == a:
            t["do"] = b
        elif t["do"] == b:
            t["do"] = a
    return Machine(parse_table(data, source="broken save table"), machine_bindings("save"))


def pointer_before_manifest() -> list[SaveScenario]:
    """latest_checkpoint.txt advanced before the manifest is committed: a crash in between
    leaves latest naming an iteration without a commit."""
    factory = lambda: swapped_save_table("commit_manifest", "advance_latest")  # noqa: E731
    return [scenario("next-save", machine_factory=factory)]


def pointer_before_control() -> list[SaveScenario]:
    """latest_checkpoint.txt advanced before trainer.pt (and data.pt) are written."""
    factory = lambda: swapped_save_table("write_control", "advance_latest")  # noqa: E731
    return [scenario("next-save", machine_factory=factory)]


# --------------------------------------------------------------------- the missing fsync
class FsProxy:
    """A filesystem that forwards to the simulated one, for broken variants to override."""

    def __init__(self, fs: Any) -> None:
        self._fs = fs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)


class _NoDirectoryFsync(FsProxy):
    def fsync_dir(self, path: str) -> None:
        """Broken: renames and creates are never made durable."""


class _NoFileFsync(FsProxy):
    def fsync(self, handle: int) -> None:
        """Broken: file data is never made durable."""


class _RetryFsyncAndTrust(FsProxy):
    def fsync(self, handle: int) -> None:
        """Broken: an fsync error is retried and the second success trusted."""
        try:
            self._fs.fsync(handle)
        except OSError:
            self._fs.fsync(handle)


def with_fs(wrapper: Callable[[Any], Any]) -> Callable[[SimWorld], Store]:
    """A store factory over the world's filesystem wrapped in ``wrapper``."""
    return lambda world: LocalStore(CHECKPOINTS_ROOT, fs=wrapper(world.fs))


def no_directory_fsync() -> list[SaveScenario]:
    """Renames and creates never directory-fsynced: power loss takes an acknowledged save."""
    return [scenario("next-save", store_factory=with_fs(_NoDirectoryFsync))]


def no_file_fsync() -> list[SaveScenario]:
    """Files renamed into place without fsync: after power loss latest names lost bytes."""
    return [scenario("next-save", store_factory=with_fs(_NoFileFsync))]


def fsync_error_retried_and_trusted() -> list[SaveScenario]:
    """A failed fsync retried and the retry trusted (fsyncgate): caught by fault injection
    followed by power loss."""
    return [scenario("next-save", store_factory=with_fs(_RetryFsyncAndTrust))]


# ---------------------------------------------------------------------- the skipped check
def _commit_without_optimizer(ctx: Any) -> None:
    """Broken: the manifest leaves optim.pt out of the record (and of the plan it commits)."""
    ctx.records.pop("optim.pt", None)
    ctx.plan = attrs.evolve(ctx.plan, files=tuple(f for f in ctx.plan.files if f != "optim.pt"))
    save_tx.commit_manifest(ctx)


def manifest_omits_optimizer() -> list[SaveScenario]:
    """A commit whose manifest omits optim.pt: latest names an incomplete checkpoint."""
    factory = with_effects("save", commit_manifest=_commit_without_optimizer)
    return [scenario("next-save", machine_factory=factory)]


def _delete_then_create_pointer(ctx: Any) -> None:
    ctx.store.delete(LATEST_POINTER)
    save_tx.advance_latest(ctx)


def pointer_replaced_by_delete_then_create() -> list[SaveScenario]:
    """latest_checkpoint.txt replaced by delete then create, not by atomic rename: a crash in
    between leaves no pointer."""
    factory = with_effects("save", advance_latest=_delete_then_create_pointer)
    return [scenario("next-save", machine_factory=factory)]


def _rewrite_committed_identically(ctx: Any) -> None:
    manifest = save_tx.read_manifest(ctx.store, ctx.plan.iteration)
    for name in manifest.files:
        path = ctx.path(name)
        ctx.store.write_atomic(path, ctx.store.read_bytes(path))  # same bytes, new inode
    save_tx.reconcile_committed(ctx)


def committed_rewritten_identically() -> list[SaveScenario]:
    """A retry that rewrites a committed iteration's files with their own bytes: only the I/O
    trace can tell (SAVE-IMMUTABLE cannot)."""
    factory = with_effects("save", reconcile_committed=_rewrite_committed_identically)
    return [scenario("retry-commits-pointer-only", machine_factory=factory)]


def _rewrite_committed_with_fresh_payloads(ctx: Any) -> None:
    for name in ctx.plan.files:
        ctx.writer.write(ctx.store, ctx.path(name), ctx.payloads[name]())
    save_tx.reconcile_committed(ctx)


def committed_rewritten_with_fresh_payloads() -> list[SaveScenario]:
    """A retry that rewrites a committed iteration with its own (differently salted)
    payloads: the committed bytes change."""
    factory = with_effects("save", reconcile_committed=_rewrite_committed_with_fresh_payloads)
    return [scenario("retry-commits-pointer-only", machine_factory=factory)]


class RenamingStore(LocalStore):
    def create_exclusive(self, path: str, data: bytes) -> Any:
        """Broken: 'exclusive' create by rename, which replaces an existing name."""
        return self.write_atomic(path, data)


def exclusive_create_by_rename() -> list[SaveScenario]:
    """The manifest published by rename (which replaces an existing name), not by link."""
    return [
        scenario(
            "next-save", store_factory=lambda world: RenamingStore(CHECKPOINTS_ROOT, fs=world.fs)
        )
    ]


def _reconcile_to_done() -> Machine:
    data = tomllib.loads(machine_path("save").read_text())
    for t in data["transitions"]:
        if t["do"] == "reconcile_committed":
            t["to"] = "committed"
    return Machine(parse_table(data, source="broken save table"), machine_bindings("save"))


def retry_skips_the_pointer() -> list[SaveScenario]:
    """A retry that finds the iteration committed takes the save as done without completing
    latest_checkpoint.txt: the pointer keeps naming the previous checkpoint."""
    return [scenario("retry-commits-pointer-only", machine_factory=_reconcile_to_done)]


# ------------------------------------------------------------------ the resume side of it
def _adopt_unverified(ctx: Any) -> None:
    """Broken: the newest iter dir is adopted if its trainer.pt loads; no manifest check."""
    from statecraft.checkpoint.state import TrainerState

    iteration = ctx.candidates.pop(0)
    try:
        ctx.chosen = resume_tx.verify_checkpoint(ctx.store, iteration, level="size")
    except Exception:
        name = f"iter_{iteration:09d}"
        payload = ctx.writer.read(ctx.store, f"{name}/trainer.pt", mmap=False)
        trainer = TrainerState.from_payload(payload, source=name)
        ctx.chosen = resume_tx.VerifiedCheckpoint(
            ctx.store,
            iteration,
            name,
            trainer,
            None,
            {
                "model": ctx.writer.read(ctx.store, f"{name}/model.pt"),
                "optimizer": ctx.writer.read(ctx.store, f"{name}/optim.pt"),
            },
        )


def resume_adopting_unverified() -> list[SaveScenario]:
    """A resume that checks sizes only, and adopts an iteration without a manifest when its
    trainer.pt loads: it picks up the half-written one a crashed save left, and the committed
    one whose model.pt has a flipped bit."""
    factory = with_effects("resume", verify_next_candidate=_adopt_unverified)
    return [scenario(name, resume_factory=factory) for name in ("next-save", "newest-is-corrupt")]


def resume_memoized_across_disk_loss() -> list[SaveScenario]:
    """A resume that remembers, per checkpoint path, the catalog and the checkpoint it
    verified, and trusts the memo instead of the disk: after the node and its disk are lost it
    adopts the remembered checkpoint instead of starting fresh."""
    catalogs: dict[str, list[int]] = {}
    verified: dict[tuple[str, int], Any] = {}

    def list_candidates(ctx: Any) -> None:
        key = str(CHECKPOINTS_ROOT)
        if key in catalogs:
            ctx.candidates = list(catalogs[key])
            return
        resume_tx.list_candidates(ctx)
        if ctx.candidates:
            catalogs[key] = list(ctx.candidates)

    def verify_next_candidate(ctx: Any) -> None:
        key = (str(CHECKPOINTS_ROOT), ctx.candidates[0])
        if key in verified:
            ctx.candidates.pop(0)
            ctx.chosen = verified[key]
            return
        resume_tx.verify_next_candidate(ctx)
        verified[key] = ctx.chosen

    factory = with_effects(
        "resume", list_candidates=list_candidates, verify_next_candidate=verify_next_candidate
    )
    return [scenario("next-save", resume_factory=factory)]
