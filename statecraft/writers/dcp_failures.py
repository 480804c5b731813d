"""What a failed ``dcp.save`` / ``dcp.load`` really raised.

DCP wraps every exception of every rank in one ``CheckpointException`` (a ``BaseException``
keyed by rank); :func:`unwrap_checkpoint_exception` picks the one the caller should see.
"""

from __future__ import annotations

from torch.distributed.checkpoint.api import CheckpointException

from statecraft.errors import StatecraftError

__all__ = ["unwrap_checkpoint_exception"]


def unwrap_checkpoint_exception(exc: BaseException) -> BaseException:
    """What DCP's ``CheckpointException`` wraps: a non-``Exception`` (a simulated crash, an
    interrupt) first, then a statecraft error, then any other error (the lowest rank's first);
    else ``exc`` itself. What ``save_dcp_state`` / ``load_dcp_state`` re-raise."""
    if isinstance(exc, CheckpointException):
        for rank in sorted(exc.failures):  # a crash or an interrupt first: never swallowed
            inner = exc.failures[rank][0]
            if not isinstance(inner, Exception):
                return inner
        for rank in sorted(exc.failures):
            inner = exc.failures[rank][0]
            if isinstance(inner, StatecraftError):
                return inner
        for rank in sorted(exc.failures):
            inner = exc.failures[rank][0]
            if isinstance(inner, Exception):
                return inner
    return exc
