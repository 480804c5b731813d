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
import math
import random
from collections.abc import Callable, Sequence
from typing import Any, Literal

import attrs
import numpy as np
import torch

from statecraft.errors import TrainerStateError

__all__ = [
    "RNG_SCHEMA",
    "RngInventory",
    "RngRestoreResult",
    "capture_rng_state",
    "gather_rng_inventory",
    "restore_rank_rng",
    "restore_rng_state",
]

RNG_SCHEMA = "statecraft.rng.v1"

RngRestoreResult = Literal["restored", "missing", "topology_changed"]
"""What :func:`restore_rank_rng` did: restored this rank's streams, found no inventory (legacy
checkpoint), or skipped because the world size differs from the saved one."""

_log = logging.getLogger(__name__)

_RANK_KEYS_REQUIRED = ("python", "numpy", "torch")
_RANK_KEYS = (*_RANK_KEYS_REQUIRED, "cuda")
_NUMPY_KEYS = ("kind", "keys", "pos", "has_gauss", "cached_gaussian")
_INVENTORY_KEYS = ("schema", "world_size", "ranks")
_UINT32_END = 1 << 32

_CORRUPT_FIX = (
    "The RNG inventory in this file is damaged or was not written by statecraft; restore "
    "trainer.pt from an intact copy, or start a new run from these weights instead of exact resume."
)


# --- shared private helpers (also used by trainer_state.py)


def _describe(value: object) -> str:
    """A short, type-revealing rendering of ``value`` for error messages."""
    if isinstance(value, torch.Tensor):
        return f"tensor(dtype={value.dtype}, shape={tuple(value.shape)}, device={value.device})"
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({type(value).__name__})"


def _is_int(value: object) -> bool:
    """True for a real ``int`` (``bool`` is not accepted as a number)."""
    return type(value) is int


def _state_error(source: str, what: str, problems: Sequence[str], fix: str) -> TrainerStateError:
    """Build one :class:`TrainerStateError` listing every problem, carrying them as fields."""
    lines = "\n".join(f"  - {p}" for p in problems)
    err = TrainerStateError(f"{source}: {len(problems)} problem(s) in the {what}:\n{lines}\n{fix}")
    err.source = source  # type: ignore[attr-defined]
    err.problems = list(problems)  # type: ignore[attr-defined]
    return err


def _deep_equal(a: Any, b: Any) -> bool:
    """Structural equality that compares tensors by dtype, shape and value, and is type-strict."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and torch.equal(a.cpu(), b.cpu())
        )
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_deep_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_deep_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


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
        "python": (int(version), tuple(int(x) for x in internal), gauss_next),
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
    log = log or _log
    problems = _rank_state_problems(state, "state")
    if problems:
        raise _state_error("RNG snapshot", "RNG state", problems, _CORRUPT_FIX)
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
        return [f"{path}: expected {expected}; got {_describe(value)}"]
    version, internal, gauss_next = value
    problems = []
    if not _is_int(version):
        problems.append(f"{path}[0]: expected an int version; got {_describe(version)}")
    if not isinstance(internal, tuple | list) or not all(_is_int(x) for x in internal):
        problems.append(f"{path}[1]: expected a sequence of ints; got {_describe(internal)}")
    if gauss_next is not None and type(gauss_next) is not float:
        problems.append(f"{path}[2]: expected a float or None; got {_describe(gauss_next)}")
    if not problems:
        try:
            random.Random().setstate((version, tuple(internal), gauss_next))
        except Exception as exc:  # any failure of the dry run on a scratch generator
            problems.append(f"{path}: random.setstate rejects it ({exc})")
    return problems


def _numpy_problems(value: object, path: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{path}: expected a dict with keys {list(_NUMPY_KEYS)}; got {_describe(value)}"]
    problems = [f"{path}: missing key {k!r}" for k in _NUMPY_KEYS if k not in value]
    problems += [f"{path}: unexpected key {k!r}" for k in value if k not in _NUMPY_KEYS]
    if problems:
        return problems
    kind, keys = value["kind"], value["keys"]
    if not isinstance(kind, str):
        problems.append(f"{path}.kind: expected a str; got {_describe(kind)}")
    if not (
        isinstance(keys, torch.Tensor)
        and keys.dtype == torch.int64
        and keys.dim() == 1
        and keys.device.type == "cpu"
    ):
        problems.append(f"{path}.keys: expected a 1-D int64 CPU tensor; got {_describe(keys)}")
    elif keys.numel() and (int(keys.min()) < 0 or int(keys.max()) >= _UINT32_END):
        problems.append(f"{path}.keys: expected values in [0, 2**32); got values outside it")
    for name in ("pos", "has_gauss"):
        if not _is_int(value[name]):
            problems.append(f"{path}.{name}: expected an int; got {_describe(value[name])}")
    if type(value["cached_gaussian"]) is not float:
        problems.append(
            f"{path}.cached_gaussian: expected a float; got {_describe(value['cached_gaussian'])}"
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
    return f"{path}: expected a 1-D uint8 CPU tensor (a generator state); got {_describe(value)}"


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
        return [f"{path}: expected None or a list of uint8 tensors; got {_describe(value)}"]
    return [p for i, t in enumerate(value) if (p := _byte_tensor_problem(t, f"{path}[{i}]"))]


def _rank_state_problems(state: object, path: str) -> list[str]:
    if not isinstance(state, dict):
        return [f"{path}: expected a dict with keys {list(_RANK_KEYS)}; got {_describe(state)}"]
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


def _inventory_problems(world_size: Any, ranks: object) -> list[str]:
    problems = []
    if not _is_int(world_size) or world_size < 1:
        problems.append(f"world_size: expected an int >= 1; got {_describe(world_size)}")
    if not isinstance(ranks, list | tuple):
        problems.append(f"ranks: expected a list of per-rank states; got {_describe(ranks)}")
        return problems
    if _is_int(world_size) and len(ranks) != world_size:
        problems.append(
            f"ranks: expected {world_size} per-rank states (world_size); got {len(ranks)}"
        )
    for i, state in enumerate(ranks):
        problems += _rank_state_problems(state, f"ranks[{i}]")
    return problems


def _ranks_as_tuple(value: object) -> object:
    return tuple(value) if isinstance(value, list) else value


# --- the inventory


@attrs.frozen
class RngInventory:
    """Every rank's RNG snapshot, in rank order: ``ranks[r]`` belongs to rank ``r``.

    Built by :func:`gather_rng_inventory` on save and by :meth:`from_payload` on resume; both
    paths validate every snapshot, so an inventory that exists can be restored.

    Raises:
        TrainerStateError: on construction, when ``world_size`` is not a positive int, the number
            of snapshots differs from it, or any snapshot is malformed.
    """

    world_size: int
    ranks: tuple[dict[str, Any], ...] = attrs.field(
        converter=_ranks_as_tuple, eq=attrs.cmp_using(eq=_deep_equal), hash=False
    )

    def __attrs_post_init__(self) -> None:
        problems = _inventory_problems(self.world_size, self.ranks)
        if problems:
            raise _state_error("RngInventory(...)", "RNG inventory", problems, _CORRUPT_FIX)

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
            problems = [f"expected a dict with keys {list(_INVENTORY_KEYS)}; got {_describe(obj)}"]
            raise _state_error(source, "RNG inventory", problems, _CORRUPT_FIX)
        problems = [f"missing key {k!r}" for k in _INVENTORY_KEYS if k not in obj]
        problems += [f"unexpected key {k!r}" for k in obj if k not in _INVENTORY_KEYS]
        if "schema" in obj and obj["schema"] != RNG_SCHEMA:
            problems.append(
                f"schema: expected {RNG_SCHEMA!r}; got {_describe(obj['schema'])} "
                "(written by a newer or foreign writer)"
            )
        if "world_size" in obj and "ranks" in obj:
            problems += _inventory_problems(obj["world_size"], obj["ranks"])
        if problems:
            raise _state_error(source, "RNG inventory", problems, _CORRUPT_FIX)
        return cls(obj["world_size"], tuple(obj["ranks"]))


def _check_rank(rank: Any, world_size: Any) -> None:
    if not _is_int(world_size) or world_size < 1:
        raise TrainerStateError(
            f"world_size must be an int >= 1 (got {_describe(world_size)}); pass the size of "
            "the process group"
        )
    if not _is_int(rank) or not 0 <= rank < world_size:
        raise TrainerStateError(
            f"rank must be an int in [0, {world_size}) (got {_describe(rank)}); pass this "
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
    inventory: RngInventory | None, *, rank: int, world_size: int, log: logging.Logger
) -> RngRestoreResult:
    """Restore this rank's RNG streams from a checkpoint's inventory, or log why not.

    Args:
        inventory: the checkpoint's inventory; ``None`` for a legacy checkpoint without one.
        rank: this process's rank.
        world_size: the current number of ranks.
        log: receives one line saying what happened (a warning when nothing was restored).

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
        log.warning(
            "rank %d: topology changed: RNG inventory saved with world_size=%d, now "
            "world_size=%d; RNG streams are not restored (rank-local streams restore exactly only "
            "at the same world size) and keep their current seeding",
            rank,
            inventory.world_size,
            world_size,
        )
        return "topology_changed"
    restore_rng_state(inventory.ranks[rank], log=log)
    log.info("rank %d: RNG streams restored (world_size=%d)", rank, world_size)
    return "restored"
