"""Two pieces of :class:`~statecraft.checkpoint.facade.checkpointer.Checkpointer` kept out of the
facade module so it stays a thin list of the loop's calls: the constructor's argument checks
(:func:`check_arguments`) and ``close()`` (:func:`close_facade`).
"""

from __future__ import annotations

import atexit
from typing import TYPE_CHECKING, Any

from statecraft.checkpoint.config import CheckpointConfig
from statecraft.checkpoint.retention.run import RetentionPlan
from statecraft.errors import ConfigError, ConfigIssue, TrackingError

if TYPE_CHECKING:  # the facade imports this module
    from statecraft.checkpoint.facade.checkpointer import Checkpointer

__all__ = ["check_arguments", "close_facade"]


def check_arguments(config: Any, *, quiet: Any, retention: Any) -> None:
    """Refuse the ``Checkpointer`` arguments of the wrong type.

    Raises:
        TrackingError: ``config`` is not a ``CheckpointConfig``.
        ConfigError: ``quiet`` is not ``True`` / ``False`` / ``None``; ``retention`` is not a
            ``RetentionPlan`` or ``None``.
    """
    if not isinstance(config, CheckpointConfig):
        raise TrackingError(f"config must be a CheckpointConfig, got {type(config).__name__}")
    if quiet is not None and not isinstance(quiet, bool):
        raise ConfigError(
            [ConfigIssue("quiet", quiet, "True, False or None (None: the quiet knob)")],
            source="Checkpointer(quiet=...)",
        )
    if retention is not None and not isinstance(retention, RetentionPlan):
        raise ConfigError(
            [ConfigIssue("retention", type(retention).__name__, "a RetentionPlan or None")],
            source="Checkpointer(retention=...)",
        )


def close_facade(ckpt: Checkpointer) -> None:
    """The body of ``Checkpointer.close()`` (which documents it): join the background writes;
    then, whatever the join raised, restore the signal handlers, release the slots and the
    writer lease (and its release at exit)."""
    try:
        ckpt._boundaries.writes.join(ckpt.saves)
    finally:
        ckpt.termination.uninstall()
        ckpt._boundaries.writes.close()
        lease, ckpt.lease = ckpt.lease, None
        ckpt._closed = True
        if ckpt._exit_release is not None:
            atexit.unregister(ckpt._exit_release)
        if lease is not None:
            lease.release()
