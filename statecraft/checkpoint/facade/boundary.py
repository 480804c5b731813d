"""What a step boundary does: the pure decision the facade executes after each optimizer step
and at ``finalize()``.

Three questions, each a pure function of the config and the loop's facts (no I/O):

1. :func:`regular_save_due`: is a regular (cadence or normal-final) save due at ``step``?
   ``save_every > 0``, the loop is quiescent (the accumulation window closed on an applied
   update), ``step > 0``, ``step`` was not already saved, and ``step`` is a multiple of
   ``save_every`` or the final step (``save_every=0`` disables cadence and the final save).
2. :func:`validation_due`: is model validation due at ``step``? An evaluation is registered
   (``Checkpointer.validate_with``), ``validation.every > 0``, ``step > 0``, ``step`` was not
   already validated, and ``step`` is a multiple of ``validation.every`` or the final step.
   Step 0 is validated only by the before-training pass (:func:`before_training_due`).
3. :func:`decide_boundary`: given both answers, which transaction runs, with which plan.

The plans: the **regular plan** is ``checkpoint_components`` when a regular save is due; the
**validation plan** is ``validation.checkpoint_components`` when validation is due and
``validation.save_checkpoint`` is true. The plan of the boundary is their union (one save per
step, never two). The rule table of :func:`decide_boundary`:

::

    before   validation  union of the due plans   kind                      plan
    training due
    yes      (any)       (ignored)                EVALUATE                  None
    no       no          none                     NOTHING                   None
    no       no          full                     SAVE                      full
    no       no          partial                  ARTIFACT                  the run plan
    no       yes         none                     EVALUATE                  None
    no       yes         full                     DURABLE_VALIDATION        full
    no       yes         partial, regular due     ARTIFACT_THEN_EVALUATE    the union
    no       yes         partial, only validation EVALUATE_THEN_ARTIFACT    the validation plan

Why that order: a partial union with an independently due regular save commits the artifact
before the (ephemeral) evaluation, so a failed evaluation cannot discard the due save; a
partial plan requested only by validation evaluates first and commits after success (it
carries no durable pending-validation claim). A full union is the durable validation
transaction: a full checkpoint marked evaluation-pending, then the evaluation, then
publication. The before-training pass of a fresh run is always checkpoint-free.

Example:
    >>> from statecraft.checkpoint.config import CheckpointConfig
    >>> decide_boundary(CheckpointConfig(), regular_due=True, validation_due=True).kind
    <BoundaryKind.DURABLE_VALIDATION: 'durable_validation'>
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

import attrs

from statecraft.checkpoint.config.plans import run_plan, validation_plan
from statecraft.checkpoint.kernel.components import ComponentPlan
from statecraft.errors import CheckpointError

if TYPE_CHECKING:
    from statecraft.checkpoint.config.schema import CheckpointConfig

__all__ = [
    "Boundary",
    "BoundaryKind",
    "before_training_due",
    "decide_boundary",
    "regular_save_due",
    "validation_due",
]


class BoundaryKind(enum.Enum):
    """What one boundary runs (see the module docstring's table)."""

    NOTHING = "nothing"
    SAVE = "save"  # a full checkpoint (the save transaction)
    ARTIFACT = "artifact"  # a partial artifact (the artifact transaction)
    DURABLE_VALIDATION = (
        "durable_validation"  # full evaluation-pending checkpoint, evaluate, publish
    )
    ARTIFACT_THEN_EVALUATE = "artifact_then_evaluate"  # commit the artifact, then evaluate
    EVALUATE_THEN_ARTIFACT = "evaluate_then_artifact"  # evaluate, commit the artifact on success
    EVALUATE = "evaluate"  # ephemeral evaluation, no save

    @property
    def saves(self) -> bool:
        """The boundary writes a checkpoint or an artifact."""
        return self not in (BoundaryKind.NOTHING, BoundaryKind.EVALUATE)

    @property
    def evaluates(self) -> bool:
        """The boundary runs the evaluation."""
        return self not in (BoundaryKind.NOTHING, BoundaryKind.SAVE, BoundaryKind.ARTIFACT)


@attrs.frozen
class Boundary:
    """The decision for one boundary.

    Attributes:
        kind: what runs.
        plan: the plan saved (``None`` exactly when ``kind`` does not save); full for
            ``SAVE`` and ``DURABLE_VALIDATION``, partial for the artifact kinds.
        regular_due: a regular save was due (the facade records it as saved afterwards).
        validation_due: validation was due (or the before-training pass runs).
    """

    kind: BoundaryKind
    plan: ComponentPlan | None
    regular_due: bool
    validation_due: bool


def regular_save_due(
    config: CheckpointConfig,
    *,
    step: int,
    quiescent: bool,
    last_saved_step: int | None,
    final: bool,
) -> bool:
    """A cadence or normal-final save is due at optimizer step ``step`` (module docstring,
    question 1). ``last_saved_step`` is the newest step this run already saved (``None``:
    none); ``final`` is true at ``finalize()``."""
    every = config.save_every
    if every <= 0 or not quiescent or step <= 0 or step == last_saved_step:
        return False
    return step % every == 0 or final


def validation_due(
    config: CheckpointConfig,
    *,
    step: int,
    registered: bool,
    last_validated_step: int | None,
    final: bool,
) -> bool:
    """Validation is due at optimizer step ``step`` (module docstring, question 2).
    ``registered``: the loop called ``validate_with``; ``last_validated_step`` is the newest
    step already validated (``None``: none); ``final`` is true at ``finalize()``."""
    every = config.validation.every
    if not registered or every <= 0 or step <= 0 or step == last_validated_step:
        return False
    return step % every == 0 or final


def before_training_due(
    config: CheckpointConfig, *, registered: bool, fresh: bool, remaining_steps: int
) -> bool:
    """The checkpoint-free before-training pass runs: ``validation.before_training`` is true,
    an evaluation is registered, the run starts fresh (nothing resumed) and has steps left.
    It does not depend on ``validation.every``."""
    return config.validation.before_training and registered and fresh and remaining_steps > 0


def decide_boundary(
    config: CheckpointConfig,
    *,
    regular_due: bool,
    validation_due: bool,
    before_training: bool = False,
) -> Boundary:
    """The boundary's kind and plan by the union rules (the module docstring's table).

    Args:
        regular_due: :func:`regular_save_due` at this step.
        validation_due: :func:`validation_due` at this step.
        before_training: this is the before-training pass (:func:`before_training_due`):
            always ``EVALUATE``, whatever the plans and ``validation_due`` say.

    Raises:
        CheckpointError: ``before_training`` with ``regular_due`` (no save is ever due before
            the first step; a caller bug).
    """
    if before_training:
        if regular_due:
            raise CheckpointError(
                "decide_boundary: the before-training pass cannot have a regular save due "
                "(regular_save_due is false before the first step); this is a bug in the caller"
            )
        return Boundary(BoundaryKind.EVALUATE, None, regular_due=False, validation_due=True)
    regular = run_plan(config) if regular_due else None
    if not validation_due:
        if regular is None:
            return Boundary(BoundaryKind.NOTHING, None, False, False)
        kind = BoundaryKind.SAVE if regular.is_full else BoundaryKind.ARTIFACT
        return Boundary(kind, regular, True, False)
    requested = validation_plan(config)
    due = [p for p in (regular, requested) if p is not None]
    if not due:
        return Boundary(BoundaryKind.EVALUATE, None, regular_due, True)
    union = due[0] if len(due) == 1 else due[0].union(due[1])
    if union.is_full:
        kind = BoundaryKind.DURABLE_VALIDATION
    elif regular_due:
        kind = BoundaryKind.ARTIFACT_THEN_EVALUATE
    else:
        kind = BoundaryKind.EVALUATE_THEN_ARTIFACT
    return Boundary(kind, union, regular_due, True)
