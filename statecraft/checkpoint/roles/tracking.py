"""The roles a multi-role loop tracks (``Checkpointer.track_role``), and the configuration a
multi-role boundary refuses.

Each role is a model, its optimizer, an optional scheduler and its own update clocks (the
optimizer counter it commits); the first role also carries the data source (its cursor is
stored with it) and the RNG.
"""

from __future__ import annotations

from typing import Any

import attrs

from statecraft.checkpoint.config import CheckpointConfig
from statecraft.checkpoint.kernel.components import ComponentPlan
from statecraft.checkpoint.roles.layout import check_role_name
from statecraft.checkpoint.state import Outcome, UpdateClocks
from statecraft.errors import ConfigError, ConfigIssue, TrackingError

__all__ = ["RoleSet", "TrackedRole", "refuse_config"]


def _stateful(role: str, what: str, obj: Any) -> None:
    missing = [m for m in ("state_dict", "load_state_dict") if not callable(getattr(obj, m, None))]
    if missing:
        raise TrackingError(
            f"track_role({role!r}, {what}=...): {type(obj).__name__} has no "
            f"{' / '.join(missing)}; pass an object with state_dict() and load_state_dict()"
        )


@attrs.define(eq=False)
class TrackedRole:
    """One tracked role, returned by ``Checkpointer.track_role``: the loop records the role's
    optimizer outcomes on it (``critic.record(sc.Outcome.APPLIED)``).

    Attributes:
        name: the role's name (its directory in every boundary).
        clocks: the role's own update clocks; ``optimizer_step`` is its committed counter.
    """

    name: str
    model: Any
    optimizer: Any
    scheduler: Any = None
    data: Any = None
    clocks: UpdateClocks = attrs.field(factory=UpdateClocks)

    def __repr__(self) -> str:
        return f"TrackedRole({self.name!r}, optimizer_step={self.clocks.optimizer_step})"

    def record(self, outcome: Outcome) -> None:
        """Advance this role's clocks by one outcome (``APPLIED`` advances its counter).

        Raises:
            TrainerStateError: ``outcome`` is not an :class:`Outcome`.
        """
        self.clocks.record(outcome)

    @property
    def optimizer_step(self) -> int:
        """Applied optimizer updates of this role (the counter its boundaries record)."""
        return self.clocks.optimizer_step


@attrs.define
class RoleSet:
    """The tracked roles, in the order they were tracked (the first holds the data)."""

    roles: dict[str, TrackedRole] = attrs.field(factory=dict)

    def add(
        self, name: object, *, model: Any, optimizer: Any, scheduler: Any, data: Any
    ) -> TrackedRole:
        """Check and add one role.

        Raises:
            TrackingError: a bad name, a role tracked twice, an object without
                ``state_dict`` / ``load_state_dict``, or ``data`` given to a role other than
                the first.
        """
        role = check_role_name(name)
        if role in self.roles:
            raise TrackingError(
                f"track_role({role!r}, ...): the role {role!r} is tracked already; each role "
                "is tracked once, under its own name"
            )
        _stateful(role, "model", model)
        _stateful(role, "optimizer", optimizer)
        if scheduler is not None:
            _stateful(role, "scheduler", scheduler)
        if data is not None:
            _stateful(role, "data", data)
            if self.roles:
                first = next(iter(self.roles))
                raise TrackingError(
                    f"track_role({role!r}, data=...): the data cursor is stored with the first "
                    f"role ({first!r}); pass data= to track_role({first!r}, ...) instead"
                )
        tracked = TrackedRole(role, model, optimizer, scheduler, data)
        self.roles[role] = tracked
        return tracked

    @property
    def names(self) -> list[str]:
        return list(self.roles)

    def require_several(self, action: str) -> None:
        """Refuse ``action`` with fewer than two roles.

        Raises:
            TrackingError: naming the roles and the fix.
        """
        if len(self.roles) < 2:
            raise TrackingError(
                f"cannot {action} with roles {self.names}: a multi-role boundary needs two or "
                "more roles; track another with ckpt.track_role(name, model=..., "
                "optimizer=...), or track a single model with ckpt.track(...)"
            )


def refuse_config(config: CheckpointConfig, *, world_size: int) -> None:
    """Refuse what a multi-role boundary cannot honour, naming every rule at once.

    A boundary is written to the local primary store (an object-store primary is refused),
    always with the full plan (a partial ``checkpoint_components`` and the emergency knob
    ``run`` are refused), by one process, in the consolidated format.

    Raises:
        ConfigError: one issue per broken rule, each with the fix.
    """
    issues: list[ConfigIssue] = []
    if config.checkpoint_store.backend != "local":
        issues.append(ConfigIssue(
            "checkpoint_store.backend", config.checkpoint_store.backend,
            "local: multi-role boundaries require the local primary store (archive to an "
            "object store with upload.* instead)",
        ))  # fmt: skip
    if not ComponentPlan.of(config.checkpoint_components).is_full:
        issues.append(ConfigIssue(
            "checkpoint_components", list(config.checkpoint_components),
            "the full plan: a multi-role loop writes every component at every boundary",
        ))  # fmt: skip
    if config.emergency_checkpoint_components == "run":
        issues.append(ConfigIssue(
            "emergency_checkpoint_components", "run",
            "full: a multi-role loop always writes the full plan, so 'run' is refused rather "
            "than ignored",
        ))  # fmt: skip
    if config.checkpoint_format != "consolidated":
        issues.append(ConfigIssue(
            "checkpoint_format", config.checkpoint_format,
            "consolidated: multi-role boundaries are written with torch.save in this release",
        ))  # fmt: skip
    if world_size != 1:
        issues.append(ConfigIssue(
            "world_size", world_size,
            "1: multi-role boundaries are written by one process in this release",
        ))  # fmt: skip
    if issues:
        raise ConfigError(issues, source="track_role (multi-role boundary)")
