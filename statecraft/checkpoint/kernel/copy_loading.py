"""Loading the model's moving copies (``old.pt``, ``ref.pt``) with the rest of a checkpoint,
all or nothing (:func:`~statecraft.checkpoint.kernel.loading.load_all_or_nothing` calls these).

Before anything is applied, :func:`check_copies` runs the copies' own check
(``tracked.copies.check_saved``: the ``model_roles`` identity and the old-storage marker
against the files the checkpoint holds and its step) and matches every copy file's keys,
shapes and dtypes against its live module. :func:`copy_steps` then gives the apply steps: a
saved copy is loaded just before the model (like the model, after the strict check it cannot
fail short of a ``torch`` bug); a copy the checkpoint derives from the policy (an old policy
at a refresh-aligned checkpoint) is rebuilt from the loaded model, after it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from statecraft.checkpoint.kernel.compatibility import model_state_problems
from statecraft.checkpoint.kernel.plan import CHECKPOINT_PLAN, COPY_ENTRIES
from statecraft.errors import ResumeError

__all__ = ["check_copies", "copy_steps"]

#: the reserved stateful name of the copies' record (init_from.roles.IDENTITY_NAME)
_RECORD = "model_roles"


def check_copies(tracked: Any, trainer: Any, parts: Any, *, location: str) -> None:
    """Refuse the checkpoint's copies (``parts.copies``) unless they fit ``tracked``.

    Raises:
        TrainerStateError / ResumeError: what ``tracked.copies.check_saved`` raises; a copy
            file without a tracked copy, or one whose keys or shapes differ (nothing loaded).
    """
    present = frozenset(parts.copies)
    if tracked.copies is not None:
        tracked.copies.check_saved(
            trainer.stateful.get(_RECORD),
            step=trainer.optimizer_step,
            present=present,
            location=location,
        )
    problems: list[str] = []
    for name in COPY_ENTRIES:
        module, payload = getattr(tracked, name, None), parts.copies.get(name)
        file = CHECKPOINT_PLAN.for_tracked(name).name
        if payload is not None and module is None:
            problems.append(f"{file} is saved but this run tracks no such moving copy")
        elif payload is None and module is not None and tracked.copies is None:
            problems.append(f"the checkpoint holds no {file} for the tracked moving copy")
        elif payload is not None:
            problems += [f"{file}: {p}" for p in model_state_problems(module, payload)]
    if problems:
        raise ResumeError(
            f"{location}: the model's copies do not fit the checkpoint: {'; '.join(problems)}. "
            "Nothing was loaded. Track the same copies as the saving run (init_from=<the "
            "checkpoint> starts a new run from its weights)",
            path=location,
            problems=problems,
        )


def copy_steps(
    tracked: Any, parts: Any
) -> tuple[list[tuple[str, Callable[[], Any]]], list[tuple[str, Callable[[], Any]]]]:
    """The apply steps of the copies: ``(before the model, after the model)``."""
    before: list[tuple[str, Callable[[], Any]]] = []
    after: list[tuple[str, Callable[[], Any]]] = []
    for name in COPY_ENTRIES:
        module = getattr(tracked, name, None)
        if module is None:
            continue
        payload = parts.copies.get(name)
        if payload is not None:
            before.append((f"{name} copy", _loader(module, payload)))
        elif tracked.copies is not None:  # derived from the policy (checked first)
            after.append((f"{name} copy", _rebuilder(tracked, name)))
    return before, after


def _loader(module: Any, payload: Any) -> Callable[[], Any]:
    return lambda: module.load_state_dict(payload)


def _rebuilder(tracked: Any, name: str) -> Callable[[], Any]:
    return lambda: tracked.copies.rebuild(name, tracked.model)
