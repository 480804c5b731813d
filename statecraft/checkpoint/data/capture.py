"""A save's data capture: every rank's cursor and its source identity, gathered in one
collective, and the ``data.cursor_resume=strict`` refusal of a source without a cursor.

Who calls it: the facade's step capture, on every rank, at every save (in place of
:func:`~statecraft.checkpoint.state.gather_data_state`, which it extends with the identity).
"""

from __future__ import annotations

from typing import Any

from statecraft.checkpoint.data.identity import (
    NO_CURSOR_FIX,
    DataIdentity,
    describe_source,
    has_cursor,
)
from statecraft.checkpoint.state import DataState
from statecraft.checkpoint.state.data_state import capture_cursor
from statecraft.errors import CheckpointError
from statecraft.parallel.collectives import Collective

__all__ = ["capture_data"]


def capture_data(
    source: Any, *, declared: DataIdentity | None, collective: Collective, mode: str
) -> DataState:
    """Every rank's cursor (a deep copy of ``state_dict()``, ``None`` for a source without
    one) and rank 0's source identity, gathered to every rank (a collective).

    Raises:
        CheckpointError: ``mode == "strict"`` and a rank's source has no cursor, or the ranks'
            fingerprints differ; raised on every rank before anything is written.
    """
    rank, world_size = collective.rank, collective.world_size
    root = "data" if world_size == 1 else f"data[rank {rank}]"
    state: Any = None
    problems: list[str] = []
    identity: Any = None
    try:  # a failure on one rank must still reach the collective, or the others would hang
        identity = describe_source(source, declared=declared, world_size=world_size, mode=mode)
    except Exception as exc:
        problems = [
            f"{root}: the identity of {type(source).__name__} could not be taken "
            f"({type(exc).__name__}: {exc}) -- return a Fingerprint or str from fingerprint()"
        ]
    else:
        if has_cursor(source):
            state, problems = capture_cursor(source, root)
    mine = (state, problems, identity)
    gathered = [mine] if world_size == 1 else collective.all_gather(mine)
    identities = [i for _, _, i in gathered]
    lines = [line for _, bad, _ in gathered for line in bad]
    first = identities[0]
    if mode == "strict":
        cursorless = [r for r, i in enumerate(identities) if i is not None and not i.exact]
        if cursorless:
            kind = type(source).__name__
            raise CheckpointError(
                f"data.cursor_resume=strict: the tracked data source ({kind} on rank(s) "
                f"{', '.join(map(str, cursorless))}) has no cursor, so a resume could not "
                f"continue at the exact next batch; nothing was written. Fix: {NO_CURSOR_FIX}; "
                "or set data.cursor_resume=auto to accept a data restart on resume"
            )
    digests = {None if i is None or i.fingerprint is None else i.fingerprint.digest
               for i in identities}  # fmt: skip
    if len(digests) > 1 and not lines:
        raise CheckpointError(
            "the ranks' data sources have different fingerprints "
            f"({', '.join(sorted(str(d)[:12] for d in digests))}): every rank must read the same "
            "source (each its own shard of it); nothing was written"
        )
    return DataState(
        world_size=world_size,
        ranks=tuple(s for s, _, _ in gathered),
        problems=tuple(lines),
        source=None if first is None else first.to_payload(),
    )
