"""Capturing the trainer state of the tracked objects at a step, for ``trainer.pt``: the one
place every save path (full, DCP, direct, artifact) builds its :class:`TrainerState`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from statecraft.checkpoint.state.data_state import DataState
from statecraft.checkpoint.state.trainer_payload import TrainerState
from statecraft.checkpoint.state.validation_state import ValidationState
from statecraft.parallel.collectives import Collective

__all__ = ["capture_trainer", "gather_into"]


def capture_trainer(
    tracked: Any, *, rng: Any, data: DataState | None, validation: ValidationState | None = None
) -> TrainerState:
    """The trainer state of the tracked objects at this step, for ``trainer.pt``.

    Raises:
        UnsafeStateError: a value (here or in ``data``) would not load back with
            ``torch.load(weights_only=True)``; nothing is written.
        TrainerStateError: the accumulation window is open.
    """
    return TrainerState.capture(
        tracked.clocks,
        rng=rng,
        scheduler=tracked.scheduler,
        scheduler_identity=tracked.scheduler_identity,
        optimizer=tracked.optimizer,
        extra=tracked.loop_state,
        stateful=tracked.stateful,
        unsafe_elsewhere=() if data is None else data.problems,
        validation=validation,
    )


def gather_into(collective: Collective) -> Callable[[list[Any], Any], None]:
    """An ``all_gather_object``-shaped function over ``collective`` (for the RNG inventory)."""

    def all_gather_object(out: list[Any], value: Any) -> None:
        out[:] = collective.all_gather(value)

    return all_gather_object
