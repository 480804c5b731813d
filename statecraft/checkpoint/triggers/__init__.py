"""Save triggers beyond ``save_every``: a wall-clock interval, a per-epoch trigger and a
``should_save(step) -> bool`` hook, each a validated policy object, and the one decision of a
step boundary, taken on rank 0 and broadcast so every rank saves at the same step.

::

    ckpt = sc.Checkpointer(cfg, run=run, output_root=out,
                           save_triggers=[sc.EveryNSeconds(1800), sc.EveryNEpochs(1)])
    ckpt.step_end(epoch=epoch + 1)      # at the step that completes an epoch

:mod:`~statecraft.checkpoint.triggers.policies` holds the policies;
:mod:`~statecraft.checkpoint.triggers.decision` the rank-0 decision.
"""

from statecraft.checkpoint.triggers.decision import SaveTriggers
from statecraft.checkpoint.triggers.policies import (
    EveryNEpochs,
    EveryNSeconds,
    SaveFn,
    SaveTrigger,
    TriggerFacts,
)

__all__ = [
    "EveryNEpochs",
    "EveryNSeconds",
    "SaveFn",
    "SaveTrigger",
    "SaveTriggers",
    "TriggerFacts",
]
