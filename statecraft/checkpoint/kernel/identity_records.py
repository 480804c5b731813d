"""The versioned identity records a run keeps among its named stateful objects (the
``model_roles`` record of the model's copies: a reference, a maintained EMA), compared with the
checkpoint's before any component is read, so a changed objective fails closed with nothing
loaded and no component read.
"""

from __future__ import annotations

from typing import Any

from statecraft.errors import ResumeError

__all__ = ["RESERVED_RECORDS", "check_identity_records"]

#: reserved stateful names the facade registers itself, and how a loop registers them
RESERVED_RECORDS = {"model_roles": "track(reference=...) / track(ema=...) as the saving run did"}


def check_identity_records(tracked: Any, trainer: Any, *, location: str) -> None:
    """Give each tracked stateful object that checks a saved record (``check_saved(saved,
    source=...)``) the checkpoint's record (``None``: it saved none); refuse a reserved record
    the checkpoint saved when this run tracks none.

    Raises:
        ResumeError / TrainerStateError: what ``check_saved`` raises; a reserved record on the
            checkpoint's side only (its fix names ``init_from``). Nothing was loaded.
    """
    source = f"{location}/trainer.pt"
    for name, obj in tracked.stateful.items():
        check = getattr(obj, "check_saved", None)
        if callable(check):
            check(trainer.stateful.get(name), source=source)
    for name in sorted(set(trainer.stateful) - set(tracked.stateful)):
        if name in RESERVED_RECORDS:
            raise ResumeError(
                f"{source}: the checkpoint recorded {name} {trainer.stateful[name]!r} but this "
                f"process tracks no copies of the model; pass {RESERVED_RECORDS[name]} so "
                "they are restored, or start a new run from its weights with "
                "init_from=<the checkpoint> (resume=off or a new name). Nothing was loaded",
                path=location,
                field=name,
            )
