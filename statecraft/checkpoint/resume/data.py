"""The data source's part of a resume: whether a verified checkpoint can restore the tracked
data source as ``data.cursor_resume`` requires (:func:`fit_problem`), and what happens to it
(:func:`data_status`). Helpers of :mod:`statecraft.checkpoint.resume.bindings`; nothing is
loaded here.
"""

from __future__ import annotations

import logging

from statecraft.checkpoint.data import describe_source, judge_resume
from statecraft.checkpoint.kernel.plan import CHECKPOINT_PLAN
from statecraft.checkpoint.kernel.verify import VerifiedCheckpoint
from statecraft.checkpoint.resume.records import ResumeContext
from statecraft.checkpoint.resume.source import SourcedCheckpoint
from statecraft.checkpoint.state import DataState
from statecraft.errors import ResumeError

__all__ = ["add_note", "data_status", "fit_problem"]

log = logging.getLogger("statecraft.resume")


def fit_problem(ctx: ResumeContext, chosen: VerifiedCheckpoint | SourcedCheckpoint) -> str | None:
    """Why ``chosen`` verifies but cannot be this resume's source, or ``None``: the process
    tracks a data source under ``data.cursor_resume=strict`` and the checkpoint has no
    ``data.pt`` (a resume that requires the exact data cursor must not restart it)."""
    if ctx.tracked.data is None or ctx.cursor_resume != "strict":
        return None
    if not isinstance(chosen, VerifiedCheckpoint):
        has_data = chosen.has_data
    elif chosen.legacy_payload is not None:
        has_data = chosen.legacy_payload.get("data") is not None
    else:
        has_data = chosen.manifest is not None and "data.pt" in chosen.manifest.files
    if has_data:
        return None
    return (
        f"{chosen.location}: data.cursor_resume=strict and a data source is tracked, but the "
        "checkpoint has no data.pt (its data cursor was not saved), so the data source would "
        "restart; resume from a checkpoint saved with the data source tracked, or set "
        "data.cursor_resume=auto to accept a non-exact data restart"
    )


def add_note(ctx: ResumeContext, note: str) -> None:
    """Log ``note`` as a warning and return it in the result's notes."""
    log.warning(note)
    ctx.notes.append(note)


def data_status(
    ctx: ResumeContext, chosen: VerifiedCheckpoint | SourcedCheckpoint, state: DataState | None
) -> str:
    """What will happen to this rank's data source (nothing is loaded here).

    The identity saved with the cursor is judged first
    (:func:`~statecraft.checkpoint.data.judge_resume`: fingerprint, cursor, geometry); any
    status but ``"restored"`` leaves the data source in its fresh state.

    Raises:
        ResumeError: ``data.cursor_resume=strict`` and ``data.pt`` was saved at another world
            size, or by or for a source without a cursor, or with another geometry; in any
            mode, the source's fingerprint changed (refused before anything loads).
        TrainerStateError: the saved source identity is malformed.
    """
    tracked = ctx.tracked
    if ctx.cursor_resume == "off":
        log.info("data.cursor_resume=off: the data source starts fresh (not exact)")
        return "off"
    if tracked.data is None:
        if state is not None:
            log.warning(
                "%s holds data source state but no data source is tracked; ignored", chosen.location
            )
        return "untracked"
    if state is None:  # strict was refused by fit_problem before anything was read
        add_note(
            ctx,
            f"{chosen.location} has no data.pt: the tracked data source restarts from its "
            "current position (not exact); set data.cursor_resume=strict to refuse such a "
            "checkpoint",
        )
        return "missing"
    world_size = ctx.collective.world_size
    where = f"{chosen.location}/{CHECKPOINT_PLAN.for_tracked('data').name}"
    live = describe_source(tracked.data, declared=tracked.data_identity, world_size=world_size)
    verdict = judge_resume(state, live, mode=ctx.cursor_resume, where=where)
    if verdict is not None:
        add_note(ctx, verdict.note)
        return verdict.status
    if state.state_for(ctx.collective.rank, world_size) is None:
        if ctx.cursor_resume == "strict":
            raise ResumeError(
                f"{where} holds the data state of {state.describe_saver()} and this job runs "
                f"{world_size}: data.cursor_resume=strict requires each rank's own saved data "
                "cursor, so nothing was loaded. Relaunch with the same number of ranks "
                f"({state.world_size}), or set data.cursor_resume=auto to resume with the data "
                "sources restarted (not exact)",
                path=where,
                saved_world_size=state.world_size,
                world_size=world_size,
            )
        if ctx.collective.rank == 0:
            log.warning(
                "%s was saved by %s and this job has %d: no saved data state is this rank's "
                "own, so every data source keeps its fresh state (not exact); resume at the "
                "saving world size for the exact data cursor, or set data.cursor_resume=strict "
                "to refuse",
                where,
                state.describe_saver(),
                world_size,
            )
        ctx.notes.append(
            f"{where} was saved by {state.describe_saver()} and this job has {world_size}: "
            "the data sources keep their fresh state (not exact)"
        )
        return "topology_changed"
    return "restored"
