"""The deliberately wrong DCP saves ``specs/dcp_save.toml`` declares (``[[broken]]``): each
returns the scenarios that run one wrong variant, and ``statecraft crashcheck --broken`` fails
unless exploring them violates the guarantees the spec says it must."""

from __future__ import annotations

import io
import tomllib
import warnings
from typing import Any

import attrs
import torch
import torch.distributed.checkpoint as dcp

from statecraft.checkpoint.kernel.machines import load_machine, machine_bindings
from statecraft.checkpoint.resume import bindings as resume_tx
from statecraft.checkpoint.save import dcp_bindings as dcp_tx
from statecraft.checkpoint.save.dcp_bindings import DcpSaveContext
from statecraft.engine import Bindings, Machine, parse_table
from statecraft.proofs.save.broken import FsProxy, with_effects, with_fs
from statecraft.proofs.save.dcp_scenarios import (
    FILES_PER_RANK,
    DcpSaveScenario,
    dcp_save_scenarios,
)
from statecraft.resources import machine_path
from statecraft.storage import LocalStore
from statecraft.writers.dcp_failures import unwrap_checkpoint_exception
from statecraft.writers.dcp_storage import METADATA_NAME
from statecraft.writers.dcp_store_writer import StoreStorageWriter

__all__ = [
    "dcp_committed_control_rewritten",
    "dcp_no_directory_fsync",
    "dcp_pointer_before_manifest",
    "dcp_resume_oldest_first",
    "dcp_retry_skips_the_pointer",
    "dcp_shards_reported_before_durable",
    "unsettled_shards_machine",
]


def _scenario(name: str, **changes: Any) -> DcpSaveScenario:
    (found,) = [s for s in dcp_save_scenarios() if s.name == name]
    return attrs.evolve(found, name=f"broken-{name}", **changes)


def _edited_table(edit: Any) -> Machine:
    data = tomllib.loads(machine_path("dcp_save").read_text())
    edit(data)
    return Machine(parse_table(data, source="broken dcp_save table"), machine_bindings("dcp_save"))


def _pointer_first() -> Machine:
    def swap(data: dict[str, Any]) -> None:
        for t in data["transitions"]:
            if t["do"] == "commit_manifest":
                t["do"] = "advance_latest"
            elif t["do"] == "advance_latest":
                t["do"] = "commit_manifest"

    return _edited_table(swap)


def dcp_pointer_before_manifest() -> list[DcpSaveScenario]:
    """latest_checkpoint.txt advanced before the manifest is committed."""
    return [_scenario("dcp-next-save", machine_factory=_pointer_first)]


# ------------------------------------------------------- shards reported before durable
class _UnsettledRank(StoreStorageWriter):
    """Broken: another rank's writer whose shards are reported before they are durable (it
    never settles its store), while the coordinator writes .metadata through its own."""

    def __init__(self, store: LocalStore, coordinator: LocalStore, path: str) -> None:
        super().__init__(store, path, files_per_rank=FILES_PER_RANK)
        self.coordinator = coordinator

    def write_data(self, plan: Any, planner: Any) -> Any:
        store: Any = self.store
        settle = store.settle
        store.settle = lambda **_: None
        try:
            return super().write_data(plan, planner)
        finally:
            store.settle = settle

    def finish(self, metadata: Any, results: Any) -> None:
        shards, self.store = self.store, self.coordinator
        try:
            super().finish(metadata, results)
        finally:
            self.store = shards


class _NoFileFsync(FsProxy):
    def fsync(self, handle: int) -> None:
        """Broken: the shard's bytes are not durable when the rank reports them."""


class _NoDirectoryFsync(FsProxy):
    def fsync_dir(self, path: str) -> None:
        """Broken: renames and creates are never made durable."""


def _write_shards_unsettled(ctx: DcpSaveContext) -> None:
    store = ctx.store
    assert isinstance(store, LocalStore)
    # the shard-writing rank's own store, reporting its shards before they are durable
    rank = LocalStore(store.root, fs=_NoFileFsync(store.fs))
    prefix = ctx.iter_dir + "/"
    for name in ctx.bulk_entries:
        writer = _UnsettledRank(rank, store, ctx.path(name))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                dcp.save(ctx.staged[name], storage_writer=writer, no_dist=True)
        except BaseException as exc:  # DCP wraps the simulated crash
            raise unwrap_checkpoint_exception(exc) from None
        ctx.records.update({p[len(prefix) :]: r for p, r in writer.records.items()})
        assert f"{ctx.path(name)}/{METADATA_NAME}" in writer.records


def unsettled_shards_machine() -> Machine:
    """The shipped dcp_save machine whose shard-writing rank never makes its shards durable
    before reporting them."""
    bindings = machine_bindings("dcp_save").merged(
        Bindings(effects={"write_shards": _write_shards_unsettled})
    )
    return Machine(load_machine("dcp_save").table, bindings)


def dcp_shards_reported_before_durable() -> list[DcpSaveScenario]:
    """A rank that reports its shards before settling them (as a second store instance
    would): the manifest survives a power loss that took shard bytes."""
    return [
        DcpSaveScenario(
            "broken-unsettled-shards",
            target=2,
            with_data=False,
            machine_factory=unsettled_shards_machine,
            inject_faults=False,
        )
    ]


def dcp_no_directory_fsync() -> list[DcpSaveScenario]:
    """Renames and creates never directory-fsynced: power loss takes an acknowledged save."""
    return [_scenario("dcp-first-save", store_factory=with_fs(_NoDirectoryFsync))]


# --------------------------------------------------------------- the retry and the resume
def _rewrite_control_then_reconcile(ctx: DcpSaveContext) -> None:
    """Broken: the retry refreshes the committed control state before reconciling."""
    dcp_tx.stage_shards(ctx)
    for name in ctx.control_entries:
        buffer = io.BytesIO()
        torch.save(ctx.staged[name], buffer)
        ctx.store.write_atomic(ctx.path(name), buffer.getvalue())
    dcp_tx.reconcile_committed(ctx)


def dcp_committed_control_rewritten() -> list[DcpSaveScenario]:
    """A retry at a committed iteration that rewrites its trainer.pt with the retry's state:
    the committed bytes change."""
    factory = with_effects("dcp_save", reconcile_committed=_rewrite_control_then_reconcile)
    return [_scenario("dcp-retry-commits-pointer-only", machine_factory=factory)]


def _reconcile_to_done() -> Machine:
    def done(data: dict[str, Any]) -> None:
        for t in data["transitions"]:
            if t["do"] == "reconcile_committed":
                t["to"] = "committed"

    return _edited_table(done)


def dcp_retry_skips_the_pointer() -> list[DcpSaveScenario]:
    """A retry that finds the iteration committed takes the save as done without completing
    latest_checkpoint.txt."""
    return [_scenario("dcp-retry-commits-pointer-only", machine_factory=_reconcile_to_done)]


def _oldest_first(ctx: Any) -> None:
    resume_tx.list_candidates(ctx)
    ctx.candidates.reverse()


def dcp_resume_oldest_first() -> list[DcpSaveScenario]:
    """A resume that tries the oldest checkpoint first: with two committed before the save it
    adopts the older one."""
    return [
        DcpSaveScenario(
            "broken-dcp-third-save",
            target=6,
            previous=(2, 4),
            with_data=False,
            resume_factory=with_effects("resume", list_candidates=_oldest_first),
            inject_faults=False,
        )
    ]
