"""Trainer control state saved in ``trainer.pt``: update clocks, scheduler identity, the
per-rank RNG inventory and the payload record that holds them.

One module per job: :mod:`.clocks`, :mod:`.scheduler_identity`, :mod:`.rng` (one process's
streams), :mod:`.rng_inventory` (every rank's), :mod:`.trainer_payload` (the ``trainer.pt``
record), :mod:`.problems` (the shared error builder).
"""

from statecraft.checkpoint.state.clocks import Outcome, UpdateClocks
from statecraft.checkpoint.state.rng import RNG_SCHEMA, capture_rng_state, restore_rng_state
from statecraft.checkpoint.state.rng_inventory import (
    RngInventory,
    gather_rng_inventory,
    restore_rank_rng,
)
from statecraft.checkpoint.state.scheduler_identity import (
    SUPPORTED_SCHEDULER_IDENTITY_VERSIONS,
    SchedulerIdentity,
    check_scheduler_identity,
)
from statecraft.checkpoint.state.trainer_payload import (
    TRAINER_STATE_SCHEMA,
    TrainerState,
    optimizer_is_pristine,
)

__all__ = [
    "RNG_SCHEMA",
    "SUPPORTED_SCHEDULER_IDENTITY_VERSIONS",
    "TRAINER_STATE_SCHEMA",
    "Outcome",
    "RngInventory",
    "SchedulerIdentity",
    "TrainerState",
    "UpdateClocks",
    "capture_rng_state",
    "check_scheduler_identity",
    "gather_rng_inventory",
    "optimizer_is_pristine",
    "restore_rank_rng",
    "restore_rng_state",
]
