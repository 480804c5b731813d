"""The few collectives checkpointing needs, for one process or a ``torch.distributed`` group.

Every rank must call each collective in the same order (they are collectives). Rank 0
decides (resolves RUN_TS, writes consolidated files); the others follow its broadcast.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["Collective", "SingleProcess", "TorchDistributed", "default_collective"]


class Collective(Protocol):
    rank: int
    world_size: int

    def broadcast(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank."""

    def all_gather(self, value: Any) -> list[Any]:
        """Every rank's ``value``, indexed by rank."""

    def any(self, flag: bool) -> bool:
        """True on every rank if ``flag`` is true on any rank."""

    def barrier(self) -> None: ...


class SingleProcess:
    """The trivial collective of a world of one."""

    rank = 0
    world_size = 1

    def __repr__(self) -> str:
        return "SingleProcess()"

    def broadcast(self, value: Any) -> Any:
        return value

    def all_gather(self, value: Any) -> list[Any]:
        return [value]

    def any(self, flag: bool) -> bool:
        return bool(flag)

    def barrier(self) -> None:
        return None


class TorchDistributed:
    """Collectives over the default ``torch.distributed`` process group (gloo or nccl)."""

    def __init__(self) -> None:
        import torch.distributed as dist

        self._dist = dist
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()

    def __repr__(self) -> str:
        return f"TorchDistributed(rank={self.rank}, world_size={self.world_size})"

    def broadcast(self, value: Any) -> Any:
        box = [value if self.rank == 0 else None]
        self._dist.broadcast_object_list(box, src=0)
        return box[0]

    def all_gather(self, value: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        self._dist.all_gather_object(out, value)
        return out

    def any(self, flag: bool) -> bool:
        return any(self.all_gather(bool(flag)))

    def barrier(self) -> None:
        self._dist.barrier()


def default_collective() -> Collective:
    """``TorchDistributed`` when a default process group is initialised, else a world of one."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return TorchDistributed()
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    return SingleProcess()
