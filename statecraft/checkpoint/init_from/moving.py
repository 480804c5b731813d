"""The model's **moving** copies: a moving old policy (``track(old=..., old_update_every=N)``)
and a moving reference (``track(reference=..., reference_update_every=N)``, ``N > 0``).

A moving copy is training state. It is refreshed from the policy (``refresh(policy, copy)``,
default: ``copy.load_state_dict(policy.state_dict())``) only after an applied optimizer update
whose step is a multiple of its cadence: ``step_end()`` (and ``save()`` / ``finalize()``) does
it first, before any save of that boundary, so a rejected update never moves it. When it was
last refreshed (``*_refreshed_at``) is recorded in the ``model_roles`` record of
``trainer.pt``.

============================  ===========================================================
checkpoint                    what holds the copy
============================  ===========================================================
moving reference              ``ref.pt``, whole, at every checkpoint
old, refresh-aligned          nothing: ``old.pt`` is omitted, and the ``model_roles``
                              record's ``old_storage`` is the versioned marker
                              ``{"version": 1, "mode": "derived_from_policy", "step": s,
                              "update_every": N}``; exact resume loads the policy, then
                              rebuilds old with the refresh function
old, off cadence, emergency   ``old.pt``, whole (``old_storage`` ``{"mode": "full", ...}``)
============================  ===========================================================

A checkpoint is refresh-aligned when old was refreshed at exactly its step (``s % N == 0``,
the refresh of that boundary done). Exact resume checks the marker before anything is loaded
(:func:`check_saved`): its version, its mode against the files the manifest lists, and for a
derived old its step and cadence against the checkpoint's clock and this run's cadence; any
disagreement fails closed with the fix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from statecraft.errors import ResumeError, TrackingError, TrainerStateError

__all__ = [
    "DERIVED",
    "FULL",
    "MARKER_VERSION",
    "MovingCopy",
    "check_saved",
    "copy_state",
    "moving_copy",
    "storage_marker",
]

#: the ``old_storage`` marker's version and modes
MARKER_VERSION = 1
DERIVED = "derived_from_policy"
FULL = "full"

_FIX = (
    "Exact resume continues the same objective only; to start a new run from these weights, "
    "set init_from=<this checkpoint> in a new run (resume=off or a new name)"
)


def copy_state(policy: Any, copy: Any) -> None:
    """The default refresh: ``copy`` takes every entry of the policy's ``state_dict``."""
    copy.load_state_dict(policy.state_dict())


@attrs.define(eq=False)
class MovingCopy:
    """One moving copy.

    Attributes:
        role: ``"old"`` or ``"reference"`` (the ``track`` keyword).
        entry: the checkpoint plan's tracked attribute (``"old"`` -> ``old.pt``, ``"ref"`` ->
            ``ref.pt``).
        module: the copy.
        every: the refresh cadence in optimizer steps (>= 1).
        refresh: ``refresh(policy, copy)``.
        refreshed_at: the step of the last refresh (``None``: never refreshed).
    """

    role: str
    entry: str
    module: Any
    every: int
    refresh: Callable[[Any, Any], None]
    refreshed_at: int | None = None

    def refresh_from(self, policy: Any, step: int) -> None:
        """Refresh from ``policy`` after the applied update ``step``."""
        self.refresh(policy, self.module)
        self.refreshed_at = step


def moving_copy(role: str, module: Any, every: Any, refresh: Any) -> MovingCopy:
    """A checked :class:`MovingCopy` (``every`` >= 1).

    Raises:
        TrackingError: ``module`` has no ``state_dict`` / ``load_state_dict``, ``every`` is not
            an int >= 1, or ``refresh`` is not callable.
    """
    for method in ("state_dict", "load_state_dict"):
        if not callable(getattr(module, method, None)):
            raise TrackingError(
                f"track({role}=...): {type(module).__name__} has no {method}; pass the "
                f"{role} nn.Module"
            )
    if type(every) is not int or every < 1:
        raise TrackingError(
            f"track({role}_update_every={every!r}): a moving {role} needs an int >= 1 (the "
            "optimizer steps between refreshes from the policy)"
        )
    if refresh is not None and not callable(refresh):
        raise TrackingError(
            f"track({role}_refresh={refresh!r}): a callable refresh(policy, {role}) "
            "(default: a copy of the policy's state_dict)"
        )
    entry = "old" if role == "old" else "ref"
    return MovingCopy(role, entry, module, every, refresh or copy_state)


def storage_marker(old: MovingCopy, step: int, *, emergency: bool) -> dict[str, Any]:
    """How a save of ``step`` stores ``old``: derived at a refresh-aligned, non-emergency
    checkpoint (``old.pt`` omitted), else full."""
    aligned = old.refreshed_at == step and step % old.every == 0 and not emergency
    return {
        "version": MARKER_VERSION,
        "mode": DERIVED if aligned else FULL,
        "step": step,
        "update_every": old.every,
    }


def _marker_problems(marker: Any, *, old_every: int, step: int, present: bool) -> list[str]:
    """Every way the saved ``old_storage`` marker disagrees with the checkpoint."""
    if not isinstance(marker, dict) or marker.get("version") != MARKER_VERSION:
        version = marker.get("version") if isinstance(marker, dict) else marker
        return [f"old_storage has version {version!r}; this release reads {MARKER_VERSION}"]
    mode, at, every = marker.get("mode"), marker.get("step"), marker.get("update_every")
    problems = []
    if mode not in (DERIVED, FULL):
        problems.append(f"old_storage mode {mode!r} is neither {DERIVED!r} nor {FULL!r}")
    if at != step:
        problems.append(f"old_storage step {at!r} is not the checkpoint's step {step}")
    if every != old_every:
        problems.append(f"old_storage update_every {every!r}, this run {old_every}")
    if mode == DERIVED:
        if present:
            problems.append(f"old_storage is {DERIVED!r} but the checkpoint holds old.pt")
        if type(every) is int and every > 0 and type(at) is int and at % every:
            problems.append(f"old_storage is {DERIVED!r} at step {at}, off its cadence {every}")
    elif mode == FULL and not present:
        problems.append("old_storage is 'full' but the checkpoint holds no old.pt")
    return problems


def check_saved(
    saved: Any,
    mine: dict[str, Any],
    *,
    step: int,
    present: frozenset[str],
    location: str,
) -> None:
    """Before anything is loaded: the saved ``model_roles`` record (``saved``) and the copy
    files the checkpoint holds (``present``: ``"old"``, ``"ref"``) against this run's record
    (``mine``) and the checkpoint's ``step``.

    Raises:
        TrainerStateError: the copies are kept differently, or the old-storage marker is
            unknown, malformed or disagrees with the files, the step or the cadence.
        ResumeError: a copy file the run does not keep, or a moving reference without
            ``ref.pt``.
    """
    where = f"{location}/trainer.pt"
    if not isinstance(saved, dict):  # none saved: the stateful-name check names the fix
        return
    problems: list[str] = []
    if mine.get("old") == "moving":
        problems += _marker_problems(
            saved.get("old_storage"),
            old_every=mine["old_update_every"],
            step=step,
            present="old" in present,
        )
    if problems:
        raise TrainerStateError(
            f"{where}: the moving old policy's storage marker does not agree with the "
            f"checkpoint ({'; '.join(problems)}); it cannot be continued. Resume from another "
            f"checkpoint, or: {_FIX}",
            field="model_roles.old_storage",
            problems=problems,
        )
    stray = sorted(
        f"{name}.pt"
        for name, kept in (("old", "old"), ("ref", "reference"))
        if name in present and mine.get(kept) != "moving"
    )
    missing = ["ref.pt"] if mine.get("reference") == "moving" and "ref" not in present else []
    if stray or missing:
        raise ResumeError(
            f"{location}: the checkpoint holds {stray or 'no stray copy'} and lacks "
            f"{missing or 'nothing'} for the copies this run keeps; track the same copies as "
            f"the saving run. {_FIX}",
            path=location,
        )
