"""What ``trainer.pt`` records about the tracked optimizer: whether it ever stepped, and its
class (so a resume can refuse AdamW state loaded into SGD)."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from statecraft.checkpoint.state.problems import describe
from statecraft.errors import TrainerStateError

__all__ = ["optimizer_class_name", "optimizer_is_pristine"]


def optimizer_is_pristine(optimizer: torch.optim.Optimizer) -> bool:
    """True when ``optimizer`` holds no per-parameter state, i.e. it never stepped.

    Limitation: only ``optimizer.state`` is read. An optimizer that keeps a step trace on its
    param groups (a shared group counter, lazily built master weights, as some fused Adam
    implementations do) can have stepped with an empty per-parameter state and is then wrongly
    reported pristine; such optimizers need their own probe.

    Raises:
        TrainerStateError: ``optimizer`` has no ``state`` mapping.

    Example:
        >>> opt = torch.optim.AdamW(torch.nn.Linear(2, 2).parameters())
        >>> optimizer_is_pristine(opt)
        True
    """
    state = getattr(optimizer, "state", None)
    if not isinstance(state, Mapping):
        raise TrainerStateError(
            f"optimizer_is_pristine() expects a torch optimizer with a 'state' mapping; got "
            f"{describe(optimizer)}; pass the torch.optim.Optimizer itself"
        )
    return all(not entry for entry in state.values())


def optimizer_class_name(optimizer: object) -> str:
    """``"<module>.<qualname>"`` of ``optimizer``'s class (``"torch.optim.adamw.AdamW"``): what
    ``trainer.pt`` records so a resume can tell AdamW state from SGD's."""
    kind = type(optimizer)
    return f"{kind.__module__}.{kind.__qualname__}"
