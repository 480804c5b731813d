"""The boundary's ``loop_state``: an opaque mapping of JSON scalars the loop hands to a save,
recorded verbatim in the ``_SUCCESS`` marker and returned verbatim by
``Checkpointer.committed_loop_state()``. statecraft never interprets it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from statecraft.errors import TrackingError

__all__ = ["LoopScalar", "check_loop_state"]

#: what one loop_state value may be
LoopScalar = str | int | float | bool | None


def _problem(key: object, value: object) -> str | None:
    if not isinstance(key, str) or not key:
        return f"key {key!r} is not a non-empty str"
    if value is None or isinstance(value, str | bool | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{key!r}: {value!r} is not a finite number"
    return f"{key!r}: a {type(value).__name__} is not a JSON scalar"


def check_loop_state(loop_state: object) -> dict[str, Any]:
    """``loop_state`` checked and copied: a mapping of non-empty str keys to JSON scalars
    (str, int, finite float, bool, None).

    Raises:
        TrackingError: not a mapping, or an entry breaks the rule (every bad entry named).
    """
    if loop_state is None:
        return {}
    if not isinstance(loop_state, Mapping):
        raise TrackingError(
            f"save(loop_state=...) expects a mapping of str to JSON scalars; got "
            f"{type(loop_state).__name__}; pass e.g. {{'critic_warmup_iterations': 4}}"
        )
    problems = [p for k, v in loop_state.items() if (p := _problem(k, v)) is not None]
    if problems:
        raise TrackingError(
            f"save(loop_state=...): {'; '.join(problems)}. loop_state holds JSON scalars "
            "only (str, int, finite float, bool, None), recorded verbatim in _SUCCESS; keep "
            "tensors and nested values in a role's state instead"
        )
    return dict(loop_state)
