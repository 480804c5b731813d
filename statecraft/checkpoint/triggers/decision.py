"""The trigger decision of one step boundary: every trigger of the run asked on rank 0, the
answer broadcast, so every rank saves at the same step (a wall-clock trigger read on each
rank's own clock, or a ``should_save`` hook that reads rank-local state, would make ranks
disagree). One broadcast per ``step_end()``, and only when the run has triggers.

A trigger that raises on rank 0 raises on every rank (its class and message), never a hang of
the others at the broadcast.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from statecraft.checkpoint.triggers.policies import SaveTrigger, TriggerFacts
from statecraft.errors import ConfigError, ConfigIssue
from statecraft.parallel.collectives import Collective
from statecraft.parallel.rank0 import on_rank_zero

__all__ = ["SaveTriggers"]


def _checked(triggers: object) -> tuple[SaveTrigger, ...]:
    if triggers is None:
        return ()
    items = [triggers] if isinstance(triggers, SaveTrigger) else triggers
    if isinstance(items, str | bytes) or not isinstance(items, Iterable):
        raise ConfigError(
            [ConfigIssue("save_triggers", triggers, "a save trigger or a list of them")],
            source="Checkpointer(save_triggers=...)",
        )
    checked = tuple(items)
    for item in checked:
        if not isinstance(item, SaveTrigger):
            raise ConfigError(
                [
                    ConfigIssue(
                        "save_triggers",
                        type(item).__name__,
                        "EveryNSeconds, EveryNEpochs, SaveFn or another object with "
                        "due(facts) and describe()",
                    )
                ],
                source="Checkpointer(save_triggers=...)",
            )
    return checked


@attrs.frozen
class SaveTriggers:
    """A run's triggers (any of them due: a save is due).

    Raises:
        ConfigError: an item is not a :class:`SaveTrigger` (at build).
    """

    triggers: tuple[SaveTrigger, ...] = attrs.field(converter=_checked, default=())

    def __bool__(self) -> bool:
        return bool(self.triggers)

    def describe(self) -> str:
        return ", ".join(t.describe() for t in self.triggers) or "none"

    def decide(self, facts: TriggerFacts, collective: Collective) -> bool:
        """Rank 0 asks every trigger; the answer (or rank 0's error) reaches every rank
        (:func:`~statecraft.parallel.rank0.on_rank_zero`). Without triggers: ``False``, no
        collective.

        Raises:
            Exception: a trigger's error on rank 0, raised on every rank.
        """
        if not self.triggers:
            return False
        return on_rank_zero(collective, lambda: any(t.due(facts) for t in self.triggers))
