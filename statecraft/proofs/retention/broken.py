"""The deliberately wrong retention passes ``specs/retention.toml`` declares (``[[broken]]``):
each returns the scenarios that run one wrong variant (a swapped table, or an effect replaced
through ``Bindings.merged``), and ``statecraft crashcheck --broken`` fails unless exploring them
violates the guarantees the spec says it must. Each breaks one rule of the shipped machine."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from typing import Any

import attrs

from statecraft.checkpoint.kernel.layout import MANIFEST_NAME, iter_dirname
from statecraft.checkpoint.kernel.machines import load_machine, machine_bindings
from statecraft.checkpoint.kernel.retention_records import (
    INVALIDATED_MARKER,
    WEIGHTS_ONLY_MARKER,
    DecisionRow,
    InvalidatedRecord,
    RetentionAction,
    WeightsOnlyRecord,
)
from statecraft.checkpoint.retention import bindings
from statecraft.checkpoint.retention.bindings import RetentionContext
from statecraft.checkpoint.retention.scan import OPTIMIZER_ENTRIES, ScanKind
from statecraft.engine import Bindings, Machine, parse_table
from statecraft.proofs.retention.scenarios import (
    ARTIFACTS_ROOT,
    RetentionScenario,
    retention_scenarios,
)
from statecraft.resources import machine_path
from statecraft.storage import LocalStore

__all__ = [
    "artifacts_swept_as_garbage",
    "delete_files_before_invalidating",
    "manifest_removed_before_the_marker",
    "prune_before_marking",
    "prune_not_uploaded",
    "prune_the_latest",
    "rerun_forgets_an_interrupted_deletion",
    "scenario",
    "trusting_a_marker_a_killed_pass_left",
    "weights_only_marker_read_as_invalidation",
    "with_effects",
    "with_swapped_effects",
]


def scenario(name: str, machine: Callable[[], Machine] | None = None) -> RetentionScenario:
    """The shipped scenario ``name``, run by ``machine`` when given."""
    found = next(s for s in retention_scenarios() if s.name == name)
    if machine is None:
        return found
    return attrs.evolve(found, name=f"broken-{found.name}", machine_factory=machine)


def with_effects(**effects: Callable[[RetentionContext], None]) -> Callable[[], Machine]:
    """The shipped table with ``effects`` replacing its bindings."""

    def build() -> Machine:
        merged = machine_bindings("retention").merged(Bindings(effects=effects))
        return Machine(load_machine("retention").table, merged)

    return build


def with_swapped_effects(a: str, b: str) -> Callable[[], Machine]:
    """The shipped table with the effects ``a`` and ``b`` run in each other's place."""

    def build() -> Machine:
        data: dict[str, Any] = tomllib.loads(machine_path("retention").read_text())
        for t in data["transitions"]:
            t["do"] = {a: b, b: a}.get(t["do"], t["do"])
        table = parse_table(data, source="broken retention table")
        return Machine(table, machine_bindings("retention"))

    return build


# ------------------------------------------------------------------------ wrong orders
def _delete_files_first(ctx: RetentionContext) -> None:
    """Broken: the bulk files go before the marker and the manifest."""
    store = ctx.fenced
    for it in ctx.to_delete:
        name = iter_dirname(it)
        for child in ("model.pt", "optim.pt", "trainer.pt"):
            store.delete(f"{name}/{child}")
        marker = InvalidatedRecord(it, "broken").encode()
        if INVALIDATED_MARKER not in ctx.store.list(name):
            store.create_exclusive(f"{name}/{INVALIDATED_MARKER}", marker)
        store.delete(f"{name}/{MANIFEST_NAME}")


def delete_files_before_invalidating() -> list[RetentionScenario]:
    """Files removed while the manifest stands and no marker exists: a half-deleted directory
    that looks committed."""
    return [scenario("require-uploaded", with_effects(invalidate=_delete_files_first))]


def _manifest_before_marker(ctx: RetentionContext) -> None:
    """Broken: the manifest goes before the marker."""
    store = ctx.fenced
    for it in ctx.to_delete:
        name = iter_dirname(it)
        store.delete(f"{name}/{MANIFEST_NAME}")
        if INVALIDATED_MARKER not in ctx.store.list(name):
            store.create_exclusive(
                f"{name}/{INVALIDATED_MARKER}", InvalidatedRecord(it, "broken").encode()
            )


def manifest_removed_before_the_marker() -> list[RetentionScenario]:
    """The manifest removed before the invalidation marker is published (the directory is
    never adoptable either way; only the order check can tell)."""
    return [scenario("require-uploaded", with_effects(invalidate=_manifest_before_marker))]


def prune_before_marking() -> list[RetentionScenario]:
    """A table that removes optim.pt before the weights-only marker: a committed directory
    missing its optimizer without a marker."""
    machine = with_swapped_effects("mark_weights_only", "prune_optimizer")
    return [scenario("keep-optim-last-1-over-3-partial-leftover", machine)]


# ------------------------------------------------------------------------ wrong decisions
def _decide_and_prune_the_latest(ctx: RetentionContext) -> None:
    """Broken: the iteration latest_checkpoint.txt names is given to retention as
    weights-only too (the decision forgets that latest is never touched)."""
    bindings.decide(ctx)
    assert ctx.scan is not None
    latest = ctx.scan.latest
    assert latest is not None
    ctx.to_prune = (*ctx.to_prune, latest)
    ctx.rows = tuple(
        DecisionRow(r.iteration, RetentionAction.WEIGHTS_ONLY, r.kept_by, "broken")
        if r.iteration == latest
        else r
        for r in ctx.rows
    )


def prune_the_latest() -> list[RetentionScenario]:
    """A decision that prunes what latest names (here also the newest committed): it is not
    whole, latest names a pruned directory, no exact-resume checkpoint is left, resume does
    not land on it."""
    machine = with_effects(decide=_decide_and_prune_the_latest)
    return [scenario("keep-optim-last-1-over-3-partial-leftover", machine)]


def _decide_ignoring_uploads(ctx: RetentionContext) -> None:
    """Broken: the decision drops require_uploaded (every iteration counts, uploaded or not)."""
    plan = ctx.plan
    ctx.plan = attrs.evolve(plan, require_uploaded=False)
    try:
        bindings.decide(ctx)
    finally:
        ctx.plan = plan


def prune_not_uploaded() -> list[RetentionScenario]:
    """With require_uploaded, an iteration without .uploaded is deleted."""
    return [scenario("require-uploaded", with_effects(decide=_decide_ignoring_uploads))]


def _decide_forgetting_invalidated(ctx: RetentionContext) -> None:
    """Broken: the decision drops the rows that finish an invalidated leftover (a rerun
    re-decides from the policies only)."""
    bindings.decide(ctx)
    assert ctx.scan is not None
    dropped = {e.iteration for e in ctx.scan.of_kind(ScanKind.INVALIDATED)}
    ctx.to_delete = tuple(it for it in ctx.to_delete if it not in dropped)
    ctx.rows = tuple(r for r in ctx.rows if r.iteration not in dropped)


def rerun_forgets_an_interrupted_deletion() -> list[RetentionScenario]:
    """A rerun that does not finish the deletion an interrupted pass announced by its
    invalidation marker: the invalidated directory stays behind."""
    return [scenario("require-uploaded", with_effects(decide=_decide_forgetting_invalidated))]


def _decide_marker_read_as_invalidation(ctx: RetentionContext) -> None:
    """Broken: an iteration already holding a weights-only marker (an interrupted pass left
    it) is taken for one being deleted: the rerun deletes what the decision only prunes."""
    bindings.decide(ctx)
    marked = {it for it in ctx.to_prune if WEIGHTS_ONLY_MARKER in ctx.store.list(iter_dirname(it))}
    ctx.to_prune = tuple(it for it in ctx.to_prune if it not in marked)
    ctx.to_delete = (*ctx.to_delete, *sorted(marked))


def weights_only_marker_read_as_invalidation() -> list[RetentionScenario]:
    """After a crash past the weights-only markers, the rerun deletes the weights-only
    iterations whole (their model.pt, kept by the decision, goes)."""
    machine = with_effects(decide=_decide_marker_read_as_invalidation)
    return [scenario("keep-optim-last-1-over-3-partial-leftover", machine)]


# ------------------------------------------------------------------------ wrong reach
def _sweep_artifacts_too(ctx: RetentionContext) -> None:
    """Broken: the sweep also removes the uncommitted directories of checkpoint_artifacts/
    beside the root (a partial artifact taken for an interrupted save's leftover)."""
    bindings.sweep_garbage(ctx)
    fs = getattr(ctx.store, "fs", None)
    artifacts = LocalStore(ARTIFACTS_ROOT, fs=fs)
    for name in artifacts.list(""):
        if name.startswith("iter_") and MANIFEST_NAME not in artifacts.list(name):
            artifacts.delete_tree(name)


def artifacts_swept_as_garbage() -> list[RetentionScenario]:
    """checkpoint_artifacts/'s partial artifact swept as garbage."""
    machine = with_effects(sweep_garbage=_sweep_artifacts_too)
    return [scenario("keep-optim-last-1-over-3-partial-leftover", machine)]


# ------------------------------------------------------------------------ wrong trust
def _mark_trusting_a_found_marker(ctx: RetentionContext) -> None:
    """Broken: a marker found on disk is trusted as durable (a killed pass, or a failed
    directory fsync, may have left it visible but never durable)."""
    store = ctx.fenced
    for it in ctx.to_prune:
        name = iter_dirname(it)
        if WEIGHTS_ONLY_MARKER in ctx.store.list(name):
            continue
        record = WeightsOnlyRecord(it, OPTIMIZER_ENTRIES, "broken").encode()
        store.create_exclusive(f"{name}/{WEIGHTS_ONLY_MARKER}", record)


def trusting_a_marker_a_killed_pass_left() -> list[RetentionScenario]:
    """A rerun that trusts a weights-only marker it finds (instead of publishing it again)
    prunes under a marker a failed directory fsync lost for good."""
    machine = with_effects(mark_weights_only=_mark_trusting_a_found_marker)
    return [scenario("keep-optim-last-1-over-3-partial-leftover", machine)]
