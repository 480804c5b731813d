"""A maintained EMA's entries in the model component (``model.pt``), beside the model's.

The reference contract keeps the maintained EMA with the weights: ``model.pt`` holds the
model's ``state_dict()`` entries unchanged plus the EMA's (a
``torch.optim.swa_utils.AveragedModel``: ``module.<entry>`` and ``n_averaged``) under
:data:`EMA_PREFIX`, so ``@ema.module.lm_head.weight`` and ``@ema.n_averaged``. The prefix
cannot be a module attribute path (``@`` is not in an identifier), and ``track(ema=...)``
refuses a model with an entry under it. Readers of the model's weights only
(``load_weights``, ``init_from``) drop the EMA entries with :func:`split_ema`.

The crash harness's coverage of ``model.pt`` covers these entries: they are written, digested
and committed as part of the same file.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

__all__ = ["EMA_PREFIX", "model_payload", "split_ema"]

EMA_PREFIX = "@ema."


def model_payload(model: Any, ema: Any) -> Any:
    """The model component's state: ``model.state_dict()``, plus the EMA's entries under
    :data:`EMA_PREFIX` when ``ema`` is not ``None`` (references to the live tensors, as a
    ``state_dict()`` is)."""
    state = model.state_dict()
    if ema is None:
        return state
    state.update((EMA_PREFIX + key, value) for key, value in ema.state_dict().items())
    return state


def split_ema(state: Any) -> tuple[Any, dict[str, Any] | None]:
    """``state`` (a model component) as ``(the model's entries, the EMA's entries without the
    prefix or None when it holds none)``; a non-mapping is returned as is, with ``None``."""
    if not hasattr(state, "items") or not any(
        isinstance(k, str) and k.startswith(EMA_PREFIX) for k in state
    ):
        return state, None
    model: OrderedDict[str, Any] = OrderedDict()
    ema: dict[str, Any] = OrderedDict()
    for key, value in state.items():
        if isinstance(key, str) and key.startswith(EMA_PREFIX):
            ema[key[len(EMA_PREFIX) :]] = value
        else:
            model[key] = value
    metadata = getattr(state, "_metadata", None)
    if metadata is not None:
        model._metadata = metadata  # type: ignore[attr-defined]
    return model, ema
