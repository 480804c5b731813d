"""A role's state as the bytes of its unit, and those bytes loaded back.

Each role unit holds ``model.pt`` and ``optim.pt`` (the state dicts), and ``role.pt`` (the
role's update clocks and its scheduler state; the first role's also the RNG), and the first
role ``data.pt`` (the data cursor) when a data source is tracked. The bytes are serialized at
the boundary, so a background write can never see a later step's state. Loading reads every
file of every role with ``torch.load(weights_only=True)`` before anything is applied.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import torch

from statecraft.checkpoint.roles.bindings import StagedRole
from statecraft.checkpoint.roles.layout import role_dir
from statecraft.checkpoint.roles.records import RoleManifest
from statecraft.checkpoint.roles.tracking import TrackedRole
from statecraft.checkpoint.state import UpdateClocks
from statecraft.checkpoint.state.rng import capture_rng_state, restore_rng_state
from statecraft.errors import CheckpointCorruptError
from statecraft.storage.base import Store

__all__ = ["LoadedRole", "apply_roles", "load_roles", "stage_roles"]

ROLE_STATE = "role.pt"


def _bytes(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def stage_roles(roles: Sequence[TrackedRole]) -> tuple[StagedRole, ...]:
    """Every role's payloads as bytes (the first role's with the RNG and the data cursor).

    Raises:
        TrainerStateError: a role's accumulation window is open.
    """
    staged: list[StagedRole] = []
    for index, role in enumerate(roles):
        role.clocks.require_quiescent(f"save a boundary (role {role.name!r})")
        state: dict[str, Any] = {
            "clocks": attrs.asdict(role.clocks),
            "scheduler": None if role.scheduler is None else role.scheduler.state_dict(),
        }
        if index == 0:
            state["rng"] = capture_rng_state()
        files = {
            "model.pt": _bytes(role.model.state_dict()),
            "optim.pt": _bytes(role.optimizer.state_dict()),
            ROLE_STATE: _bytes(state),
        }
        if index == 0 and role.data is not None:
            files["data.pt"] = _bytes(role.data.state_dict())
        staged.append(StagedRole(role.name, role.clocks.optimizer_step, files))
    return tuple(staged)


@attrs.frozen
class LoadedRole:
    """One role's files as loaded (nothing applied yet)."""

    name: str
    model: Any
    optimizer: Any
    state: dict[str, Any]
    data: Any = None


def load_roles(
    store: Store, iteration: int, manifests: Mapping[str, RoleManifest], order: Sequence[str]
) -> list[LoadedRole]:
    """Read and decode every role's files of a verified boundary.

    Raises:
        CheckpointCorruptError: a file does not load, or ``role.pt`` records another counter
            than the role's manifest.
    """
    loaded: list[LoadedRole] = []
    for name in order:
        unit = role_dir(iteration, name)
        where = f"{store.describe()}/{unit}"
        try:
            files = {
                f: torch.load(io.BytesIO(store.read_bytes(f"{unit}/{f}")), weights_only=True)
                for f in manifests[name].files
            }
        except Exception as exc:
            raise CheckpointCorruptError(
                where, f"a file does not load ({type(exc).__name__}: {exc})",
                "move the boundary aside; resume=auto then adopts an older one",
            ) from None  # fmt: skip
        state = files.get(ROLE_STATE)
        step = manifests[name].optimizer_step
        if not isinstance(state, dict) or state.get("clocks", {}).get("optimizer_step") != step:
            raise CheckpointCorruptError(
                where, f"{ROLE_STATE} does not record the committed counter {step}",
                "move the boundary aside; resume=auto then adopts an older one",
            )  # fmt: skip
        loaded.append(
            LoadedRole(name, files["model.pt"], files["optim.pt"], state, files.get("data.pt"))
        )
    return loaded


def apply_roles(loaded: Sequence[LoadedRole], tracked: Mapping[str, TrackedRole]) -> None:
    """Load every role's state into its tracked objects (the first role's RNG and data)."""
    for item in loaded:
        role = tracked[item.name]
        role.model.load_state_dict(item.model)
        role.optimizer.load_state_dict(item.optimizer)
        if role.scheduler is not None and item.state.get("scheduler") is not None:
            role.scheduler.load_state_dict(item.state["scheduler"])
        role.clocks = UpdateClocks(**item.state["clocks"])
        if role.data is not None and item.data is not None:
            role.data.load_state_dict(item.data)
        if "rng" in item.state:
            restore_rng_state(item.state["rng"])
