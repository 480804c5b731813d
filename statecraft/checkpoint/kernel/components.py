"""Logical component plans: which of ``model``, ``optimizer``, ``training_state`` a save holds.

A :class:`ComponentPlan` is a non-empty set of logical components in canonical table order
(:data:`~statecraft.checkpoint.kernel.plan.FULL_COMPONENTS`). Its physical expansion is the plan
model's entries (:data:`~statecraft.checkpoint.kernel.plan.CHECKPOINT_PLAN`) of those components:

::

    logical          physical families         entries written by this release
    model            model                     model.pt
    optimizer        optim                     optim.pt
    training_state   trainer, data, old, ref   trainer.pt, data.pt (with a data source),
                                               old.pt / ref.pt (a moving old policy /
                                               reference; full checkpoints only)

A partial artifact does not write ``old.pt`` / ``ref.pt`` (:meth:`ComponentPlan.files`).

The full plan ``[model, optimizer, training_state]`` is the only exact-resume plan: it is
written as a checkpoint under ``checkpoints/iter_*``. Any proper subset is a non-resumable
*artifact* under ``checkpoint_artifacts/iter_*``
(:mod:`statecraft.checkpoint.kernel.artifact_manifest`).

Example:
    >>> ComponentPlan.of(["optimizer", "model"]).components
    ('model', 'optimizer')
    >>> ComponentPlan.of(["model"]).union(ComponentPlan.of(["training_state"])).is_full
    False
    >>> ComponentPlan.full().files(with_data=True)
    ('model.pt', 'optim.pt', 'trainer.pt', 'data.pt')
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from statecraft.checkpoint.kernel.plan import CHECKPOINT_PLAN, FULL_COMPONENTS
from statecraft.errors import CheckpointError

__all__ = ["PHYSICAL_FAMILIES", "ComponentPlan"]

#: logical component -> the physical families of the contract's expansion, in table order.
PHYSICAL_FAMILIES: dict[str, tuple[str, ...]] = {
    "model": ("model",),
    "optimizer": ("optim",),
    "training_state": ("trainer", "data", "old", "ref"),
}


def _canonical(value: Iterable[str]) -> tuple[str, ...]:
    names = list(value)
    problems = [repr(n) for n in names if n not in FULL_COMPONENTS]
    if problems or not names or len(set(names)) != len(names):
        raise CheckpointError(
            f"a component plan is a non-empty list of distinct names drawn from "
            f"{list(FULL_COMPONENTS)}; got {names!r}"
        )
    return tuple(c for c in FULL_COMPONENTS if c in names)


@attrs.frozen
class ComponentPlan:
    """A logical component plan, canonical (table order, no duplicates, non-empty).

    Build it with :meth:`of` (any iterable of names) or :meth:`full`. Config validation
    (:mod:`statecraft.checkpoint.config`) rejects bad knob values with a message naming the
    knob; this record refuses them too (a bug in the caller), with :class:`CheckpointError`.
    """

    components: tuple[str, ...] = attrs.field(converter=_canonical)

    @classmethod
    def of(cls, names: Iterable[str]) -> ComponentPlan:
        return cls(tuple(names))

    @classmethod
    def full(cls) -> ComponentPlan:
        return cls(FULL_COMPONENTS)

    @property
    def is_full(self) -> bool:
        """The exact-resume plan (a checkpoint, not an artifact)."""
        return self.components == FULL_COMPONENTS

    @property
    def kind(self) -> str:
        """``"checkpoint"`` for the full plan, ``"artifact"`` for a partial one."""
        return "checkpoint" if self.is_full else "artifact"

    @property
    def physical(self) -> tuple[str, ...]:
        """The physical families of the contract's expansion (``trainer``, ``data``, ...)."""
        return tuple(f for c in self.components for f in PHYSICAL_FAMILIES[c])

    def union(self, other: ComponentPlan) -> ComponentPlan:
        """Both plans' components, canonical (the same-step union of a regular save and a
        validation save)."""
        both = set(self.components) | set(other.components)
        return ComponentPlan(tuple(c for c in FULL_COMPONENTS if c in both))

    def covers(self, other: ComponentPlan) -> bool:
        """Every component of ``other`` is in this plan."""
        return set(other.components) <= set(self.components)

    def files(self, *, with_data: bool) -> tuple[str, ...]:
        """The entries this plan writes, in plan order: each entry of
        :data:`CHECKPOINT_PLAN` whose component is selected (``data.pt`` only
        ``with_data``)."""
        return tuple(
            e.name
            for e in CHECKPOINT_PLAN
            if e.component in self.components
            and (e.required or (with_data and e.tracked == "data"))
        )

    def __str__(self) -> str:
        return "[" + ", ".join(self.components) + "]"
