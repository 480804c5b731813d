"""The deliberately wrong write jobs ``specs/write_job.toml`` declares (``[[broken]]``): each
returns the scenarios that run one wrong variant, and ``statecraft crashcheck --broken`` fails
unless exploring them violates the guarantees the spec says it must.
``tests/async_writes/test_crash_write_job.py`` asserts the specific messages."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from typing import Any

import attrs

from statecraft.checkpoint.async_writes.staging import StagingBuffers
from statecraft.checkpoint.kernel.machines import load_machine, machine_bindings
from statecraft.checkpoint.kernel.retention_records import RetentionAction
from statecraft.checkpoint.retention import bindings as retention_tx
from statecraft.checkpoint.retention.run import run_retention
from statecraft.checkpoint.retention.scan import ScanKind
from statecraft.checkpoint.save import write_job_bindings as job_tx
from statecraft.checkpoint.save.write_job_bindings import WriteJobContext
from statecraft.engine import Bindings, Machine, parse_table
from statecraft.proofs.save.scenarios import save_context
from statecraft.proofs.save.write_job_scenarios import (
    WriteJobScenario,
    snapshot_payloads,
    write_job_scenarios,
)
from statecraft.proofs.training import SALT_RUN
from statecraft.resources import machine_path
from statecraft.storage.base import Store
from statecraft.storage.objects import SimBucket

__all__ = [
    "acknowledged_without_commit",
    "latest_before_commit",
    "latest_published_before_durable",
    "pending_validation_counted",
    "prune_before_durable",
    "retention_before_durable_save",
    "retention_keeps_none_whole",
    "swapped",
    "two_writes_in_flight",
    "upload_after_retention",
]


def _scenario(name: str, **changes: Any) -> WriteJobScenario:
    (found,) = [s for s in write_job_scenarios() if s.name == name]
    return attrs.evolve(found, name=f"broken-{name}", **changes)


def swapped(name: str, a: str, b: str, bindings: Bindings) -> Machine:
    """The shipped table ``name`` with the effects ``a`` and ``b`` in each other's place."""
    data = tomllib.loads(machine_path(name).read_text())
    for t in data["transitions"]:
        if t["do"] == a:
            t["do"] = b
        elif t["do"] == b:
            t["do"] = a
    return Machine(parse_table(data, source=f"broken {name} table"), bindings)


def _with_job_effects(**effects: Callable[[WriteJobContext], None]) -> Callable[[], Machine]:
    def build() -> Machine:
        base = load_machine("write_job")
        return Machine(base.table, base.bindings.merged(Bindings(effects=effects)))

    return build


# ------------------------------------------------------------------------ the wrong order
def _trusting_apply_retention(ctx: WriteJobContext) -> None:
    """Broken: retention trusts the table's order (no check that the save is durable)."""
    assert ctx.retention is not None
    ctx.retention_report = run_retention(
        ctx.save.store,
        ctx.retention,
        saved_iteration=ctx.iteration,
        lease=ctx.lease,
        machine=ctx.retention_machine,
    )


def prune_before_durable() -> Machine:
    """apply_retention before save_checkpoint, with a retention effect that does not refuse
    (what a table-ordering bug does when nothing else guards it)."""
    bindings = machine_bindings("write_job").merged(
        Bindings(effects={"apply_retention": _trusting_apply_retention})
    )
    return swapped("write_job", "save_checkpoint", "apply_retention", bindings)


def retention_before_durable_save() -> list[WriteJobScenario]:
    """Retention ordered before the save: its operations precede the durable publication of
    latest, and its crash states lack the new checkpoint."""
    return [_scenario("one-job-keep-model-1", machine_factory=prune_before_durable)]


def latest_before_commit() -> Machine:
    """The wrong save: latest_checkpoint.txt advanced before the manifest is committed."""
    return swapped("save", "commit_manifest", "advance_latest", machine_bindings("save"))


def latest_published_before_durable() -> list[WriteJobScenario]:
    """The background write publishes latest before the write is durable (committed): a crash
    in between leaves latest naming an iteration without a manifest."""
    return [_scenario("one-job-keep-model-1", save_machine_factory=latest_before_commit)]


def upload_after_retention() -> list[WriteJobScenario]:
    """Retention before the upload of the new checkpoint: the receipt retention with
    require_uploaded needs comes too late."""

    def machine() -> Machine:
        return swapped(
            "write_job", "upload_archive", "apply_retention", machine_bindings("write_job")
        )

    return [_scenario("one-job-upload-then-keep-model-1-require-uploaded", machine_factory=machine)]


# ---------------------------------------------------------------------- the skipped check
def _save_trusting_any_end(ctx: WriteJobContext) -> None:
    """Broken: the job takes the save's return for durable, whatever state it ended in."""
    ctx.save_result = ctx.save_machine.recover(ctx.save)
    ctx.durable = True
    if ctx.on_durable is not None:
        ctx.on_durable()


def acknowledged_without_commit() -> list[WriteJobScenario]:
    """A job that does not require the save to end ``committed``: a save whose pointer update
    failed (``unpublished``) is acknowledged, and latest still names the previous iteration."""
    return [
        _scenario(
            "one-job-keep-model-1",
            machine_factory=_with_job_effects(save_checkpoint=_save_trusting_any_end),
        )
    ]


def _decide_counting_pending(ctx: Any) -> None:
    """Broken: a pending validation is counted like any committed checkpoint."""
    original = retention_tx.scan_for_retention

    def scan(*args: Any, **kwargs: Any) -> Any:
        found = original(*args, **kwargs)
        entries = tuple(
            attrs.evolve(e, kind=ScanKind.CANDIDATE) if e.kind is ScanKind.PENDING else e
            for e in found.entries
        )
        return attrs.evolve(found, entries=entries)

    retention_tx.scan_for_retention = scan
    try:
        retention_tx.decide(ctx)
    finally:
        retention_tx.scan_for_retention = original


def _retention_counting_pending(ctx: WriteJobContext) -> None:
    base = load_machine("retention")
    ctx.retention_machine = Machine(
        base.table, base.bindings.merged(Bindings(effects={"decide": _decide_counting_pending}))
    )
    job_tx.apply_retention(ctx)


def pending_validation_counted() -> list[WriteJobScenario]:
    """Retention that counts an evaluation-pending checkpoint: it is pruned or deleted before
    its validation ran."""
    return [
        _scenario(
            "pending-validation-untouched",
            machine_factory=_with_job_effects(apply_retention=_retention_counting_pending),
        )
    ]


def _decide_keeping_none(ctx: Any) -> None:
    """Broken: a keep-last-N off by one that keeps no counted checkpoint whole, the newest
    and the one latest names included."""
    retention_tx.decide(ctx)
    counted = {e.iteration for e in ctx.scan.of_kind(ScanKind.CANDIDATE)}
    ctx.rows = tuple(
        attrs.evolve(r, action=RetentionAction.WEIGHTS_ONLY)
        if r.iteration in counted and r.action is RetentionAction.KEEP
        else r
        for r in ctx.rows
    )
    ctx.to_prune = tuple(r.iteration for r in ctx.rows if r.action is RetentionAction.WEIGHTS_ONLY)
    for iteration in ctx.to_prune:
        ctx.policies.setdefault(iteration, ctx.plan.optimizer.describe())


def _retention_keeping_none(ctx: WriteJobContext) -> None:
    base = load_machine("retention")
    ctx.retention_machine = Machine(
        base.table, base.bindings.merged(Bindings(effects={"decide": _decide_keeping_none}))
    )
    job_tx.apply_retention(ctx)


def retention_keeps_none_whole() -> list[WriteJobScenario]:
    """Retention whose keep-last-N is off by one: it prunes the optimizer of every counted
    checkpoint, the newest one too, leaving no exact checkpoint."""
    return [
        _scenario(
            "one-job-keep-model-1",
            machine_factory=_with_job_effects(apply_retention=_retention_keeping_none),
        )
    ]


# -------------------------------------------------------------- two writes in flight
@attrs.define
class _HandedOverBeforeJoin(WriteJobScenario):
    """Broken: the next job is handed over (its payloads copied into the role's reused
    staging buffers) while the previous one is still in flight, not after it was joined."""

    def context(
        self,
        store: Store,
        iteration: int,
        *,
        salt: int,
        on_durable: Callable[[], None],
        staging: StagingBuffers,
        bucket: SimBucket | None = None,
    ) -> WriteJobContext:
        ctx = super().context(
            store, iteration, salt=salt, on_durable=on_durable, staging=staging, bucket=bucket
        )
        later = [t for t in self.targets if t > iteration]
        if self.asynchronous and salt == SALT_RUN and later:
            following = save_context(store, later[0], with_data=False, salt=salt)
            snapshot_payloads(staging, following.payloads)
        return ctx


def two_writes_in_flight() -> list[WriteJobScenario]:
    """A second job handed over while the first is still in flight: the staging buffers the
    first job writes from are overwritten with the second's state, so iter N holds the
    weights of the next iteration."""
    (found,) = [s for s in write_job_scenarios() if s.name == "two-async-jobs-keep-optim-1-model-2"]
    fields = {
        f.name: getattr(found, f.name)
        for f in attrs.fields(WriteJobScenario)
        if f.init and f.name not in ("_expected", "last_run")
    }
    fields["name"] = f"broken-{found.name}-in-flight"
    return [_HandedOverBeforeJoin(**fields)]
