"""The deliberately wrong validations ``specs/validation.toml`` declares (``[[broken]]``): each
returns the scenarios that run one wrong variant (a swapped table, an effect or observer
replaced through ``Bindings.merged``, a save that drops the checkpoint's stage), and
``statecraft crashcheck --broken`` fails unless exploring them violates the guarantees the spec
says it must."""

from __future__ import annotations

import posixpath
import tomllib
from collections.abc import Callable
from typing import Any

import attrs

from statecraft.checkpoint.kernel.machines import load_machine, machine_bindings
from statecraft.checkpoint.save.saving import save_full_checkpoint
from statecraft.checkpoint.validation import bindings as v
from statecraft.engine import Bindings, Machine, parse_table
from statecraft.proofs.oracle import CHECKPOINTS_ROOT
from statecraft.proofs.save.scenarios import shipped_machine
from statecraft.proofs.training import rng_at, tracked_at
from statecraft.proofs.validation.scenarios import ValidationScenario
from statecraft.resources import machine_path
from statecraft.storage import LocalStore, Store

__all__ = [
    "failed_evaluation_published_anyway",
    "pending_checkpoint_saved_without_its_stage",
    "publish_before_evaluate",
    "publish_before_the_evaluation_is_recorded",
    "published_not_made_durable_by_recovery",
    "published_record_without_directory_fsync",
    "record_written_by_replace",
    "recovery_reevaluating_a_recorded_evaluation",
]


def swapped(a: str, b: str) -> Callable[[], Machine]:
    """The shipped table with the effects ``a`` and ``b`` run in each other's place."""

    def build() -> Machine:
        data: dict[str, Any] = tomllib.loads(machine_path("validation").read_text())
        for t in data["transitions"]:
            t["do"] = {a: b, b: a}.get(t["do"], t["do"])
        table = parse_table(data, source=f"broken validation table ({a} <-> {b})")
        return Machine(table, machine_bindings("validation"))

    return build


def with_bindings(**bindings: Callable[..., Any]) -> Callable[[], Machine]:
    """The shipped table with ``bindings`` (effects, or observers named ``observe*``)."""
    effects = {k: f for k, f in bindings.items() if not k.startswith("observe")}
    observers = {k: f for k, f in bindings.items() if k.startswith("observe")}

    def build() -> Machine:
        merged = machine_bindings("validation").merged(
            Bindings(effects=effects, observers=observers)
        )
        return Machine(load_machine("validation").table, merged)

    return build


# ------------------------------------------------------------------------ wrong orders
def publish_before_the_evaluation_is_recorded() -> list[ValidationScenario]:
    """The table publishes (and announces) before the evaluated record is durable: a
    published record appears while no evaluated record exists."""
    machine = swapped("record_evaluation", "publish")
    return [ValidationScenario("broken-publish-before-record", target=4, machine_factory=machine)]


def publish_before_evaluate() -> list[ValidationScenario]:
    """The table publishes before it evaluates."""
    return [
        ValidationScenario(
            "broken-publish-before-evaluate",
            target=4,
            machine_factory=swapped("evaluate", "publish"),
            recovery_may_fail=True,
        )
    ]


# ------------------------------------------------------------------------ skipped checks
def _evaluate_swallowing_failure(ctx: v.ValidationContext) -> None:
    """Broken: a failed evaluation is taken for an empty success (publish what failed)."""
    try:
        v.evaluate(ctx)
    except Exception:
        ctx.metrics, ctx.evaluated = {}, True


def failed_evaluation_published_anyway() -> list[ValidationScenario]:
    """An evaluate that swallows the evaluation's failure: a result no evaluation returned is
    recorded and published."""
    return [
        ValidationScenario(
            "broken-swallowed-failure",
            target=4,
            run_fails=True,
            machine_factory=with_bindings(evaluate=_evaluate_swallowing_failure),
        )
    ]


def _observe_ignoring_records(ctx: v.ValidationContext) -> str:
    """Broken: a committed pending checkpoint always reads evaluation-pending."""
    label = v.observe_validation(ctx)
    return "evaluation_pending" if label in ("publication_pending", "published") else label


def recovery_reevaluating_a_recorded_evaluation() -> list[ValidationScenario]:
    """A recovery that does not see the durable evaluated record evaluates again."""
    return [
        ValidationScenario(
            "broken-reevaluates",
            target=4,
            resumed_at_evaluated=True,
            machine_factory=with_bindings(observe_validation=_observe_ignoring_records),
            recovery_may_fail=True,
        )
    ]


# ------------------------------------------------------------------------ wrong writes
def _publish_by_replace(ctx: v.ValidationContext) -> None:
    """Broken: the published record replaces whatever is under the name (rename)."""
    ctx.fenced.write_atomic(ctx.path(v.PUBLISHED_RECORD), b"{}")
    v.publish(ctx)


def record_written_by_replace() -> list[ValidationScenario]:
    """A published record written by rename instead of exclusive link."""
    return [
        ValidationScenario(
            "broken-publish-by-replace",
            target=4,
            resumed_at_evaluated=True,
            machine_factory=with_bindings(publish=_publish_by_replace),
        )
    ]


def _settle_without_fsync(ctx: v.ValidationContext) -> None:
    """Broken: a checkpoint found published is reported without being made durable."""


def published_not_made_durable_by_recovery() -> list[ValidationScenario]:
    """A recovery that reports a published checkpoint it found in the page cache without
    making it durable loses it to the next power loss."""
    return [
        ValidationScenario(
            "broken-settle-without-fsync",
            target=4,
            resumed_at_evaluated=True,
            machine_factory=with_bindings(settle=_settle_without_fsync),
        )
    ]


def _publish_without_directory_fsync(ctx: v.ValidationContext) -> None:
    """Broken publish: the published record is written and fsynced as a temporary and linked
    into place, but the directory is never fsynced before the validation returns."""
    store = ctx.store
    assert isinstance(store, LocalStore)
    final = store.abspath(ctx.path(v.PUBLISHED_RECORD))
    temp = posixpath.join(posixpath.dirname(final), f".{v.PUBLISHED_RECORD}.tmp-0-0")
    handle = store.fs.open_write(temp, exclusive=True)
    store.fs.write(handle, v.PublishedRecord(ctx.iteration).encode())
    store.fs.fsync(handle)
    store.fs.close(handle)
    store.fs.link(temp, final)
    store.fs.unlink(temp)
    ctx.announcement = f"published {ctx.iter_dir}"


def published_record_without_directory_fsync() -> list[ValidationScenario]:
    """The validation returns before its published record's name is durable: a power loss
    after it returned takes the publication back."""
    return [
        ValidationScenario(
            "broken-publish-without-directory-fsync",
            target=4,
            resumed_at_evaluated=True,
            machine_factory=with_bindings(publish=_publish_without_directory_fsync),
        )
    ]


@attrs.define
class _StagelessSave(ValidationScenario):
    """The scenario whose save of the target drops its validation stage."""

    def context(self, store: Store, evaluator: Any, *, salt: int | None) -> v.ValidationContext:
        ctx = super().context(store, evaluator, salt=salt)
        if salt is not None:

            def save() -> Any:
                return save_full_checkpoint(
                    tracked_at(self.target, salt=salt),
                    store,
                    rng=rng_at(self.target),
                    data=None,
                    step=self.target,
                    lease=None,
                    machine=shipped_machine("save"),
                    location=CHECKPOINTS_ROOT,
                )

            ctx.save = save
        return ctx


def pending_checkpoint_saved_without_its_stage() -> list[ValidationScenario]:
    """The validation's checkpoint is committed as a plain full checkpoint (trainer.pt does
    not record evaluation-pending): resume adopts it as if validated."""
    return [_StagelessSave("broken-pending-saved-without-stage", target=4, recovery_may_fail=True)]
