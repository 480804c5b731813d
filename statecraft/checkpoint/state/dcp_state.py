"""Model and optimizer state for ``checkpoint_format=dcp``: what each rank hands to
``dcp.save``, the targets ``dcp.load`` fills, and how a loaded state lands on the live objects.

Extraction and application go through torch's distributed state-dict API
(``get_model_state_dict`` / ``get_optimizer_state_dict`` / ``set_model_state_dict`` /
``set_optimizer_state_dict``), so the same calls serve a plain (replicated) module and an
FSDP2 / DTensor-sharded one; DCP's own planners reshard when the world size changed.

The pristine optimizer (a never-stepped one). ``get_optimizer_state_dict`` *materializes* an
untouched optimizer by a zero-gradient ``step()`` at zero learning rate (the probe). Parameters
do not move, but a stateful optimizer's step counter advances: AdamW would then bias-correct
the first real update as though it were the second. So:

- **save** (:func:`optimizer_state_for_save`): decide "pristine" over every trace a step leaves
  (:func:`optimizer_never_stepped`: per-parameter state, the group keys of
  :data:`STEP_TRACE_GROUP_KEYS`, the attributes of :data:`STEP_TRACE_ATTRIBUTES`), snapshot the
  optimizer, let the extraction probe, roll the probe back (:func:`rollback_optimizer`: state
  entries, group keys and attributes it created are removed, values it changed restored), and
  return an EMPTY state with ``pristine=True`` and the param-group options; a stepped
  optimizer's written groups carry the options as they were before the extraction (stripped of
  anything the extraction created).
- **restore** (:func:`optimizer_load_target`): a pristine checkpoint resets the live optimizer to
  never-stepped and applies the saved group options, without materializing moments, and needs
  no DCP load; otherwise the target is shaped by the same extraction, sanitized by the save's
  rule, and the probe is rolled back before returning, so a rejected load leaves the optimizer
  uninitialized. :func:`apply_optimizer_state` lands a loaded target.

Call order (every rank, the same on each): save: ``model_state_for_save`` and
``optimizer_state_for_save`` -> ``dcp.save``; resume: ``model_load_target`` and
``optimizer_load_target`` -> ``dcp.load`` -> ``apply_model_state`` / ``apply_optimizer_state``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import torch
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from statecraft.checkpoint.state.optimizer_facts import (
    STEP_TRACE_ATTRIBUTES,
    STEP_TRACE_GROUP_KEYS,
    optimizer_is_pristine,
)
from statecraft.checkpoint.state.problems import describe
from statecraft.errors import ResumeError, TrainerStateError

__all__ = [
    "STEP_TRACE_ATTRIBUTES",
    "STEP_TRACE_GROUP_KEYS",
    "OptimizerSave",
    "OptimizerSnapshot",
    "apply_model_state",
    "apply_optimizer_state",
    "group_options",
    "model_load_target",
    "model_state_for_save",
    "optimizer_load_target",
    "optimizer_never_stepped",
    "optimizer_state_for_save",
    "rollback_optimizer",
    "snapshot_optimizer",
]

_PARAMS = "params"


@attrs.frozen
class OptimizerSave:
    """One rank's optimizer state for ``optim/``.

    Attributes:
        state: what ``dcp.save`` writes (``get_optimizer_state_dict``'s ``state`` and
            ``param_groups``); empty when ``pristine``.
        pristine: the optimizer had never stepped (``trainer.pt``'s ``optimizer_pristine``).
        groups: each param group's options without ``params`` (lr, betas, weight decay, ...),
            as they were before the extraction ran; what a pristine restore applies.
    """

    state: dict[str, Any]
    pristine: bool
    groups: tuple[dict[str, Any], ...]


@attrs.frozen
class OptimizerSnapshot:
    """What :func:`rollback_optimizer` needs to undo a probe (see :func:`snapshot_optimizer`).

    Attributes:
        stateful: ids of the parameters that had a state entry.
        groups: per group, its options (original objects) without ``params``.
        tensor_values: per group, copies of its tensor-valued options (undo in-place changes).
        attributes: the optimizer's instance attributes other than ``state``/``param_groups``.
    """

    stateful: frozenset[int]
    groups: tuple[dict[str, Any], ...]
    tensor_values: tuple[dict[str, torch.Tensor], ...]
    attributes: dict[str, Any]


def _require_optimizer(optimizer: Any, what: str) -> torch.optim.Optimizer:
    state, groups = getattr(optimizer, "state", None), getattr(optimizer, "param_groups", None)
    if not isinstance(state, Mapping) or not isinstance(groups, list):
        raise TrainerStateError(
            f"{what}() expects a torch optimizer (with 'state' and 'param_groups'); got "
            f"{describe(optimizer)}; pass the torch.optim.Optimizer the model trains with"
        )
    return optimizer


def group_options(optimizer: torch.optim.Optimizer) -> tuple[dict[str, Any], ...]:
    """Each param group's options without ``params``, deep-copied (later changes to the
    optimizer do not change them)."""
    optimizer = _require_optimizer(optimizer, "group_options")
    return tuple(
        {k: copy.deepcopy(v) for k, v in group.items() if k != _PARAMS}
        for group in optimizer.param_groups
    )


def optimizer_never_stepped(optimizer: torch.optim.Optimizer) -> bool:
    """True when no trace of a ``step()`` exists
    (:func:`~statecraft.checkpoint.state.optimizer_facts.optimizer_is_pristine`: every
    per-parameter state entry is empty, no group holds a key of ``STEP_TRACE_GROUP_KEYS`` and
    no attribute of ``STEP_TRACE_ATTRIBUTES`` is set and non-empty).

    Raises:
        TrainerStateError: ``optimizer`` is not a torch optimizer.

    Example:
        >>> opt = torch.optim.AdamW(torch.nn.Linear(2, 2).parameters())
        >>> optimizer_never_stepped(opt)
        True
    """
    optimizer = _require_optimizer(optimizer, "optimizer_never_stepped")
    return optimizer_is_pristine(optimizer)


def snapshot_optimizer(optimizer: torch.optim.Optimizer) -> OptimizerSnapshot:
    """Record what a probe may change: which parameters hold state, every group's options
    (tensors also copied, to undo in-place changes) and the optimizer's own attributes.
    Cheap: no per-parameter tensor is copied."""
    optimizer = _require_optimizer(optimizer, "snapshot_optimizer")
    groups = tuple(
        {k: v for k, v in group.items() if k != _PARAMS} for group in optimizer.param_groups
    )
    return OptimizerSnapshot(
        stateful=frozenset(id(p) for p, entry in optimizer.state.items() if entry),
        groups=groups,
        tensor_values=tuple(
            {k: v.detach().clone() for k, v in g.items() if isinstance(v, torch.Tensor)}
            for g in groups
        ),
        attributes={k: v for k, v in vars(optimizer).items() if k not in ("state", "param_groups")},
    )


def rollback_optimizer(optimizer: torch.optim.Optimizer, snapshot: OptimizerSnapshot) -> None:
    """Undo what happened to ``optimizer`` since ``snapshot`` outside its parameters: state
    entries of parameters that had none are removed, group keys created are removed, group
    options replaced or changed in place are restored, attributes created are removed and
    replaced ones restored. Meant for the extraction probe (which does not move parameters).

    Raises:
        TrainerStateError: the optimizer's number of param groups changed since the snapshot.
    """
    optimizer = _require_optimizer(optimizer, "rollback_optimizer")
    if len(optimizer.param_groups) != len(snapshot.groups):
        raise TrainerStateError(
            f"rollback_optimizer(): the optimizer has {len(optimizer.param_groups)} param "
            f"groups, the snapshot {len(snapshot.groups)}; roll back right after the call that "
            "probed it, before param groups are added"
        )
    for param in [p for p in optimizer.state if id(p) not in snapshot.stateful]:
        del optimizer.state[param]
    for group, before, tensors in zip(
        optimizer.param_groups, snapshot.groups, snapshot.tensor_values, strict=True
    ):
        for key in [k for k in group if k != _PARAMS and k not in before]:
            del group[key]
        for key, value in before.items():
            group[key] = value
            if key in tensors and not torch.equal(value, tensors[key]):
                with torch.no_grad():
                    value.copy_(tensors[key])
    live = vars(optimizer)
    for key in [k for k in live if k not in ("state", "param_groups")]:
        if key not in snapshot.attributes:
            del live[key]
    live.update(snapshot.attributes)


def _sanitized(extracted: dict[str, Any], snapshot: OptimizerSnapshot) -> dict[str, Any]:
    """``extracted`` with each group's options replaced by the snapshot's (what existed before
    the extraction) and ``params`` kept: the save's rule, also shaping the load target."""
    groups = extracted.get("param_groups")
    if not isinstance(groups, list) or len(groups) != len(snapshot.groups):
        return extracted
    out = dict(extracted)
    out["param_groups"] = [
        {**copy.deepcopy(before), _PARAMS: group[_PARAMS]}
        for group, before in zip(groups, snapshot.groups, strict=True)
    ]
    return out


def model_state_for_save(model: torch.nn.Module) -> dict[str, Any]:
    """This rank's model state for ``dcp.save``: ``get_model_state_dict(model)`` (DTensor shards
    under FSDP2, the full tensors of a replicated module; references, not copies)."""
    return get_model_state_dict(model)


def optimizer_state_for_save(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> OptimizerSave:
    """This rank's optimizer state for ``dcp.save``, with the probe rolled back (module
    docstring): a never-stepped optimizer gives an empty ``state`` and ``pristine=True``; the
    live optimizer is left exactly as it was found, even when the extraction fails.

    Raises:
        TrainerStateError: ``optimizer`` is not a torch optimizer.
    """
    optimizer = _require_optimizer(optimizer, "optimizer_state_for_save")
    pristine = optimizer_never_stepped(optimizer)
    groups = group_options(optimizer)
    snapshot = snapshot_optimizer(optimizer)
    try:
        extracted = get_optimizer_state_dict(model, optimizer)
    finally:
        rollback_optimizer(optimizer, snapshot)
    if pristine:
        return OptimizerSave({}, True, groups)
    return OptimizerSave(_sanitized(extracted, snapshot), False, groups)


def _scratch(value: Any) -> Any:
    """A target shaped like ``value``: tensors (DTensors too) as fresh empty tensors, containers
    rebuilt, other leaves deep-copied."""
    if isinstance(value, torch.Tensor):
        return torch.empty_like(value)
    if isinstance(value, dict):
        return {k: _scratch(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scratch(v) for v in value]
    return copy.deepcopy(value)


def model_load_target(model: torch.nn.Module) -> dict[str, Any]:
    """A scratch target for ``dcp.load`` shaped by the live model (this rank's shards at the
    current world size); no live tensor is shared with it."""
    return dict(_scratch(get_model_state_dict(model)))


def optimizer_load_target(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    pristine: bool,
    groups: Sequence[Mapping[str, Any]],
) -> dict[str, Any] | None:
    """The scratch target ``dcp.load`` fills from ``optim/``, or ``None`` when there is nothing
    to load.

    ``pristine`` (the checkpoint's ``optimizer_pristine``): the live optimizer is reset to
    never-stepped (per-parameter state, step-trace group keys and attributes dropped) and each
    group gets ``groups``' options, BEFORE any target would be shaped; returns ``None``.
    Otherwise the target is shaped by the extraction (which may probe a never-stepped live
    optimizer), sanitized by the save's rule, and the probe rolled back: the live optimizer
    is unchanged, so a rejected load leaves it uninitialized.

    Raises:
        ResumeError: ``groups`` does not match the live optimizer's param groups (nothing
            changed).
        TrainerStateError: ``optimizer`` is not a torch optimizer.
    """
    optimizer = _require_optimizer(optimizer, "optimizer_load_target")
    if pristine:
        saved = [dict(g) for g in groups]
        if len(saved) != len(optimizer.param_groups) or any(_PARAMS in g for g in saved):
            raise ResumeError(
                f"the checkpoint's pristine optimizer has {len(saved)} param group(s) of "
                f"options, the live optimizer {len(optimizer.param_groups)}; build the optimizer "
                "with the same param groups as the saving run (nothing was changed)"
            )
        optimizer.state.clear()
        for name in STEP_TRACE_ATTRIBUTES:
            if name in vars(optimizer):
                delattr(optimizer, name)
        for group, options in zip(optimizer.param_groups, saved, strict=True):
            for key in STEP_TRACE_GROUP_KEYS & group.keys():
                del group[key]
            group.update(copy.deepcopy(options))
        return None
    snapshot = snapshot_optimizer(optimizer)
    try:
        target = _scratch(_sanitized(get_optimizer_state_dict(model, optimizer), snapshot))
    finally:
        rollback_optimizer(optimizer, snapshot)
    return dict(target)


def apply_model_state(model: torch.nn.Module, state: dict[str, Any]) -> None:
    """Load a filled :func:`model_load_target` into ``model`` (``set_model_state_dict``,
    strict: a missing or unexpected key raises)."""
    set_model_state_dict(model, state)


def apply_optimizer_state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
) -> None:
    """Load a filled :func:`optimizer_load_target` into ``optimizer``
    (``set_optimizer_state_dict``; the loaded param groups replace the live ones, so nothing
    a probe created survives). On failure the caller restores its own snapshot."""
    set_optimizer_state_dict(model, optimizer, state)
