"""The deliberately wrong emergency transactions ``specs/emergency.toml`` declares
(``[[broken]]``): each returns the scenarios that run one wrong variant, and
``statecraft crashcheck --broken`` fails unless exploring them violates the guarantees the spec
says it must. A guarantee whose check no wrong variant makes fail was never shown able to fail.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from typing import Any

import attrs

from statecraft.checkpoint.kernel.components import ComponentPlan
from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.checkpoint.kernel.machines import machine_bindings
from statecraft.checkpoint.stop.bindings import EmergencyContext
from statecraft.checkpoint.stop.emergency_plan import (
    EmergencyKind,
    StepCoverage,
    decide_emergency,
)
from statecraft.checkpoint.stop.records import StopDecision, signal_reason
from statecraft.checkpoint.stop.run_done import done_record, write_done
from statecraft.engine import Bindings, Machine, parse_table
from statecraft.proofs.stop.scenarios import (
    EmergencyScenario,
    emergency_scenarios,
    lacks_a_component,
)
from statecraft.resources import machine_path

__all__ = [
    "coverage_by_step_number",
    "done_after_failed_save",
    "done_before_durable",
    "emergency_artifact_saved_as_checkpoint",
    "pending_stop_saved_as_plain_checkpoint",
    "requeue_saves_again",
    "restarting_on_second_signal",
    "scenario",
]


def scenario(name: str, **changes: Any) -> EmergencyScenario:
    """The shipped scenario ``name`` with ``changes``."""
    (found,) = [s for s in emergency_scenarios() if s.name == name]
    return attrs.evolve(found, name=f"broken-{found.name}", **changes)


def _table(edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    data = tomllib.loads(machine_path("emergency").read_text())
    edit(data)
    return data


def _machine(data: dict[str, Any], **effects: Callable[[EmergencyContext], None]) -> Machine:
    bindings = machine_bindings("emergency").merged(Bindings(effects=effects))
    return Machine(parse_table(data, source="broken emergency table"), bindings)


def _trusting_write_done(ctx: EmergencyContext) -> None:
    """Broken: DONE.json names the directory the stop means to write, without asking whether
    a save is durable."""
    path = ctx.path or f"checkpoints/{iter_dirname(ctx.step)}"
    record = done_record(
        step=ctx.step, preempted=ctx.reason, checkpoint=path, saved=True, seconds_to_durable=0.0
    )
    write_done(ctx.attempt, ctx.filesystem, record)


def _done_first() -> Machine:
    def swap(data: dict[str, Any]) -> None:
        for t in data["transitions"]:
            if t["do"] == "write_emergency":
                t["do"] = "write_done"
            elif t["do"] == "write_done":
                t["do"] = "write_emergency"

    return _machine(_table(swap), write_done=_trusting_write_done)


def done_before_durable() -> list[EmergencyScenario]:
    """The wrong order: write_done before write_emergency (with a write_done that does not
    refuse, as a table-ordering bug does when nothing else guards it): a crash in between
    leaves DONE.json naming a checkpoint that is not there."""
    return [scenario("full-save", machine_factory=_done_first)]


def _failed_save_goes_on() -> Machine:
    def on_error_durable(data: dict[str, Any]) -> None:
        for t in data["transitions"]:
            if t["do"] == "write_emergency":
                t["on_error"] = "durable"
        del data["states"]["save_failed"]

    return _machine(_table(on_error_durable), write_done=_trusting_write_done)


def done_after_failed_save() -> list[EmergencyScenario]:
    """The wrong failure path (exit 0 after a failed save): a failed save goes on to
    ``durable`` and DONE.json is written, naming a checkpoint never committed (caught under
    an injected I/O error)."""
    return [scenario("full-save", machine_factory=_failed_save_goes_on)]


def _decide_by_step_number(ctx: EmergencyContext) -> None:
    """Broken: any directory of the step counts as covering it (step number, not coverage)."""
    fs = ctx.filesystem
    assert fs is not None
    name = iter_dirname(ctx.step)
    found = any(
        fs.stat(str(root / name)) is not None
        for root in (ctx.attempt.checkpoints_dir, ctx.attempt.artifacts_dir)
    )
    ctx.coverage = StepCoverage(artifact=ComponentPlan.full() if found else None)
    ctx.boundary = decide_emergency(
        ctx.config, validation_due=ctx.validation_due, coverage=ctx.coverage
    )


def _by_step_number() -> Machine:
    return _machine(_table(lambda data: None), decide=_decide_by_step_number)


def coverage_by_step_number() -> list[EmergencyScenario]:
    """A step whose validation artifact lacks a component, taken as covered because the step
    has a directory: DONE names a directory without the whole plan."""
    return [
        attrs.evolve(
            lacks_a_component(),
            name="broken-validation-artifact-lacks-a-component",
            machine_factory=_by_step_number,
        )
    ]


def restarting_on_second_signal() -> list[EmergencyScenario]:
    """A signal that arrives during the save restarts it under the newest reason: two saves,
    and DONE records the second reason."""
    s = scenario("second-signal-during-save")

    def write_emergency(ctx: EmergencyContext) -> None:
        run = s.last_run
        assert run is not None
        assert ctx.boundary is not None
        seen = len(run.latch.received)
        ctx.path = ctx.write(ctx.boundary)
        if len(run.latch.received) > seen:
            newest = signal_reason(run.latch.received[-1])
            ctx.decision = StopDecision(True, newest, (0,), ctx.decision.decided_at)
            ctx.path = ctx.write(ctx.boundary)
        ctx.seconds_to_durable = 0.0

    s.machine_factory = lambda: _machine(_table(lambda data: None), write_emergency=write_emergency)
    return [s]


def _requeue_restarts() -> Machine:
    def recover_into_stopping(data: dict[str, Any]) -> None:
        data["recover"]["nothing"] = "stopping"

    return _machine(_table(recover_into_stopping))


def requeue_saves_again() -> list[EmergencyScenario]:
    """A requeued process that found nothing of the stop's save starts the emergency save
    again (instead of ending: the stop is over)."""
    return [scenario("full-save", machine_factory=_requeue_restarts, inject_faults=False)]


def _writing_as(kind: EmergencyKind) -> Callable[[], Machine]:
    def write_emergency(ctx: EmergencyContext) -> None:
        assert ctx.boundary is not None
        ctx.saves += 1
        ctx.path = ctx.write(attrs.evolve(ctx.boundary, kind=kind))
        ctx.seconds_to_durable = 0.0

    return lambda: _machine(_table(lambda data: None), write_emergency=write_emergency)


def emergency_artifact_saved_as_checkpoint() -> list[EmergencyScenario]:
    """The ``run`` plan's emergency artifact written as a full checkpoint: it moves
    latest_checkpoint.txt and resume adopts it."""
    return [scenario("run-artifact-model", machine_factory=_writing_as(EmergencyKind.CHECKPOINT))]


def pending_stop_saved_as_plain_checkpoint() -> list[EmergencyScenario]:
    """A stop before a due validation writes a plain full checkpoint (its trainer.pt does not
    record the pending evaluation, so the validation is skipped)."""
    return [
        scenario(
            "validation-due-evaluation-pending",
            machine_factory=_writing_as(EmergencyKind.CHECKPOINT),
        )
    ]
