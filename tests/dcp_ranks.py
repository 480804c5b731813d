"""Helpers of the multi-rank DCP tests: what a child rank breaks in itself and gathers, and what
the judging test reads back (a report file per rank, the checkpoints folder) and compares
exactly."""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path
from typing import Any

import torch


def rank_report(tmp: Path, phase: str, rank: int) -> dict[str, Any]:
    """The report rank ``rank`` saved as ``<tmp>/<phase>-rank<rank>.pt``."""
    loaded: dict[str, Any] = torch.load(tmp / f"{phase}-rank{rank}.pt", weights_only=True)
    return loaded


def checkpoints_dir(out: Path) -> Path:
    """The one ``checkpoints`` folder under a run's output folder."""
    [found] = out.glob("**/checkpoints")
    return found


def assert_equal(a: Any, b: Any, where: str = "") -> None:
    """Nested tensors, dicts, lists and plain values are exactly equal (``where`` names the
    first difference)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), where
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict), where
        assert sorted(a, key=str) == sorted(b, key=str), where
        for key in a:
            assert_equal(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_equal(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def break_shard_write(iteration: str, how: str = "kill") -> None:
    """In this child only: this rank's shard write of ``iteration`` (an ``iter_*`` name)
    SIGKILLs the process once its first bytes reach the temporary file (``kill``: a node lost
    mid-save) or fails with ENOSPC (``fail``)."""
    from statecraft.writers import dcp_store_writer

    original_file = dcp_store_writer.StoreStorageWriter._write_file
    original_write = dcp_store_writer._ItemStream.write

    def write_file(self: Any, name: str, items: Any, planner: Any) -> Any:
        if iteration in self.path:
            if how == "fail":
                raise OSError(errno.ENOSPC, "No space left on device (injected)")

            def dying(stream: Any, data: Any) -> int:
                original_write(stream, data)
                os.kill(os.getpid(), signal.SIGKILL)
                return 0  # pragma: no cover

            dcp_store_writer._ItemStream.write = dying  # type: ignore[method-assign]
        return original_file(self, name, items, planner)

    dcp_store_writer.StoreStorageWriter._write_file = write_file  # type: ignore[method-assign]


def full_state(model: Any, optimizer: Any) -> dict[str, Any]:
    """The gathered full state dicts (collective; complete on rank 0)."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return {
        "model": get_model_state_dict(model, options=options),
        "optim": get_optimizer_state_dict(model, optimizer, options=options),
    }
