"""The resume rules of the data cursor (``data.cursor_resume``), over the identity saved with
the cursor and the identity of the source tracked now (docs/checkpointing.md, "Data").

In order:

1. a malformed identity fails in every mode (``off`` never reads ``data.pt``);
2. a fingerprint mismatch fails in every mode, naming what changed (rows added, order,
   content, a preprocessing key, an archive);
3. a source without a cursor (now, or when it was saved): ``auto`` restarts the data with a
   note naming the fix, ``strict`` refuses;
4. another world size: the caller's world-size rule (``auto`` restarts the rank-sharded
   source with a warning naming both sizes, ``strict`` refuses);
5. another geometry (batch size, gradient accumulation, seed, sharding): ``auto`` restarts
   the epoch position with a warning naming each change, ``strict`` refuses;
6. otherwise the cursor is restored exactly.

A checkpoint whose ``data.pt`` carries no identity (a ``v1`` or legacy file) skips 1-3 and 5.
Nothing here loads anything; every refusal happens before any object changes.
"""

from __future__ import annotations

import attrs

from statecraft.checkpoint.data.identity import NO_CURSOR_FIX, SourceIdentity
from statecraft.checkpoint.state import DataState
from statecraft.checkpoint.state.data_state import DATA_CORRUPT_FIX
from statecraft.checkpoint.state.problems import state_error
from statecraft.errors import ResumeError

__all__ = ["Verdict", "judge_resume", "saved_identity"]


@attrs.frozen
class Verdict:
    """A decided outcome: ``status`` (the ``ResumeResult.data`` value) and the note to log."""

    status: str
    note: str


def saved_identity(state: DataState, *, where: str) -> SourceIdentity | None:
    """The identity stored with the cursor (``None`` for a v1 or legacy ``data.pt``).

    Raises:
        TrainerStateError: the identity is malformed (naming ``where`` and every problem).
    """
    if state.source is None:
        return None
    identity, problems = SourceIdentity.from_payload(state.source)
    if identity is None:
        raise state_error(where, "data source identity", problems, DATA_CORRUPT_FIX)
    return identity


def judge_resume(
    state: DataState, live: SourceIdentity, *, mode: str, where: str
) -> Verdict | None:
    """The verdict of rules 1-3 and 5 for this rank, or ``None``: restore the cursor, or
    (world size changed) let the caller's world-size rule decide.

    Raises:
        TrainerStateError: rule 1.
        ResumeError: rule 2; rules 3 and 5 under ``strict``.
    """
    saved = saved_identity(state, where=where)
    if saved is None:
        return None
    if saved.fingerprint is not None and live.fingerprint is not None:
        changes = live.fingerprint.changes(saved.fingerprint)
        if changes:
            raise ResumeError(
                f"{where}: the data source is not the one this cursor indexes "
                f"(fingerprint {saved.fingerprint.short} at save, {live.fingerprint.short} now): "
                f"{'; '.join(changes)}. Nothing was loaded. Resume with the source the run was "
                "saved with, or start a new run (or set data.cursor_resume=off to restart the "
                "data source deliberately)",
                path=where,
                changes=changes,
            )
    elif (saved.fingerprint is None) != (live.fingerprint is None) and mode == "strict":
        side = "now" if live.fingerprint is None else "at save"
        raise ResumeError(
            f"{where}: data.cursor_resume=strict cannot prove the data source is the saved one: "
            f"it declared no fingerprint() {side}. Declare fingerprint() on the source (or its "
            "dataset) in both runs, or set data.cursor_resume=auto",
            path=where,
        )
    if not live.exact or not saved.exact:
        which = "the tracked data source has" if not live.exact else "the saved data source had"
        text = (
            f"{where}: {which} no cursor ({live.kind if not live.exact else saved.kind}), so "
            "the data restarts from the beginning of its order (not exact)"
        )
        if mode == "strict":
            raise ResumeError(
                f"{text}; data.cursor_resume=strict refuses. Fix: {NO_CURSOR_FIX}",
                path=where,
            )
        return Verdict("no_cursor", f"{text}. Fix: {NO_CURSOR_FIX}")
    if saved.world_size != live.world_size:
        return None
    changed = [
        f"{name} {old!r} -> {new!r}"
        for (name, old), new in zip(saved.geometry().items(), live.geometry().values(), strict=True)
        if old != new
    ]
    if not changed:
        return None
    text = (
        f"{where}: the data geometry changed since the save ({', '.join(changed)}), so the "
        "saved position does not name the next sample of this run"
    )
    if mode == "strict":
        raise ResumeError(
            f"{text}; data.cursor_resume=strict refuses and nothing was loaded. Relaunch with "
            "the saved settings, or set data.cursor_resume=auto to restart the epoch position",
            path=where,
            changes=changed,
        )
    return Verdict("geometry_changed", f"{text}: the data source restarts its epoch (not exact)")
