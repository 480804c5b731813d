"""Run a machine's effects by role across ranks: the wrapper the engine's ``call=`` hook takes.

::

    machine.run(ctx, call=rank_zero_effects(collective, machine.bindings.roles))

- ``Role.COORDINATOR`` effects run on rank 0 only. Their outcome (ok, or the exception) and the
  context fields the context lists in its ``coordinated`` class attribute are broadcast
  (:func:`~statecraft.parallel.rank0.on_rank_zero`), so every rank holds the same fields and
  takes the same transition (``on_error`` included).
- ``Role.EVERY_RANK`` effects run on every rank.

In a world of one every effect just runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from statecraft.engine.runner import EffectCall, call_here
from statecraft.engine.tagging import Role
from statecraft.errors import MachineDefinitionError
from statecraft.parallel.collectives import Collective
from statecraft.parallel.rank0 import ErrorCopy, on_rank_zero, portable_error, restore_error

__all__ = ["rank_zero_effects"]


def rank_zero_effects(collective: Collective, roles: Mapping[str, Role]) -> EffectCall:
    """An :data:`~statecraft.engine.runner.EffectCall` running each effect where its role says.

    Raises:
        MachineDefinitionError: (when an effect is called) it has no role, or its context
            declares no ``coordinated`` fields for a coordinator effect in a world of several.
    """
    if collective.world_size == 1:
        return call_here

    def call(name: str, effect: Callable[[Any], Any], ctx: Any) -> None:
        role = roles.get(name)
        if role is None:
            raise MachineDefinitionError(
                name, [f"effect {name!r} has no role; tag it @effect(role=Role....)"]
            )
        if role is Role.EVERY_RANK:
            effect(ctx)
            return
        fields = getattr(type(ctx), "coordinated", None)
        if fields is None:
            raise MachineDefinitionError(
                name,
                [
                    f"{type(ctx).__name__} declares no 'coordinated' fields, so rank 0's "
                    f"results of coordinator effect {name!r} cannot reach the other ranks; "
                    "add coordinated: ClassVar[tuple[str, ...]] to the context"
                ],
            )

        raised: list[Exception] = []  # rank 0's own exception object

        def on_zero() -> tuple[BaseException | ErrorCopy | None, dict[str, Any]]:
            try:
                effect(ctx)
            except Exception as exc:  # the outcome is broadcast, then re-raised everywhere
                raised.append(exc)
            error = portable_error(raised[0]) if raised else None
            return error, {f: getattr(ctx, f) for f in fields}

        error, shared = on_rank_zero(collective, on_zero)
        if collective.rank != 0:
            for field, value in shared.items():
                setattr(ctx, field, value)
        if raised:
            raise raised[0]
        if error is not None:
            raise restore_error(error)

    return call
