"""What the emergency save at a stop writes: the pure decision (no I/O) the emergency
transaction (``machines/emergency.toml``) acts on.

The plan (``emergency_checkpoint_components``):

- ``full`` (the default): the exact-resume plan ``[model, optimizer, training_state]``,
  whatever ``checkpoint_components`` and the validation plan say;
- ``run``: the run's own ``checkpoint_components`` plus ``model``, through the cadence path
  (a full plan is a checkpoint under ``checkpoints/``, a partial one an artifact under
  ``checkpoint_artifacts/``).

The rule table of :func:`decide_emergency` (``coverage`` is what step N already holds on disk,
committed):

::

    validation due   on disk at step N                    kind                 plan
    yes              a full checkpoint                    COVERED              full
    yes              no full checkpoint                   EVALUATION_PENDING   full
    no               covers the emergency plan            COVERED              that plan
    no               does not; the plan is full           CHECKPOINT           full
    no               does not; partial, no artifact       ARTIFACT             that plan
    no               does not; partial, an artifact of    CHECKPOINT           full (escalated)
                     step N that lacks a component, or a
                     manifest there that does not verify

Coverage, not step number: a committed full checkpoint of step N covers every plan; a
committed artifact of step N covers a plan only when it carries every component of it (a
validation artifact ``[model]`` covers the ``run`` plan ``[model]``, not ``[model,
training_state]``). A committed artifact is never re-committed, so a partial plan its step's
artifact does not cover can only be written as the full plan: the escalation, logged. The
config refuses ``run`` with a saving validation plan that does not cover the run plan plus
``model``, so no accepted configuration reaches it. A termination observed before a due
validation always writes the full evaluation-pending checkpoint (its resume needs exact
state): the evaluation runs after the requeue, then publication.

Example:
    >>> from statecraft.checkpoint.config import CheckpointConfig
    >>> cfg = CheckpointConfig(emergency_checkpoint_components="run",
    ...                        checkpoint_components=("model",))
    >>> decide_emergency(cfg, validation_due=False, coverage=StepCoverage()).kind
    <EmergencyKind.ARTIFACT: 'artifact'>
    >>> on_disk = StepCoverage(artifact=ComponentPlan.of(["model"]))
    >>> decide_emergency(cfg, validation_due=False, coverage=on_disk).kind
    <EmergencyKind.COVERED: 'covered'>
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from statecraft.checkpoint.config.plans import run_plan
from statecraft.checkpoint.kernel.components import ComponentPlan
from statecraft.checkpoint.stop.records import EmergencyKind

if TYPE_CHECKING:
    from statecraft.checkpoint.config.schema import CheckpointConfig

__all__ = ["EmergencyBoundary", "StepCoverage", "decide_emergency", "emergency_plan"]


@attrs.frozen
class StepCoverage:
    """What step N holds on disk, committed.

    Attributes:
        checkpoint: ``checkpoints/iter_N`` is a committed full checkpoint (any validation
            stage; weights-only or invalidated ones do not count).
        artifact: the plan of the committed artifact ``checkpoint_artifacts/iter_N``
            (``None``: none).
        artifact_damaged: ``checkpoint_artifacts/iter_N`` holds a manifest that does not
            verify: it covers nothing, and no artifact can be committed there either.
    """

    checkpoint: bool = False
    artifact: ComponentPlan | None = None
    artifact_damaged: bool = False

    def covers(self, plan: ComponentPlan) -> bool:
        """Every component of ``plan`` is on disk for the step."""
        if self.checkpoint:
            return True
        return self.artifact is not None and self.artifact.covers(plan)


@attrs.frozen
class EmergencyBoundary:
    """The decision for one stop.

    Attributes:
        kind: what the emergency save writes (``COVERED``: nothing).
        plan: the plan written, or the plan found covered.
        escalated: a partial ``run`` plan was replaced by the full plan because the step's
            committed artifact lacks one of its components (logged as a fallback).
    """

    kind: EmergencyKind
    plan: ComponentPlan
    escalated: bool = False


def emergency_plan(config: CheckpointConfig) -> ComponentPlan:
    """The plan ``emergency_checkpoint_components`` asks for: the full plan (``full``), or
    ``checkpoint_components`` plus ``model`` (``run``)."""
    if config.emergency_checkpoint_components == "full":
        return ComponentPlan.full()
    return run_plan(config).union(ComponentPlan.of(["model"]))


def decide_emergency(
    config: CheckpointConfig, *, validation_due: bool, coverage: StepCoverage
) -> EmergencyBoundary:
    """The emergency save's kind and plan by the module docstring's table."""
    full = ComponentPlan.full()
    if validation_due:
        if coverage.checkpoint:
            return EmergencyBoundary(EmergencyKind.COVERED, full)
        return EmergencyBoundary(EmergencyKind.EVALUATION_PENDING, full)
    plan = emergency_plan(config)
    if coverage.covers(plan):
        return EmergencyBoundary(EmergencyKind.COVERED, plan)
    if plan.is_full:
        return EmergencyBoundary(EmergencyKind.CHECKPOINT, full)
    if coverage.artifact is not None or coverage.artifact_damaged:
        # A committed (or damaged) artifact is never re-committed: only the full plan fits.
        return EmergencyBoundary(EmergencyKind.CHECKPOINT, full, escalated=True)
    return EmergencyBoundary(EmergencyKind.ARTIFACT, plan)
