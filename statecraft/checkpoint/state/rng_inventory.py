"""The per-rank RNG inventory of ``trainer.pt``: gather on save, validate and restore on resume.

See :mod:`statecraft.checkpoint.state.rng` for the protocol's call order."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import attrs
import torch

from statecraft.checkpoint.state.problems import (
    deep_equal,
    describe,
    is_int,
    state_error,
)
from statecraft.checkpoint.state.rng import (
    INVENTORY_KEYS,
    RNG_CORRUPT_FIX,
    RNG_SCHEMA,
    RngRestoreResult,
    capture_rng_state,
    inventory_problems,
    ranks_as_tuple,
    restore_validated_rng_state,
)
from statecraft.errors import TrainerStateError

_log = logging.getLogger(__name__)

__all__ = ["RngInventory", "gather_rng_inventory", "restore_rank_rng"]

# --- the inventory


@attrs.frozen
class RngInventory:
    """Every rank's RNG snapshot, in rank order: ``ranks[r]`` belongs to rank ``r``.

    Built by :func:`gather_rng_inventory` on save and by :meth:`from_payload` on resume; the
    construction validates every snapshot once (dry runs on scratch generators included), so
    an inventory that exists can be restored, and :func:`restore_rank_rng` does not validate
    it again. The snapshots are held, not copied: treat them as read-only.

    Raises:
        TrainerStateError: on construction, when ``world_size`` is not a positive int, the number
            of snapshots differs from it, or any snapshot is malformed.
    """

    world_size: int
    ranks: tuple[dict[str, Any], ...] = attrs.field(
        converter=ranks_as_tuple, eq=attrs.cmp_using(eq=deep_equal), hash=False
    )

    def __attrs_post_init__(self) -> None:
        problems = inventory_problems(self.world_size, self.ranks)
        if problems:
            raise state_error("RngInventory(...)", "RNG inventory", problems, RNG_CORRUPT_FIX)

    def to_payload(self) -> dict[str, Any]:
        """The ``weights_only``-safe form stored under ``"rng"`` in ``trainer.pt``.

        Returns:
            ``{"schema": RNG_SCHEMA, "world_size": int, "ranks": [state, ...]}``.
        """
        return {"schema": RNG_SCHEMA, "world_size": self.world_size, "ranks": list(self.ranks)}

    @classmethod
    def from_payload(cls, obj: object, *, source: str) -> RngInventory:
        """Parse and strictly validate a payload written by :meth:`to_payload`.

        Args:
            obj: the loaded payload.
            source: the file it came from, named in the error.

        Returns:
            The inventory.

        Raises:
            TrainerStateError: naming ``source`` and listing every bad field by its path (for
                example ``ranks[1].numpy.keys``) with what was expected and what was found; its
                ``problems`` attribute holds the same lines.
        """
        if not isinstance(obj, dict):
            problems = [f"expected a dict with keys {list(INVENTORY_KEYS)}; got {describe(obj)}"]
            raise state_error(source, "RNG inventory", problems, RNG_CORRUPT_FIX)
        problems = [f"missing key {k!r}" for k in INVENTORY_KEYS if k not in obj]
        problems += [f"unexpected key {k!r}" for k in obj if k not in INVENTORY_KEYS]
        if "schema" in obj and obj["schema"] != RNG_SCHEMA:
            problems.append(
                f"schema: expected {RNG_SCHEMA!r}; got {describe(obj['schema'])} "
                "(written by a newer or foreign writer)"
            )
        if not problems:  # the snapshots are validated once, by the construction
            try:
                return cls(obj["world_size"], obj["ranks"])
            except TrainerStateError as exc:
                problems = list(getattr(exc, "problems", [str(exc)]))
        elif "world_size" in obj and "ranks" in obj:  # every bad field in one error
            problems += inventory_problems(obj["world_size"], obj["ranks"])
        raise state_error(source, "RNG inventory", problems, RNG_CORRUPT_FIX)


def _check_rank(rank: Any, world_size: Any) -> None:
    if not is_int(world_size) or world_size < 1:
        raise TrainerStateError(
            f"world_size must be an int >= 1 (got {describe(world_size)}); pass the size of "
            "the process group"
        )
    if not is_int(rank) or not 0 <= rank < world_size:
        raise TrainerStateError(
            f"rank must be an int in [0, {world_size}) (got {describe(rank)}); pass this "
            "process's rank in the process group"
        )


def gather_rng_inventory(
    *,
    rank: int,
    world_size: int,
    all_gather_object: Callable[[list[Any], Any], None] | None = None,
) -> RngInventory:
    """Collect every rank's :func:`capture_rng_state` into one inventory (a collective).

    Every rank must call it. With one process it needs no collective; otherwise it uses
    ``all_gather_object`` when given (the signature of ``torch.distributed.all_gather_object``),
    else ``torch.distributed.all_gather_object`` of the initialized default group.

    Args:
        rank: this process's rank.
        world_size: the number of ranks.
        all_gather_object: an injected gather (tests, other launchers).

    Returns:
        The inventory, identical on every rank.

    Raises:
        TrainerStateError: bad ``rank``/``world_size``, several ranks without a collective, a
            process group whose size or rank differ from the arguments, or a malformed gather.
    """
    _check_rank(rank, world_size)
    local = capture_rng_state()
    if all_gather_object is None:
        dist = torch.distributed
        initialized = dist.is_available() and dist.is_initialized()
        if not initialized:
            if world_size != 1:
                raise TrainerStateError(
                    f"gather_rng_inventory(world_size={world_size}) needs a collective, but "
                    "torch.distributed is not initialized and no all_gather_object was passed; "
                    "initialize the process group first or pass all_gather_object"
                )
            return RngInventory(1, (local,))
        if dist.get_world_size() != world_size or dist.get_rank() != rank:
            raise TrainerStateError(
                f"gather_rng_inventory(rank={rank}, world_size={world_size}) disagrees with the "
                f"process group (rank={dist.get_rank()}, world_size={dist.get_world_size()}); "
                "pass the process group's rank and size"
            )
        all_gather_object = dist.all_gather_object
    gathered: list[Any] = [None] * world_size
    all_gather_object(gathered, local)
    return RngInventory(world_size, tuple(gathered))


def restore_rank_rng(
    inventory: RngInventory | None,
    *,
    rank: int,
    world_size: int,
    log: logging.Logger,
    resharded: bool = False,
) -> RngRestoreResult:
    """Restore this rank's RNG streams from a checkpoint's inventory, or log why not.

    Args:
        inventory: the checkpoint's inventory; ``None`` for a legacy checkpoint without one.
        rank: this process's rank.
        world_size: the current number of ranks.
        log: receives one line saying what happened (a warning when nothing was restored).
        resharded: the checkpoint is a DCP one, whose model and optimizer state were resharded
            to this world size: a changed world size is then an expected topology change and
            its skip line is logged at INFO (naming both sizes), not as a warning.

    Returns:
        ``"restored"`` (same world size: this rank's streams are exactly the saved ones),
        ``"missing"`` (legacy checkpoint: streams keep their current seeding) or
        ``"topology_changed"`` (saved with another world size: streams keep their current
        seeding, because rank-local streams cannot be redistributed).

    Raises:
        TrainerStateError: bad ``rank``/``world_size``.
    """
    _check_rank(rank, world_size)
    if inventory is None:
        log.warning(
            "rank %d: the checkpoint has no RNG inventory (legacy checkpoint); RNG streams are "
            "not restored and keep their current seeding, so random draws will not match the "
            "saved run",
            rank,
        )
        return "missing"
    if inventory.world_size != world_size:
        log.log(
            logging.INFO if resharded else logging.WARNING,
            "rank %d: topology changed: RNG inventory saved with world_size=%d, now "
            "world_size=%d; RNG streams are not restored (rank-local streams restore exactly only "
            "at the same world size) and keep their current seeding",
            rank,
            inventory.world_size,
            world_size,
        )
        return "topology_changed"
    # validated when the inventory was built (every path validates it), not again here
    restore_validated_rng_state(inventory.ranks[rank], log=log)
    log.info("rank %d: RNG streams restored (world_size=%d)", rank, world_size)
    return "restored"
