"""What one step boundary did: :class:`StepEnd`, the value of ``Checkpointer.step_end()``.

::

    end = ckpt.step_end()
    if end.saved is not None:
        print(f"saved iter {end.saved.iteration}")
    if end.artifact is not None:        # a partial plan: checkpoint_artifacts/iter_*
        print(f"artifact iter {end.artifact.iteration}: {end.artifact.components}")
    if end.validated:                   # the evaluation ran at this step
        print(f"validated: {end.metrics}")
    if end:                     # bool(end) is end.stop: the loop must stop now
        break

``if ckpt.step_end(): break`` reads as before: a ``StepEnd`` is true exactly when the loop
must stop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:  # the facade imports this module; the report types are only annotated
    from statecraft.checkpoint.artifacts.saving import ArtifactReport
    from statecraft.checkpoint.async_writes.write_slot import PendingSave
    from statecraft.checkpoint.save.saving import SaveReport
    from statecraft.checkpoint.stop.records import EmergencyReport
    from statecraft.checkpoint.validation.saving import ValidationReport

__all__ = ["StepEnd"]


@attrs.frozen
class StepEnd:
    """The outcome of one ``Checkpointer.step_end()`` call.

    Attributes:
        saved: the report of the full checkpoint this boundary saved (a regular save, or the
            evaluation-pending save of a durable validation); on rank 0 (``None`` on other
            ranks, and ``None`` when no checkpoint was saved); for an asynchronous save
            (``save_async=true``) the ``PendingSave`` (``wait()`` gives the report).
        artifact: the report of the partial artifact this boundary committed
            (``checkpoint_artifacts/iter_*``, a partial plan), on rank 0; else ``None``.
        metrics: the evaluation's metrics when it ran at this boundary (``None`` otherwise).
        validated: the evaluation ran and succeeded at this boundary (every rank).
        validation: the durable validation's report (its stage: published), on rank 0.
        stop: the loop must stop now: a termination (signal, sentinel file, deadline) was
            decided at this boundary, on every rank alike; the emergency save is durable and
            the DONE record written (``finalize()`` then only joins; exit 0).
        reason: why the loop must stop (``sentinel``, ``signal SIGTERM``, ...; ``None`` while
            ``stop`` is false).
        emergency: what the emergency save did at a stop (``None`` otherwise); its ``kind``
            is ``COVERED`` when the step was already on disk.

    ``bool(step_end)`` is ``stop``, so ``if ckpt.step_end(): break`` stops exactly when asked.

    Example:
        >>> bool(StepEnd(saved=None, stop=False, reason=None))
        False
    """

    saved: SaveReport | PendingSave | None = None
    stop: bool = False
    reason: str | None = None
    artifact: ArtifactReport | None = None
    metrics: dict[str, float] | None = None
    validated: bool = False
    validation: ValidationReport | None = None
    emergency: EmergencyReport | None = None

    def __bool__(self) -> bool:
        return self.stop
