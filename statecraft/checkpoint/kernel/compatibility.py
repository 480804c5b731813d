"""Does a checkpoint fit the tracked objects? Checked before anything loads.

``load_state_dict`` alone is a poor judge: a model of another shape fails deep inside torch
with a size-mismatch trace, a parameter of another dtype is cast silently on copy, and an
optimizer of another class (AdamW state into SGD) loads without complaint and trains on with
state that means nothing to it. :func:`check_fit` compares, without copying a tensor:

- **model**: parameter and buffer names (missing / unexpected), tensor shapes and dtypes;
- **optimizer**: its class (``trainer.optimizer_class``, recorded by saves from
  ``statecraft.trainer-state.v2`` on; for older checkpoints the class is inferred where it is
  cheap: per-parameter state keys such as AdamW's ``exp_avg`` vs SGD's ``momentum_buffer``,
  and hallmark group keys such as ``betas`` vs ``nesterov``), the number of parameter groups
  and of parameters in each, state recorded for a parameter no group lists, and the shape of
  each parameter-shaped state tensor against its live parameter.

:func:`check_world_size` refuses a consolidated checkpoint saved at another world size (its
``trainer.pt`` RNG inventory, or its per-rank ``data.pt``, records the saving world size):
consolidated checkpoints resume only at the same world size; ``checkpoint_format=dcp``
reshards.

Any difference refuses the resume with a :class:`~statecraft.errors.ResumeError` that names
the checkpoint, the first differences and the fix (``resume=off`` for a new attempt, another
run name, or a model-only warm start with :func:`statecraft.load_weights`).
"""

from __future__ import annotations

from collections.abc import Mapping

# Any: the tracked objects are the user's torch modules, optimizers and state dicts (duck-typed,
# untyped by torch's own stubs); each function checks what it reads and names what it found.
from typing import Any

import torch

from statecraft.checkpoint.kernel.ema_entries import split_ema
from statecraft.checkpoint.state import optimizer_class_name
from statecraft.errors import ResumeError, WorldSizeChangedError

__all__ = [
    "MAX_SHOWN",
    "check_fit",
    "check_world_size",
    "model_state_problems",
    "optimizer_state_problems",
    "saved_world_size",
]

MAX_SHOWN = 5  # differences spelled out in the message (all of them are in ``problems``)
NOTHING_CHANGED = "nothing was loaded: every tracked object is unchanged"

# per-parameter state keys each optimizer family writes (the classes torch ships)
_ADAM_KEYS = frozenset({"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"})
_STATE_KEYS: dict[str, frozenset[str]] = {
    "torch.optim.sgd.SGD": frozenset({"momentum_buffer"}),
    "torch.optim.adam.Adam": _ADAM_KEYS,
    "torch.optim.adamw.AdamW": _ADAM_KEYS,
    "torch.optim.nadam.NAdam": _ADAM_KEYS | {"mu_product"},
    "torch.optim.radam.RAdam": _ADAM_KEYS,
    "torch.optim.adamax.Adamax": frozenset({"step", "exp_avg", "exp_inf"}),
    "torch.optim.rmsprop.RMSprop": frozenset({"step", "square_avg", "momentum_buffer", "grad_avg"}),
    "torch.optim.adagrad.Adagrad": frozenset({"step", "sum"}),
    "torch.optim.adadelta.Adadelta": frozenset({"step", "square_avg", "acc_delta"}),
}
# state tensors shaped like their parameter (others, e.g. Adafactor's factored rows, are not)
_PARAM_SHAPED = frozenset(
    {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer", "square_avg", "sum"}
    | {"acc_delta", "grad_avg", "exp_inf"}
)
# group keys only some optimizer families have: present on one side only means another class
_HALLMARK_GROUP_KEYS = ("betas", "nesterov", "dampening", "alpha", "lr_decay", "rho")


def _shape(value: Any) -> tuple[int, ...] | None:
    return tuple(value.shape) if isinstance(value, torch.Tensor) else None


def _dtype(value: Any) -> str | None:
    return str(value.dtype).removeprefix("torch.") if isinstance(value, torch.Tensor) else None


def model_state_problems(model: Any, state: Any) -> list[str]:
    """What makes ``state`` not the state of ``model``, found without copying anything: not
    a mapping, missing or unexpected keys (what ``load_state_dict(strict=True)`` refuses),
    tensor shapes, and tensor dtypes (which ``load_state_dict`` would cast silently)."""
    if not isinstance(state, Mapping):
        return [f"model.pt holds {type(state).__name__}, not a model state_dict"]
    live = model.state_dict()
    problems = []
    missing = sorted(set(live) - set(state))
    unexpected = sorted(set(state) - set(live))
    if missing:
        problems.append(f"model.pt lacks keys {missing[:8]} the live model has")
    if unexpected:
        problems.append(f"model.pt has keys {unexpected[:8]} the live model lacks")
    for key in sorted(set(live) & set(state)):
        mine, saved = _shape(live[key]), _shape(state[key])
        if mine is not None and saved != mine:
            problems.append(f"model.pt {key!r} has shape {saved}, the live model {mine}")
            continue
        live_dtype, saved_dtype = _dtype(live[key]), _dtype(state[key])
        if live_dtype is not None and saved_dtype != live_dtype:
            problems.append(
                f"model.pt {key!r} has dtype {saved_dtype}, the live model {live_dtype}"
            )
    return problems


def _class_problems(optimizer: Any, state: Mapping[str, Any], recorded: str | None) -> list[str]:
    """The optimizer class changed: by the recorded class, else by its state / group keys."""
    live = optimizer_class_name(optimizer)
    if recorded is not None:
        if recorded != live:
            return [f"optim.pt was saved by {recorded}, the live optimizer is {live}"]
        return []
    produced = _STATE_KEYS.get(live)
    saved_state = state.get("state") or {}
    if produced is not None and isinstance(saved_state, Mapping):
        keys = {k for s in saved_state.values() if isinstance(s, Mapping) for k in s}
        foreign = sorted(keys - produced)
        if foreign:
            return [
                f"optim.pt holds per-parameter state {foreign}, which {live} never writes "
                "(the optimizer class changed)"
            ]
    saved_groups = state.get("param_groups") or []
    if saved_groups and optimizer.param_groups:
        saved_keys, live_keys = set(saved_groups[0]), set(optimizer.param_groups[0])
        differ = [k for k in _HALLMARK_GROUP_KEYS if (k in saved_keys) != (k in live_keys)]
        if differ:
            return [
                f"optim.pt parameter groups {'have' if differ[0] in saved_keys else 'lack'} "
                f"{differ[0]!r}, the live {live}'s "
                f"{'do not' if differ[0] in saved_keys else 'do'} (the optimizer class changed)"
            ]
    return []


def _state_shape_problems(optimizer: Any, state: Mapping[str, Any]) -> list[str]:
    """Parameter-shaped state tensors whose shape is not their live parameter's."""
    params = [p for g in optimizer.param_groups for p in g["params"]]
    index = {pid: i for i, pid in enumerate(p for g in state["param_groups"] for p in g["params"])}
    problems = []
    for pid, per_param in sorted((state.get("state") or {}).items(), key=lambda kv: str(kv[0])):
        position = index.get(pid)
        if position is None or position >= len(params) or not isinstance(per_param, Mapping):
            continue
        want = tuple(params[position].shape)
        for key in sorted(k for k in per_param if k in _PARAM_SHAPED):
            got = _shape(per_param[key])
            if got is not None and got != want:
                problems.append(
                    f"optim.pt state {key!r} of parameter {pid} has shape {got}, the live "
                    f"parameter {want}"
                )
    return problems


def optimizer_state_problems(
    optimizer: Any, state: Any, *, recorded_class: str | None = None
) -> list[str]:
    """What makes ``state`` unloadable into ``optimizer``, or loadable but meaningless: not
    an optimizer state_dict, another optimizer class (``recorded_class`` when the checkpoint
    recorded it, else inferred from state and group keys), another number of parameter groups
    or of parameters in a group, state for a parameter index no group holds, a state tensor of
    another shape than its parameter."""
    if not isinstance(state, Mapping) or not {"state", "param_groups"} <= set(state):
        return ["optim.pt is not an optimizer state_dict (expected 'state' and 'param_groups')"]
    saved_groups, live_groups = state["param_groups"], optimizer.param_groups
    if not isinstance(saved_groups, list) or not all(
        isinstance(g, Mapping) and isinstance(g.get("params"), list) for g in saved_groups
    ):
        return ["optim.pt param_groups is not a list of groups with 'params' lists"]
    problems = _class_problems(optimizer, state, recorded_class)
    if len(saved_groups) != len(live_groups):
        return [
            *problems,
            f"optim.pt has {len(saved_groups)} parameter groups, the live optimizer "
            f"{len(live_groups)}",
        ]
    sizes = [
        f"optim.pt parameter group {i} has {len(s['params'])} parameters, the live optimizer's "
        f"{len(g['params'])}"
        for i, (s, g) in enumerate(zip(saved_groups, live_groups, strict=True))
        if len(s["params"]) != len(g["params"])
    ]
    problems += sizes
    ids = {p for g in saved_groups for p in g["params"]}
    stray = sorted(str(k) for k in (state["state"] or {}) if k not in ids)
    if stray:
        problems.append(f"optim.pt holds state for parameters {stray[:8]} no group lists")
    if not sizes:
        problems += _state_shape_problems(optimizer, state)
    return problems


def _path_of(location: str) -> str:
    """A location as a path the user can pass back (``local:/x`` -> ``/x``)."""
    return location.removeprefix("local:")


def check_fit(tracked: Any, trainer: Any, parts: Any, *, location: str) -> None:
    """Refuse ``parts`` (``Components``: ``model``, ``optimizer`` payloads) of the checkpoint
    at ``location`` unless they fit ``tracked`` (``Tracked``); see the module docstring.
    Nothing is loaded or copied.

    Args:
        tracked: the live objects (``model``, ``optimizer``; either may be ``None``).
        trainer: the checkpoint's ``TrainerState`` (its ``optimizer_class``, when recorded).
        parts: the payloads read from the checkpoint (``None`` where absent).
        location: the checkpoint, named in the message.

    Raises:
        ResumeError: every difference in ``problems`` (the first :data:`MAX_SHOWN` in the
            message), with ``path`` = ``location`` and the fix.
    """
    problems: list[str] = []
    if tracked.model is not None:
        if parts.model is None:
            problems.append("the checkpoint has no model state for the tracked model")
        else:
            model_state, ema_state = split_ema(parts.model)
            problems += model_state_problems(tracked.model, model_state)
            ema = getattr(tracked, "ema", None)  # a maintained EMA: its entries must be there
            if ema is not None and ema_state is None:
                problems.append("model.pt holds no EMA entries for the tracked EMA")
            elif ema is not None:
                problems += [f"EMA: {p}" for p in model_state_problems(ema, ema_state)]
    if tracked.optimizer is not None:
        if parts.optimizer is None:
            problems.append("the checkpoint has no optimizer state for the tracked optimizer")
        else:
            recorded = getattr(trainer, "optimizer_class", None)
            problems += optimizer_state_problems(
                tracked.optimizer, parts.optimizer, recorded_class=recorded
            )
    if not problems:
        return
    shown = "; ".join(problems[:MAX_SHOWN])
    if len(problems) > MAX_SHOWN:
        shown += f"; and {len(problems) - MAX_SHOWN} more"
    raise ResumeError(
        f"{location}: does not fit the tracked objects: {shown}. {NOTHING_CHANGED}. The "
        "checkpoint was saved by another model or optimizer; to train this one, start a new "
        "attempt (resume=off) or use another run name, or warm-start only the weights with "
        f"statecraft.load_weights(model, {_path_of(location)!r}) (which checks them too); to "
        "continue this run exactly, track the same model and optimizer as the saving run",
        path=location,
        problems=problems,
    )


def saved_world_size(trainer: Any, parts: Any) -> int | None:
    """The world size that saved a checkpoint: its RNG inventory's, else its per-rank data
    state's (``None`` when neither is recorded: a legacy checkpoint)."""
    rng = getattr(trainer, "rng", None)
    if rng is not None:
        return int(rng.world_size)
    data = getattr(parts, "data", None)
    if data is not None:
        return int(data.world_size)
    return None


def check_world_size(trainer: Any, parts: Any, *, world_size: int, location: str) -> None:
    """Refuse a consolidated checkpoint saved at another world size, before anything loads.

    Raises:
        WorldSizeChangedError: saved at world size N, resuming at M (both named, with the
            fix); a checkpoint that records no world size (legacy) passes.
    """
    saved = saved_world_size(trainer, parts)
    if saved is None or saved == world_size:
        return
    raise WorldSizeChangedError(
        f"{location}: saved at world size {saved}, resuming at {world_size}; consolidated "
        "checkpoints resume only at the same world size; use checkpoint_format=dcp to reshard "
        f"(or resume this checkpoint with {saved} ranks). {NOTHING_CHANGED}",
        path=location,
        saved_world_size=saved,
        world_size=world_size,
    )
