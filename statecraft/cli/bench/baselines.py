"""The baselines statecraft is measured against, in the same process and on the same bytes:
raw write + fsync (the target's baseline), the same with device writeback started after each
tensor (``sync_file_range``, as statecraft's writer does: the stricter physical limit), raw
write of a byte count (the size sweep's), ``torch.save`` + fsync + rename of one file or of a
whole checkpoint's files with one directory fsync (the sweep's fair baseline), and ``torch.load``
(plain and ``mmap=True``) + ``load_state_dict``."""

from __future__ import annotations

import os
import time
from typing import Any

from statecraft.cli.bench.common import build_model, fsync_dir
from statecraft.storage.filesystem import OsFilesystem


def raw_write(model: Any, directory: str, *, writeback: bool = False) -> float:
    """Seconds to write the tensors' bytes to a new file, fsync and close it; with
    ``writeback``, device writeback of each tensor's range is started as soon as it is written
    (where the OS offers ``sync_file_range``)."""
    views = [memoryview(p.detach().numpy()).cast("B") for p in model.parameters()]
    path = os.path.join(directory, "raw.bin")
    fs = OsFilesystem()
    started = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        offset = 0
        for view in views:
            size = len(view)
            while view:
                view = view[os.write(fd, view) :]
            if writeback:
                fs.start_writeback(fd, offset, size)
            offset += size
        os.fsync(fd)
    finally:
        os.close(fd)
    seconds = time.perf_counter() - started
    os.unlink(path)
    return seconds


def raw_write_bytes(nbytes: int, directory: str, block: memoryview) -> float:
    """Seconds to ``os.write`` ``nbytes`` (from ``block``, repeated) to a new file and fsync."""
    path = os.path.join(directory, "raw.bin")
    started = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        left = nbytes
        while left:
            left -= os.write(fd, block[: min(left, len(block))])
        os.fsync(fd)
    finally:
        os.close(fd)
    seconds = time.perf_counter() - started
    os.unlink(path)
    return seconds


def torch_save(model: Any, directory: str) -> tuple[float, int]:
    """Seconds for ``torch.save`` to a temporary name + fsync + rename + directory fsync."""
    return torch_save_files({"model.pt": model.state_dict()}, directory)


def torch_save_files(payloads: dict[str, Any], directory: str) -> tuple[float, int]:
    """The fair baseline: each payload ``torch.save``d to a temporary name, ``fsync``ed and
    renamed; then one directory ``fsync``. Seconds and bytes written; the files are removed."""
    import torch

    started = time.perf_counter()
    for name, payload in payloads.items():
        tmp = os.path.join(directory, f".{name}.tmp")
        torch.save(payload, tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, os.path.join(directory, name))
    fsync_dir(directory)
    seconds = time.perf_counter() - started
    size = sum(os.path.getsize(os.path.join(directory, n)) for n in payloads)
    for name in payloads:
        os.unlink(os.path.join(directory, name))
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
