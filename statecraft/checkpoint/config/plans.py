"""The component plans a config makes active, and the warnings a partial active plan earns.

Two knobs hold a plan (:class:`~statecraft.checkpoint.kernel.components.ComponentPlan`):

::

    knob                               active when                    saves it writes
    checkpoint_components              save_every > 0                 cadence and final saves
    validation.checkpoint_components   validation.save_checkpoint     validation-requested saves

A partial (proper-subset) plan is legal but not exact-resume capable: its saves are
non-resumable artifacts under ``checkpoint_artifacts/`` that ``resume=auto`` never adopts.
:func:`plan_warnings` returns one line per partial plan that is **active** (an inactive
validation plan does not warn), each naming the knob, the plan, the trade and how to silence
it (the full plan); the facade issues each as a ``UserWarning`` when it is built.

One more line, for a config that asks for something it never gets:
``validation.save_checkpoint=true`` with ``validation.every=0`` — no cadence or final
validation ever runs, and the ``validation.before_training`` pass never saves, so validation
never requests a save. It is a warning, not a config error (a run may switch validation on
later by its cadence alone).

Example:
    >>> from statecraft.checkpoint.config import CheckpointConfig
    >>> cfg = CheckpointConfig.from_dict({"save_every": 10, "checkpoint_components": ["model"]})
    >>> plan_warnings(cfg)[0].split(":")[0]
    'checkpoint_components=[model]'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from statecraft.checkpoint.kernel.components import ComponentPlan

if TYPE_CHECKING:
    from statecraft.checkpoint.config.schema import CheckpointConfig

__all__ = ["plan_warnings", "run_plan", "validation_plan"]

_FULL = str(ComponentPlan.full())


def run_plan(config: CheckpointConfig) -> ComponentPlan:
    """The plan of cadence, normal-final and explicit saves (``checkpoint_components``)."""
    return ComponentPlan.of(config.checkpoint_components)


def validation_plan(config: CheckpointConfig) -> ComponentPlan | None:
    """The plan validation requests a save of, or ``None`` when
    ``validation.save_checkpoint`` is false (the plan is then inactive)."""
    if not config.validation.save_checkpoint:
        return None
    return ComponentPlan.of(config.validation.checkpoint_components)


def plan_warnings(config: CheckpointConfig) -> list[str]:
    """One warning line per partial plan ``config`` makes active, then the
    never-saving-validation line (see the module docstring); empty for the defaults.

    Each line names the knob and its plan, says the saves become non-resumable artifacts
    under ``checkpoint_artifacts/`` that ``resume=auto`` never adopts, and ends with how to
    silence it. Never raises for a valid config.
    """
    lines = []
    plan = run_plan(config)
    if not plan.is_full and config.save_every > 0:
        lines.append(
            f"checkpoint_components={plan}: a partial plan; cadence and final saves "
            f"(save_every={config.save_every}) become non-resumable artifacts under "
            "checkpoint_artifacts/ holding only those components, which resume=auto never "
            "adopts (continuing from one is a warm start); set "
            f"checkpoint_components={_FULL} (the full plan) to silence"
        )
    chosen = validation_plan(config)
    if chosen is not None and not chosen.is_full:
        lines.append(
            f"validation.checkpoint_components={chosen}: a partial plan; validation saves "
            "(validation.save_checkpoint=true) become non-resumable artifacts under "
            "checkpoint_artifacts/, committed only after a successful evaluation, with no "
            "pending-validation recovery and never adopted by resume=auto; set "
            f"validation.checkpoint_components={_FULL} (the full plan) to silence"
        )
    if config.validation.save_checkpoint and config.validation.every == 0:
        lines.append(
            "validation.save_checkpoint=true with validation.every=0: validation never "
            "requests a save (no cadence or final validation runs, and the "
            "validation.before_training pass never saves); set validation.every to a "
            "positive step count, or validation.save_checkpoint=false to silence"
        )
    return lines
