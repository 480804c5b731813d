"""The maintained EMA (``Checkpointer.track(ema=...)``): what it may be, its identity, and its
advance.

The EMA is a ``torch.optim.swa_utils.AveragedModel`` (the one PyTorch ships: with
``multi_avg_fn=get_ema_multi_avg_fn(decay)`` or ``avg_fn=get_ema_avg_fn(decay)`` an exponential
moving average; without, an equal-weight running mean), so no EMA class of statecraft's own.

- **Advanced by statecraft, only after an applied update.** ``record(Outcome.APPLIED)`` calls
  ``ema.update_parameters(model)`` once (after the optimizer and scheduler stepped, before the
  next boundary can save); ``SKIPPED`` (a non-finite or AMP-skipped step) and ``ACCUMULATING``
  never do. The loop must not call ``update_parameters`` itself: the EMA's ``n_averaged``
  counter is compared with the applied-update clock at every applied record, and an update
  made elsewhere is refused (:func:`advance`).
- **Saved with the weights**: in ``model.pt`` under ``@ema.``
  (:mod:`statecraft.checkpoint.kernel.ema_entries`), restored on exact resume with the model.
- **Its identity** (:func:`ema_identity`: mode, averaging function, decay, ``use_buffers``) is
  part of the ``model_roles`` record (:mod:`.roles`) and must match on exact resume.
- ``ema_updates=False`` declares a model-provided EMA statecraft does not advance: it is not
  saved, not restored and not initialized by ``init_from`` (a permanently stale EMA is never
  published), its mode is ``"disabled"``, and rank 0 warns once, at ``track()``.
"""

from __future__ import annotations

import inspect
from typing import Any

from statecraft.checkpoint.state import Outcome
from statecraft.errors import TrackingError

__all__ = ["DISABLED", "advance", "check_ema", "ema_identity"]

#: the identity of a run without a maintained EMA (and of a version-1 record)
DISABLED: dict[str, Any] = {"mode": "disabled"}
_PREFIX = "@ema."  # the model.pt prefix (kernel.ema_entries.EMA_PREFIX): no model entry under it
_TORCH_FACTORIES = ("get_ema_multi_avg_fn", "get_ema_avg_fn")


def check_ema(ema: Any, model: Any, ema_updates: Any) -> None:
    """Refuse what ``track(ema=..., ema_updates=...)`` cannot maintain.

    Raises:
        TrackingError: ``ema`` is not an ``AveragedModel`` or is the model itself,
            ``ema_updates`` is not a bool, or the model has an entry under ``@ema.``.
    """
    from torch.optim.swa_utils import AveragedModel

    if type(ema_updates) is not bool:
        raise TrackingError(f"track(ema_updates={ema_updates!r}): True or False")
    if not isinstance(ema, AveragedModel):
        raise TrackingError(
            f"track(ema=...): {type(ema).__name__} is not a torch.optim.swa_utils.AveragedModel; "
            "wrap the model: AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))"
        )
    if ema is model or ema.module is model:
        raise TrackingError(
            "track(ema=...): the EMA averages the model itself (AveragedModel(model) copies it "
            "unless told otherwise); pass an AveragedModel built over the model"
        )
    clashing = [k for k in model.state_dict() if k.startswith(_PREFIX)]
    if clashing:
        raise TrackingError(
            f"track(ema=...): the model has entries {clashing[:4]} under {_PREFIX!r}, where "
            "model.pt keeps the EMA's; rename that submodule"
        )


def _averaging(ema: Any) -> tuple[str, float | None]:
    """The averaging function's name and, for torch's EMA factories, its decay."""
    fn = getattr(ema, "multi_avg_fn", None) or getattr(ema, "avg_fn", None)
    if fn is None:
        return "mean", None  # AveragedModel's default: the equal-weight running mean (SWA)
    inner = inspect.unwrap(fn)  # torch wraps its update functions in no_grad
    qualname = getattr(inner, "__qualname__", type(inner).__name__)
    factory = qualname.split(".<locals>", 1)[0]
    code, cells = getattr(inner, "__code__", None), getattr(inner, "__closure__", None)
    freevars = code.co_freevars if code is not None else ()
    torch_own = getattr(inner, "__module__", "") == "torch.optim.swa_utils"
    if torch_own and factory in _TORCH_FACTORIES and cells is not None and "decay" in freevars:
        return factory, float(cells[freevars.index("decay")].cell_contents)
    return f"{getattr(inner, '__module__', '?')}.{qualname}", None


def ema_identity(ema: Any, ema_updates: bool) -> dict[str, Any]:
    """The ``ema`` field of the ``model_roles`` record: :data:`DISABLED`, or ``{"mode":
    "enabled", "averaging", "decay" (None unless torch's factory), "use_buffers"}``."""
    if ema is None or not ema_updates:
        return dict(DISABLED)
    averaging, decay = _averaging(ema)
    return {
        "mode": "enabled",
        "averaging": averaging,
        "decay": decay,
        "use_buffers": bool(getattr(ema, "use_buffers", False)),
    }


def advance(ema: Any, model: Any, clocks: Any, outcome: Any, offset: int | None) -> int | None:
    """Record ``outcome`` on ``clocks`` and, for an applied update, advance the EMA once
    (``ema.update_parameters(model)``, after the clock counted it). Returns the ``n_averaged -
    optimizer_step`` offset the next applied update expects (``offset`` ``None``: nothing to
    compare yet, the first applied update of this process).

    Raises:
        TrackingError: ``n_averaged`` moved since the last applied update (the loop calls
            ``update_parameters`` itself, so the EMA would advance twice per step); nothing
            changed, the clock included.
    """
    if outcome != Outcome.APPLIED:
        clocks.record(outcome)
        return offset
    averaged = int(ema.n_averaged)
    now = averaged - clocks.optimizer_step
    if offset is not None and now != offset:
        raise TrackingError(
            f"the EMA's n_averaged is {averaged} before applied update "
            f"{clocks.optimizer_step + 1}, {now - offset:+d} since statecraft's last update: the "
            "loop updates it too. statecraft advances a tracked EMA at record(Outcome.APPLIED); "
            "remove the loop's ema.update_parameters(...) call"
        )
    clocks.record(outcome)
    ema.update_parameters(model)
    return now
