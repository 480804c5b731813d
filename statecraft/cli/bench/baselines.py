"""The baselines statecraft is measured against, in the same process and on the same bytes:
raw write + fsync (the physical limit), ``torch.save`` + fsync + rename, and ``torch.load``
(plain and ``mmap=True``) + ``load_state_dict``."""

from __future__ import annotations

import os
import time
from typing import Any

from statecraft.cli.bench.common import build_model, fsync_dir


def raw_write(model: Any, directory: str) -> float:
    """Seconds to write the tensors' bytes to a new file, fsync and close it."""
    views = [memoryview(p.detach().numpy()).cast("B") for p in model.parameters()]
    path = os.path.join(directory, "raw.bin")
    started = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        for view in views:
            while view:
                view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    seconds = time.perf_counter() - started
    os.unlink(path)
    return seconds


def torch_save(model: Any, directory: str) -> tuple[float, int]:
    """Seconds for ``torch.save`` to a temporary name + fsync + rename + directory fsync."""
    import torch

    state = model.state_dict()
    tmp, final = os.path.join(directory, "model.pt.tmp"), os.path.join(directory, "model.pt")
    started = time.perf_counter()
    torch.save(state, tmp)
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, final)
    fsync_dir(directory)
    seconds = time.perf_counter() - started
    size = os.path.getsize(final)
    os.unlink(final)
    return seconds, size


def torch_load(path: str, size_mib: int, *, mmap: bool) -> tuple[float, list[tuple[str, float]]]:
    import torch

    model = build_model(size_mib, fill=False)
    started = time.perf_counter()
    state = torch.load(path, weights_only=True, mmap=mmap, map_location="cpu")
    model.load_state_dict(state)
    seconds = time.perf_counter() - started
    del state
    return seconds, []
