"""What ``trainer.pt`` records about the tracked optimizer: whether it ever stepped, and its
class (so a resume can refuse AdamW state loaded into SGD)."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from statecraft.checkpoint.state.problems import describe
from statecraft.errors import TrainerStateError

__all__ = [
    "STEP_TRACE_ATTRIBUTES",
    "STEP_TRACE_GROUP_KEYS",
    "optimizer_class_name",
    "optimizer_is_pristine",
]

#: param-group keys only a ``step()`` creates (a shared group step counter, as fused Adam
#: implementations keep): present on any group means the optimizer stepped
STEP_TRACE_GROUP_KEYS = frozenset({"step"})
#: optimizer attributes a ``step()`` builds lazily (fused Adam's fp32 master weights): a
#: non-empty one means the optimizer stepped
STEP_TRACE_ATTRIBUTES = ("param_groups_master",)


def optimizer_is_pristine(optimizer: torch.optim.Optimizer) -> bool:
    """True when no trace of a ``step()`` exists: every per-parameter state entry is empty, no
    param group holds a key of :data:`STEP_TRACE_GROUP_KEYS` (a shared group counter) and no
    attribute of :data:`STEP_TRACE_ATTRIBUTES` (lazily built master weights) is set and
    non-empty. (A fused Adam whose only parameters are frozen steps with an empty per-parameter
    state; its group counter is what tells.)

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
    if any(entry for entry in state.values()):
        return False
    groups = getattr(optimizer, "param_groups", [])
    if any(STEP_TRACE_GROUP_KEYS & group.keys() for group in groups):
        return False
    return not any(getattr(optimizer, name, None) for name in STEP_TRACE_ATTRIBUTES)


def optimizer_class_name(optimizer: object) -> str:
    """``"<module>.<qualname>"`` of ``optimizer``'s class (``"torch.optim.adamw.AdamW"``): what
    ``trainer.pt`` records so a resume can tell AdamW state from SGD's."""
    kind = type(optimizer)
    return f"{kind.__module__}.{kind.__qualname__}"
