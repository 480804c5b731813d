"""Per-rank RNG streams: capture, a strict ``weights_only``-safe payload, and exact restore.

Every process owns four random streams that a training loop may draw from: Python's ``random``,
NumPy's legacy global ``RandomState``, torch's CPU generator and one torch CUDA generator per
visible device. :func:`capture_rng_state` snapshots them as plain containers and tensors, so the
snapshot survives ``torch.save`` and ``torch.load(..., weights_only=True)`` unchanged;
:func:`restore_rng_state` puts them back exactly.

A checkpoint stores one snapshot per rank in an :class:`RngInventory` inside ``trainer.pt``.
The call order of the protocol, and who calls each step:

1. save, on EVERY rank (a collective): :func:`gather_rng_inventory` -- rank ``r``'s snapshot lands
   at ``inventory.ranks[r]``; rank 0 writes ``inventory.to_payload()`` into ``trainer.pt``.
2. resume, on every rank: the loader parses the payload with :meth:`RngInventory.from_payload`
   (a malformed inventory fails, it is never mistaken for a legacy checkpoint), then each rank
   calls :func:`restore_rank_rng`, which restores its own streams when the world size is the
   one that was saved, and otherwise logs why it did not (legacy checkpoint, changed topology).
"""

from __future__ import annotations

import logging
import random
from typing import Any, Literal

import numpy as np
import torch

from statecraft.checkpoint.state.problems import (
    describe,
    is_int,
    state_error,
)

__all__ = [
    "INVENTORY_KEYS",
    "RNG_CORRUPT_FIX",
    "RNG_SCHEMA",
    "RngRestoreResult",
    "capture_rng_state",
    "inventory_problems",
    "ranks_as_tuple",
    "restore_rng_state",
    "restore_validated_rng_state",
]

RNG_SCHEMA = "statecraft.rng.v1"

RngRestoreResult = Literal["restored", "missing", "topology_changed"]
"""What :func:`restore_rank_rng` did: restored this rank's streams, found no inventory (legacy
checkpoint), or skipped because the world size differs from the saved one."""

_log = logging.getLogger(__name__)

_RANK_KEYS_REQUIRED = ("python", "numpy", "torch")
_RANK_KEYS = (*_RANK_KEYS_REQUIRED, "cuda")
_NUMPY_KEYS = ("kind", "keys", "pos", "has_gauss", "cached_gaussian")
INVENTORY_KEYS = ("schema", "world_size", "ranks")
_UINT32_END = 1 << 32

RNG_CORRUPT_FIX = (
    "The RNG inventory in this file is damaged or was not written by statecraft; restore "
    "trainer.pt from an intact copy, or start a new run from these weights instead of exact resume."
)


# --- capture and restore of one process


def capture_rng_state() -> dict[str, Any]:
    """Snapshot every RNG stream of THIS process as a ``weights_only``-safe dict.

    Returns:
        ``{"python": (version, internal_state, gauss_next), "numpy": {"kind", "keys", "pos",
        "has_gauss", "cached_gaussian"}, "torch": ByteTensor, "cuda": [ByteTensor, ...] | None}``;
        NumPy's uint32 key vector is stored as an int64 tensor, ``cuda`` is ``None`` when CUDA is
        unavailable. Every tensor is a fresh CPU copy, so later draws do not change the snapshot.

    Note:
        The CUDA entry comes from ``torch.cuda.get_rng_state_all()``, which initializes a context on
        every visible device; launchers that give each rank one device should restrict
        ``CUDA_VISIBLE_DEVICES`` accordingly.

    Example:
        >>> state = capture_rng_state()
        >>> a = random.random()
        >>> restore_rng_state(state)
        >>> random.random() == a
        True
    """
    version, internal, gauss_next = random.getstate()
    np_state: Any = np.random.get_state(legacy=True)
    kind, keys, pos, has_gauss, cached_gaussian = np_state
    cuda: list[torch.Tensor] | None = None
    if torch.cuda.is_available():
        cuda = [t.detach().cpu().clone() for t in torch.cuda.get_rng_state_all()]
    return {
        "python": (int(version), tuple(map(int, internal)), gauss_next),
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64).copy()),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "torch": torch.get_rng_state().clone(),
        "cuda": cuda,
    }


def restore_rng_state(state: dict[str, Any], *, log: logging.Logger | None = None) -> None:
    """Restore this process's RNG streams exactly from a :func:`capture_rng_state` snapshot.

    The whole snapshot is validated first (including a dry run on scratch generators), so a bad
    snapshot changes no stream. CUDA streams are restored only when the snapshot has them and
    the same number of devices is visible; otherwise CUDA is skipped with a logged warning.

    Args:
        state: a snapshot from :func:`capture_rng_state` (or from an inventory's ``ranks``).
        log: where warnings go; defaults to this module's logger.

    Raises:
        TrainerStateError: the snapshot is malformed; every defect is listed.
    """
    problems = _rank_state_problems(state, "state")
    if problems:
        raise state_error("RNG snapshot", "RNG state", problems, RNG_CORRUPT_FIX)
    restore_validated_rng_state(state, log=log)


def restore_validated_rng_state(
    state: dict[str, Any], *, log: logging.Logger | None = None
) -> None:
    """:func:`restore_rng_state` of a snapshot already validated (one of an
    :class:`~statecraft.checkpoint.state.rng_inventory.RngInventory`'s ``ranks``, which its
    construction validated, dry runs included), without validating it again."""
    log = log or _log
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    np.random.set_state(_numpy_tuple(state["numpy"]))
    torch.set_rng_state(state["torch"])
    _restore_cuda(state.get("cuda"), log)


def _numpy_tuple(np_state: dict[str, Any]) -> tuple[str, np.ndarray, int, int, float]:
    keys = np_state["keys"].detach().cpu().numpy().astype(np.uint32)
    return (
        np_state["kind"],
        keys,
        np_state["pos"],
        np_state["has_gauss"],
        np_state["cached_gaussian"],
    )


def _restore_cuda(cuda: list[torch.Tensor] | None, log: logging.Logger) -> None:
    available = torch.cuda.is_available()
    if cuda is None:
        if available:
            log.warning(
                "the RNG snapshot has no CUDA state (saved without CUDA); the CUDA generators "
                "keep their current seeding, so CUDA random draws will not match the saved run"
            )
        return
    if not available:
        log.warning(
            "the RNG snapshot has CUDA state for %d device(s) but CUDA is not available here; "
            "CUDA RNG is not restored",
            len(cuda),
        )
        return
    count = torch.cuda.device_count()
    if count != len(cuda):
        log.warning(
            "the RNG snapshot has CUDA state for %d device(s) but %d are visible now; CUDA RNG is "
            "not restored (make the same devices visible to restore it exactly)",
            len(cuda),
            count,
        )
        return
    torch.cuda.set_rng_state_all(list(cuda))


# --- validation


def _python_problems(value: object, path: str) -> list[str]:
    expected = "(version, internal_state, gauss_next) as random.getstate() returns"
    if not isinstance(value, tuple | list) or len(value) != 3:
        return [f"{path}: expected {expected}; got {describe(value)}"]
    version, internal, gauss_next = value
    problems = []
    if not is_int(version):
        problems.append(f"{path}[0]: expected an int version; got {describe(version)}")
    # every element exactly an int (is_int), checked in C: this runs at every resume
    if not isinstance(internal, tuple | list) or not set(map(type, internal)) <= {int}:
        problems.append(f"{path}[1]: expected a sequence of ints; got {describe(internal)}")
    if gauss_next is not None and type(gauss_next) is not float:
        problems.append(f"{path}[2]: expected a float or None; got {describe(gauss_next)}")
    if not problems:
        try:
            random.Random().setstate((version, tuple(internal), gauss_next))
        except Exception as exc:  # any failure of the dry run on a scratch generator
            problems.append(f"{path}: random.setstate rejects it ({exc})")
    return problems


def _numpy_problems(value: object, path: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{path}: expected a dict with keys {list(_NUMPY_KEYS)}; got {describe(value)}"]
    problems = [f"{path}: missing key {k!r}" for k in _NUMPY_KEYS if k not in value]
    problems += [f"{path}: unexpected key {k!r}" for k in value if k not in _NUMPY_KEYS]
    if problems:
        return problems
    kind, keys = value["kind"], value["keys"]
    if not isinstance(kind, str):
        problems.append(f"{path}.kind: expected a str; got {describe(kind)}")
    if not (
        isinstance(keys, torch.Tensor)
        and keys.dtype == torch.int64
        and keys.dim() == 1
        and keys.device.type == "cpu"
    ):
        problems.append(f"{path}.keys: expected a 1-D int64 CPU tensor; got {describe(keys)}")
    elif keys.numel() and (int(keys.min()) < 0 or int(keys.max()) >= _UINT32_END):
        problems.append(f"{path}.keys: expected values in [0, 2**32); got values outside it")
    for name in ("pos", "has_gauss"):
        if not is_int(value[name]):
            problems.append(f"{path}.{name}: expected an int; got {describe(value[name])}")
    if type(value["cached_gaussian"]) is not float:
        problems.append(
            f"{path}.cached_gaussian: expected a float; got {describe(value['cached_gaussian'])}"
        )
    if not problems:
        try:
            np.random.RandomState(0).set_state(_numpy_tuple(value))
        except Exception as exc:  # any failure of the dry run on a scratch generator
            problems.append(f"{path}: numpy.random.set_state rejects it ({exc})")
    return problems


def _byte_tensor_problem(value: object, path: str) -> str | None:
    if (
        isinstance(value, torch.Tensor)
        and value.dtype == torch.uint8
        and value.dim() == 1
        and value.device.type == "cpu"
    ):
        return None
    return f"{path}: expected a 1-D uint8 CPU tensor (a generator state); got {describe(value)}"


def _torch_problems(value: Any, path: str) -> list[str]:
    problem = _byte_tensor_problem(value, path)
    if problem:
        return [problem]
    try:
        torch.Generator().set_state(value)
    except Exception as exc:  # any failure of the dry run on a scratch generator
        return [f"{path}: torch.Generator.set_state rejects it ({exc})"]
    return []


def _cuda_problems(value: object, path: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        return [f"{path}: expected None or a list of uint8 tensors; got {describe(value)}"]
    return [p for i, t in enumerate(value) if (p := _byte_tensor_problem(t, f"{path}[{i}]"))]


def _rank_state_problems(state: object, path: str) -> list[str]:
    if not isinstance(state, dict):
        return [f"{path}: expected a dict with keys {list(_RANK_KEYS)}; got {describe(state)}"]
    problems = [f"{path}: missing key {k!r}" for k in _RANK_KEYS_REQUIRED if k not in state]
    problems += [f"{path}: unexpected key {k!r}" for k in state if k not in _RANK_KEYS]
    if "python" in state:
        problems += _python_problems(state["python"], f"{path}.python")
    if "numpy" in state:
        problems += _numpy_problems(state["numpy"], f"{path}.numpy")
    if "torch" in state:
        problems += _torch_problems(state["torch"], f"{path}.torch")
    problems += _cuda_problems(state.get("cuda"), f"{path}.cuda")
    return problems


def inventory_problems(world_size: Any, ranks: object) -> list[str]:
    problems = []
    if not is_int(world_size) or world_size < 1:
        problems.append(f"world_size: expected an int >= 1; got {describe(world_size)}")
    if not isinstance(ranks, list | tuple):
        problems.append(f"ranks: expected a list of per-rank states; got {describe(ranks)}")
        return problems
    if is_int(world_size) and len(ranks) != world_size:
        problems.append(
            f"ranks: expected {world_size} per-rank states (world_size); got {len(ranks)}"
        )
    for i, state in enumerate(ranks):
        problems += _rank_state_problems(state, f"ranks[{i}]")
    return problems


def ranks_as_tuple(value: object) -> object:
    return tuple(value) if isinstance(value, list) else value
