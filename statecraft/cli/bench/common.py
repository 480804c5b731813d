"""What every benchmark shares: argument checks, rates, scratch directories, the benchmark
model and a ``Checkpointer`` over it, and page-cache eviction for cold reads."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from statecraft.errors import ConfigError, ConfigIssue

PARTS = 16  # the benchmark model holds this many equal float32 parameters
GB = 1e9
MIB = 1 << 20


def check_positive(source: str, **values: int) -> None:
    issues = [
        ConfigIssue(f"--{name.replace('_', '-')}", value, "a positive integer")
        for name, value in values.items()
        if isinstance(value, bool) or not isinstance(value, int) or value < 1
    ]
    if issues:
        raise ConfigError(issues, source=source)


def best(samples: Sequence[float]) -> float:
    return min(samples)


def rate(nbytes: int, seconds: float) -> float:
    """GB/s (10^9 bytes per second)."""
    return nbytes / seconds / GB if seconds > 0 else float("inf")


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def scratch(root: str, name: str) -> Iterator[str]:
    """A fresh directory under ``root``, removed afterwards so the disk does not fill."""
    path = tempfile.mkdtemp(prefix=f"{name}-", dir=root)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def bench_root(directory: str | None) -> Iterator[str]:
    if directory is None:
        with tempfile.TemporaryDirectory(prefix="statecraft-bench-") as root:
            yield root
        return
    os.makedirs(directory, exist_ok=True)
    with scratch(os.path.abspath(directory), "statecraft-bench") as root:
        yield root


def build_model(size_mib: int, *, fill: bool) -> Any:
    """A module holding ``PARTS`` equal float32 parameters, ``size_mib`` MiB in all, every
    page touched (random values when ``fill``, zeros otherwise)."""
    import torch

    numel = max(1, size_mib * MIB // 4 // PARTS)
    generator = torch.Generator().manual_seed(0)
    params = []
    for _ in range(PARTS):
        tensor = torch.empty(numel, dtype=torch.float32)
        if fill:
            tensor.uniform_(-1.0, 1.0, generator=generator)
        else:
            tensor.zero_()
        params.append(torch.nn.Parameter(tensor))
    return torch.nn.ParameterList(params)


def state_bytes(model: Any) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def checkpointer(output_root: str, model: Any, *, resume: str) -> Any:
    import torch

    from statecraft import CheckpointConfig, Checkpointer, RunIdentity

    config = CheckpointConfig.from_dict(
        {"resume": resume, "save_every": 0, "save_async": False, "keep_optim_last": 0}
    )
    ckpt = Checkpointer(config, run=RunIdentity("bench", "save", "run"), output_root=output_root)
    ckpt.track(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    return ckpt


def evict(directory: str) -> bool:
    """Drop the cached pages of every file under ``directory`` (clean after their fsync), so
    the next load reads the disk; False where the OS offers no way to do it."""
    if not hasattr(os, "posix_fadvise"):
        return False
    for dirpath, _, files in os.walk(directory):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
    return True
