"""Trainer control state saved in ``trainer.pt``: update clocks, scheduler identity, the
per-rank RNG inventory and the payload record that holds them.

One module per job: :mod:`.clocks`, :mod:`.scheduler_identity`, :mod:`.rng` (one process's
streams), :mod:`.rng_inventory` (every rank's), :mod:`.trainer_payload` (the ``trainer.pt``
record), :mod:`.trainer_fields` (reading its payload, every schema version),
:mod:`.optimizer_facts` (what it records of the optimizer), :mod:`.data_state` (the per-rank
``data.pt`` payload), :mod:`.safe_values` (the save-time weights_only check),
:mod:`.problems` (the shared error builder).
"""

from statecraft.checkpoint.state.clocks import Outcome, UpdateClocks
from statecraft.checkpoint.state.data_state import (
    DATA_STATE_SCHEMA,
    DATA_STATE_V1,
    DataState,
    gather_data_state,
)
from statecraft.checkpoint.state.optimizer_facts import optimizer_class_name
from statecraft.checkpoint.state.rng import RNG_SCHEMA, capture_rng_state, restore_rng_state
from statecraft.checkpoint.state.rng_inventory import (
    RngInventory,
    gather_rng_inventory,
    restore_rank_rng,
)
from statecraft.checkpoint.state.safe_values import require_safe, unsafe_paths
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
    "DATA_STATE_SCHEMA",
    "DATA_STATE_V1",
    "RNG_SCHEMA",
    "SUPPORTED_SCHEDULER_IDENTITY_VERSIONS",
    "TRAINER_STATE_SCHEMA",
    "DataState",
    "Outcome",
    "RngInventory",
    "SchedulerIdentity",
    "TrainerState",
    "UpdateClocks",
    "capture_rng_state",
    "check_scheduler_identity",
    "gather_data_state",
    "gather_rng_inventory",
    "optimizer_class_name",
    "optimizer_is_pristine",
    "require_safe",
    "restore_rank_rng",
    "restore_rng_state",
    "unsafe_paths",
]
