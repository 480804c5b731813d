"""Real training runs with committed checkpoints, shared by the bad-input and inspect tests."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path
from typing import Any

import torch

import statecraft as sc

CONFIG = ["save_every=2", "save_async=false", "keep_optim_last=0"]
RUN = sc.RunIdentity("proj", "group", "name")
STEPS = 8  # commits iterations 2, 4, 6 and 8


class Cursor:
    """A data source with a resumable position (what ``track(data=...)`` needs)."""

    def __init__(self) -> None:
        self.position = 0

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = state["position"]


class Objects:
    """The live training objects of one run."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Linear(4, 3)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=0.01)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=2)
        self.cursor = Cursor()

    def step(self) -> None:
        self.model(torch.randn(2, 4)).sum().backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        self.scheduler.step()
        self.cursor.position += 2


def open_checkpointer(
    out: Path, *overrides: str, data: bool = True, filesystem: Any = None
) -> tuple[sc.Checkpointer, Objects]:
    """A checkpointer over :data:`CONFIG` with ``overrides`` added (an override of a knob
    :data:`CONFIG` sets replaces it), tracking fresh objects."""
    knobs = {k.split("=", 1)[0]: k for k in (*CONFIG, *overrides)}  # an override replaces
    objects = Objects()
    ckpt = sc.Checkpointer(
        sc.CheckpointConfig.load(None, list(knobs.values())),
        run=RUN,
        output_root=out,
        filesystem=filesystem,
    )
    ckpt.track(
        model=objects.model,
        optimizer=objects.optimizer,
        scheduler=objects.scheduler,
        data=objects.cursor if data else None,
    )
    return ckpt, objects


def train(ckpt: sc.Checkpointer, objects: Objects, steps: int) -> None:
    for _ in range(steps):
        objects.step()
        ckpt.record(sc.Outcome.APPLIED)
        ckpt.step_end()


def committed_run(out: Path, *, data: bool) -> Path:
    """An output root with one attempt holding committed iterations 2, 4, 6 and 8."""
    ckpt, objects = open_checkpointer(out, data=data)
    ckpt.resume()
    train(ckpt, objects, STEPS)
    return out


def private_copy(pristine: Path, tmp_path: Path) -> Path:
    """A copy of a committed run that one test may damage."""
    copy = tmp_path / "out"
    shutil.copytree(pristine, copy)
    return copy


def flip_tensor_bit(path: Path) -> None:
    """Flip one bit inside the first tensor's bytes of a torch.save file: same size, still
    loadable, so only a digest can tell."""
    entry = next(i for i in zipfile.ZipFile(path).infolist() if "/data/" in i.filename)
    data = bytearray(path.read_bytes())
    header = entry.header_offset
    start = (
        header
        + 30
        + int.from_bytes(data[header + 26 : header + 28], "little")
        + int.from_bytes(data[header + 28 : header + 30], "little")
    )
    data[start + 1] ^= 0x10
    size = path.stat().st_size
    path.write_bytes(bytes(data))
    assert path.stat().st_size == size  # the damage must be invisible to a size check


class NoLockStore:
    """A local store seen without an OS path (like the simulated one): a writer lease over it
    takes no ``flock`` and is checked by its record and PID liveness alone."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def local_path(self, path: str) -> None:
        return None
