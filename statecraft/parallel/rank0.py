"""Rank-0 decide-and-broadcast: the one way a decision made on rank 0 reaches every rank.

::

    attempt = on_rank_zero(collective, lambda: resolve(...))

Rank 0 calls ``fn``; its value, or the exception it raised, is broadcast; every rank returns
the same value or raises. Every rank must call ``on_rank_zero`` at the same point (it is a
collective). Used by attempt resolution (``layout.resolve_run_attempt``), the save facade
(``Checkpointer.save``) and the engine's coordinator effects (``Machine.run(collective=...)``).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any, TypeVar

import attrs

from statecraft.parallel.collectives import Collective

__all__ = ["ErrorCopy", "on_rank_zero", "portable_error", "restore_error"]

T = TypeVar("T")


@attrs.frozen
class ErrorCopy:
    """An exception that does not survive pickling as itself (its ``__init__`` takes other
    arguments than its ``args``, like ``CheckpointCorruptError(path, problem, fix)``), sent
    as its class, message and structured fields; :func:`restore_error` rebuilds it."""

    kind: type[BaseException]
    message: str
    fields: dict[str, Any]


def portable_error(exc: BaseException) -> BaseException | ErrorCopy:
    """``exc`` itself when it round-trips through pickle, else an :class:`ErrorCopy`."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # any failure to rebuild: send the copy instead
        return ErrorCopy(type(exc), str(exc), dict(getattr(exc, "__dict__", {})))
    return exc


def restore_error(sent: BaseException | ErrorCopy) -> BaseException:
    """The exception :func:`portable_error` sent: same class, message and fields."""
    if not isinstance(sent, ErrorCopy):
        return sent
    rebuilt = sent.kind.__new__(sent.kind)
    BaseException.__init__(rebuilt, sent.message)
    rebuilt.__dict__.update(sent.fields)
    return rebuilt


def on_rank_zero(collective: Collective, fn: Callable[[], T]) -> T:
    """Run ``fn`` on rank 0 and return its value on every rank.

    Args:
        collective: the ranks taking part (a world of one just calls ``fn``).
        fn: called on rank 0 only, with no arguments.

    Returns:
        rank 0's value, on every rank.

    Raises:
        Exception: rank 0's exception, re-raised on every rank with rank 0's message (the
            same object on rank 0; elsewhere a copy of the same class with the same message
            and fields, even when the exception does not pickle as itself). Never hangs on an
            error: the other ranks always receive an outcome.
    """
    if collective.world_size == 1:
        return fn()
    outcome: tuple[str, Any] | None = None
    raise_here: Exception | None = None
    if collective.rank == 0:
        try:
            outcome = ("ok", fn())
        except Exception as exc:  # every rank must learn of the failure, not hang
            raise_here = exc
            outcome = ("error", portable_error(exc))
    status, value = collective.broadcast(outcome)
    if status == "error":
        if raise_here is not None:  # rank 0: its own exception object
            raise raise_here
        raise restore_error(value)
    return value
