"""Rank-0 decide-and-broadcast: the one way a decision made on rank 0 reaches every rank.

::

    attempt = on_rank_zero(collective, lambda: resolve(...))

Rank 0 calls ``fn``; its value, or the exception it raised, is broadcast; every rank returns
the same value or raises. Every rank must call ``on_rank_zero`` at the same point (it is a
collective). Used by attempt resolution (``layout.resolve_run_attempt``), the save facade
(``Checkpointer.save``) and the engine's coordinator effects (``Machine.run(collective=...)``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from statecraft.parallel.collectives import Collective

__all__ = ["on_rank_zero"]

T = TypeVar("T")


def on_rank_zero(collective: Collective, fn: Callable[[], T]) -> T:
    """Run ``fn`` on rank 0 and return its value on every rank.

    Args:
        collective: the ranks taking part (a world of one just calls ``fn``).
        fn: called on rank 0 only, with no arguments.

    Returns:
        rank 0's value, on every rank.

    Raises:
        Exception: rank 0's exception, re-raised on every rank with rank 0's message (the
            same object on rank 0, an unpickled copy elsewhere). Never hangs on an error: the
            other ranks always receive an outcome.
    """
    if collective.world_size == 1:
        return fn()
    outcome: tuple[str, Any] | None = None
    if collective.rank == 0:
        try:
            outcome = ("ok", fn())
        except Exception as exc:  # every rank must learn of the failure, not hang
            outcome = ("error", exc)
    status, value = collective.broadcast(outcome)
    if status == "error":
        if collective.rank == 0 and outcome is not None:
            raise outcome[1]
        raise value
    return value
