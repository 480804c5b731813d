"""Errors of a checkpoint transaction and what it is given: the base :class:`CheckpointError`,
a plan that drifted, bytes that do not match their manifest, trainer state that is malformed or
unsafe to save, an object ``Checkpointer.track`` cannot checkpoint."""

from __future__ import annotations

from statecraft.errors._base import StatecraftError

__all__ = [
    "CheckpointCorruptError",
    "CheckpointError",
    "PlanDriftError",
    "TrackingError",
    "TrainerStateError",
    "UnsafeStateError",
]


class CheckpointError(StatecraftError, RuntimeError):
    """A checkpoint transaction cannot proceed without risking committed state."""

    code = "checkpoint_error"


class PlanDriftError(CheckpointError):
    """A same-iteration retry asked for a different plan than the committed one.

    A committed iteration is never rewritten; the retry fails closed.
    """

    code = "plan_drift"


class CheckpointCorruptError(CheckpointError):
    """A checkpoint's bytes or records do not match what its manifest promises."""

    code = "checkpoint_corrupt"
    path: str
    problem: str

    def __init__(self, path: str, problem: str, what_to_do: str = "") -> None:
        tail = f" {what_to_do}" if what_to_do else ""
        super().__init__(f"{path}: {problem}.{tail}", path=path, problem=problem)


class TrainerStateError(CheckpointError, ValueError):
    """Trainer control state (clocks, RNG, scheduler identity) is malformed or contradictory.

    Fields (when built from a payload): ``source`` (the file), ``problems`` (every bad field).
    """

    code = "trainer_state"
    source: str
    problems: list[str]


class UnsafeStateError(TrainerStateError):
    """A save was refused before anything was written: the state to save holds values that
    ``torch.load(weights_only=True)`` cannot read back (a NumPy scalar, a custom class), so
    every resume from the checkpoint would fail. Fields: ``source`` (what was refused),
    ``problems`` (one line per value: key path, type, what to convert it to), ``paths`` (the
    key paths alone)."""

    code = "unsafe_state"


class TrackingError(StatecraftError, TypeError):
    """An object registered with ``Checkpointer.track`` cannot be checkpointed, or a required
    one is missing."""

    code = "tracking"
