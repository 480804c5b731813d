"""Per-rank data source state: the payload of ``data.pt``.

Under ``torch.distributed`` every rank reads its own shard, so every rank's data source has its
own position. At a save every rank's ``state_dict()`` is gathered to rank 0
(:func:`gather_data_state`) and written as one payload::

    {"schema": "statecraft.data-state.v2", "world_size": 2, "ranks": [state_0, state_1],
     "source": {...}}

``source`` is the source identity stored with the cursor (kind, exact-capable, fingerprint,
seed, sharding, world size, geometry), built and judged by :mod:`statecraft.checkpoint.data`;
this module only carries it. A ``v1`` payload (no ``source``) is still read: its identity is
unknown (``source`` is ``None``).

On resume each rank restores its own entry (:meth:`DataState.state_for`). At another world size
no entry belongs to any rank: ``data.cursor_resume`` decides (``auto``: a warning, the data
source keeps its fresh state, ``ResumeResult.data == "topology_changed"``; ``strict``: refuse
before anything loads; ``off``: ``data.pt`` is not read). A payload without the schema key is a
legacy file: the state of one data source, written by rank 0 alone before data state was per
rank; it counts as the state of a world of one.

The call order, and who calls each step:

1. save, every rank: ``gather_data_state(data, collective=...)`` (a collective) -- each rank
   checks its own state with :func:`~statecraft.checkpoint.state.safe_values.unsafe_paths`
   and sends nothing unsafe; rank 0 then writes ``state.to_payload()``;
2. resume, every rank: ``DataState.from_payload(torch.load(...), source=path)``, then
   ``state.state_for(rank, world_size)``.
"""

from __future__ import annotations

import copy
from typing import Any

import attrs

from statecraft.checkpoint.state.canonical import canonical
from statecraft.checkpoint.state.problems import describe, is_int, state_error
from statecraft.checkpoint.state.safe_values import unsafe_paths
from statecraft.parallel.collectives import Collective

__all__ = ["DATA_CORRUPT_FIX", "DATA_STATE_SCHEMA", "DATA_STATE_V1", "DataState",
           "capture_cursor", "gather_data_state"]  # fmt: skip

DATA_STATE_SCHEMA = "statecraft.data-state.v2"
DATA_STATE_V1 = "statecraft.data-state.v1"
_SCHEMA_PREFIX = "statecraft.data-state."
_KEYS = {
    DATA_STATE_V1: frozenset({"schema", "world_size", "ranks"}),
    DATA_STATE_SCHEMA: frozenset({"schema", "world_size", "ranks", "source"}),
}
DATA_CORRUPT_FIX = (
    "This data state cannot be resumed exactly; restore data.pt from an intact copy, resume "
    "from another checkpoint, or set data.cursor_resume=off to restart the data source."
)


@attrs.frozen(kw_only=True)
class DataState:
    """Every rank's data source state at one checkpoint.

    Attributes:
        world_size: the number of ranks that saved it (1 for a legacy file).
        ranks: the state of each rank's data source, indexed by rank.
        legacy: read from a legacy (schema-less, single-state) ``data.pt``.
        problems: lines naming values that ``torch.load(weights_only=True)`` could not read
            back (found at capture, on the rank that owns them; see :func:`gather_data_state`);
            empty for a state read from a file.
        source: the source identity payload stored with the cursor (``None``: a v1 or legacy
            file, or a state gathered without one).
    """

    world_size: int
    ranks: tuple[Any, ...]
    legacy: bool = False
    problems: tuple[str, ...] = ()
    source: dict[str, Any] | None = None

    def to_payload(self) -> dict[str, Any]:
        """The ``weights_only``-safe payload to ``torch.save`` as ``data.pt``; every rank's
        state in :func:`~statecraft.checkpoint.state.canonical.canonical` form (the same
        state gives the same bytes). Without a source identity it is the v1 payload."""
        payload: dict[str, Any] = {
            "schema": DATA_STATE_SCHEMA if self.source is not None else DATA_STATE_V1,
            "world_size": self.world_size,
            "ranks": canonical(list(self.ranks)),
        }
        if self.source is not None:
            payload["source"] = canonical(self.source)
        return payload

    def state_for(self, rank: int, world_size: int) -> Any | None:
        """This rank's saved state, or ``None`` when the world size changed (no entry is
        this rank's own)."""
        if world_size != self.world_size:
            return None
        return self.ranks[rank]

    def describe_saver(self) -> str:
        """``"2 ranks"`` / ``"1 rank"`` / the legacy wording, for messages."""
        if self.legacy:
            return "1 rank (a legacy data.pt, written by rank 0 alone)"
        return f"{self.world_size} rank{'s' if self.world_size != 1 else ''}"

    @classmethod
    def from_payload(cls, payload: object, *, source: str) -> DataState:
        """Validate a loaded ``data.pt`` payload.

        A payload that is not a dict whose ``schema`` starts with ``statecraft.data-state.``
        is a legacy single-rank state (whatever the data source's ``state_dict`` was).

        Raises:
            TrainerStateError: a per-rank payload of an unknown version, with unexpected keys,
                a bad world size or a rank list of another length; naming ``source``.
        """
        schema = payload.get("schema") if isinstance(payload, dict) else None
        if not (isinstance(schema, str) and schema.startswith(_SCHEMA_PREFIX)):
            return cls(world_size=1, ranks=(payload,), legacy=True)
        if not isinstance(payload, dict):  # pragma: no cover - narrowed above
            raise TypeError(payload)
        problems = []
        keys = _KEYS.get(schema)
        if keys is None:
            problems.append(
                f"schema: expected {DATA_STATE_SCHEMA!r} (or {DATA_STATE_V1!r}); got {schema!r}; "
                "a newer writer made this file, read it with the statecraft release that wrote it"
            )
        problems += [
            f"unexpected key {k!r} (not part of {schema if keys else DATA_STATE_SCHEMA})"
            for k in payload
            if k not in (keys or _KEYS[DATA_STATE_SCHEMA])
        ]
        identity: Any = payload.get("source")
        if schema == DATA_STATE_SCHEMA and type(identity) is not dict:
            got = describe(identity)
            problems.append(f"source: expected the source identity (a dict); got {got}")
        world_size: Any = payload.get("world_size")
        ranks: Any = payload.get("ranks")
        if not is_int(world_size) or world_size < 1:
            problems.append(f"world_size: expected an int >= 1; got {describe(world_size)}")
        if type(ranks) is not list:
            problems.append(f"ranks: expected a list of per-rank states; got {describe(ranks)}")
        elif is_int(world_size) and len(ranks) != world_size:
            problems.append(
                f"ranks: expected {world_size} entries (one per rank); got {len(ranks)}"
            )
        if problems:
            raise state_error(source, "data state", problems, DATA_CORRUPT_FIX)
        return cls(world_size=int(world_size), ranks=tuple(ranks), source=identity)


def capture_cursor(data: Any, root: str) -> tuple[Any, list[str]]:
    """This rank's ``data.state_dict()`` as a deep copy, and the lines naming what in it is
    unsafe to save (``root`` prefixes each path); the state is ``None`` when there is any.
    Never raises: a ``state_dict()`` that fails becomes one line, so that every rank still
    reaches the collective that follows (or the others would hang)."""
    try:
        state = copy.deepcopy(data.state_dict())
        problems = unsafe_paths(state, root)
    except Exception as exc:
        return None, [
            f"{root}: {type(data).__name__}.state_dict() could not be captured "
            f"({type(exc).__name__}: {exc}) -- return plain values (numbers, strings, lists, "
            "dicts, tensors) from state_dict()"
        ]
    return (None if problems else state), problems


def gather_data_state(data: Any, *, collective: Collective) -> DataState:
    """Every rank's ``data.state_dict()`` (a deep copy), gathered to every rank.

    A collective: every rank calls it at the same point of the save. Each rank checks its own
    state first and sends ``None`` in place of an unsafe one (which might not even pickle),
    with the lines naming its values; the save refuses on rank 0 with all of them.

    Args:
        data: this rank's data source (has ``state_dict()``).
        collective: the ranks taking part.
    """
    rank, world_size = collective.rank, collective.world_size
    state, problems = capture_cursor(data, "data" if world_size == 1 else f"data[rank {rank}]")
    mine = (state, problems)
    gathered = [mine] if world_size == 1 else collective.all_gather(mine)
    return DataState(
        world_size=world_size,
        ranks=tuple(s for s, _ in gathered),
        problems=tuple(line for _, lines in gathered for line in lines),
    )
