"""A full disk during a save: one ``DiskFullError`` naming the file, the bytes needed and free,
and the fix; older checkpoints, ``latest`` and free space unchanged; the next save succeeds.

Exercised on a real 4 MiB tmpfs (root only), and always through ``OsFilesystem`` fault
injection and ``SimFilesystem(capacity_bytes=...)`` so CI covers the path without a mount.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from checkpoint_runs import RUN, Cursor

import statecraft as sc
from statecraft.engine.crash import FaultKind, IoGate
from statecraft.errors import DiskFullError
from statecraft.storage.filesystem import OsFilesystem
from statecraft.storage.local import is_temporary_name
from statecraft.storage.simfs import SimFilesystem

CONFIG = ["save_every=2", "save_async=false", "keep_optim_last=0"]


class Objects:
    """Live objects whose model.pt is ~66 KB and optim.pt ~132 KB."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Linear(128, 128)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=0.01)
        self.cursor = Cursor()

    def step(self) -> None:
        self.model(torch.randn(2, 128)).sum().backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        self.cursor.position += 2


def open_run(out: Path, filesystem: object = None) -> tuple[sc.Checkpointer, Objects]:
    ckpt, objects, _ = open_resumed(out, filesystem)
    return ckpt, objects


def open_resumed(
    out: Path, filesystem: object = None
) -> tuple[sc.Checkpointer, Objects, sc.ResumeResult]:
    objects = Objects()
    ckpt = sc.Checkpointer(
        sc.CheckpointConfig.load(None, CONFIG),
        run=RUN,
        output_root=out,
        filesystem=filesystem,  # type: ignore[arg-type]
    )
    ckpt.track(model=objects.model, optimizer=objects.optimizer, data=objects.cursor)
    return ckpt, objects, ckpt.resume()


def train(ckpt: sc.Checkpointer, objects: Objects, steps: int) -> None:
    for _ in range(steps):
        objects.step()
        ckpt.record(sc.Outcome.APPLIED)
        ckpt.step_end()


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def assert_message(error: DiskFullError, name: str) -> None:
    message = str(error)
    assert message.startswith("disk full: writing ")
    assert error.path.endswith(f"/iter_000000004/{name}")
    assert error.path in message
    assert f"needed at least {error.bytes_needed:,} bytes" in message
    assert "keep_optim_last / keep_model_last" in message
    assert "point output_root at a larger disk" in message
    assert "older checkpoints are intact" in message


def checkpoints_dir(out: Path) -> Path:
    (attempt,) = (p for p in (out / "proj" / "group" / "name").iterdir() if p.is_dir())
    return attempt / "checkpoints"


def fill(mount: Path, leave: int) -> Path:
    """Fill the filesystem at ``mount`` until only about ``leave`` bytes are free."""
    filler = mount / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, bytes(64 << 10))
    except OSError:
        pass
    try:
        while True:
            os.write(fd, bytes(4096))
    except OSError:
        pass
    os.close(fd)
    os.truncate(filler, max(0, filler.stat().st_size - leave))
    return filler


class TestRealTmpfs:
    @pytest.mark.parametrize(("leave", "culprit"), [(0, "model.pt"), (100_000, "optim.pt")])
    def test_disk_full_mid_save(self, tmpfs: Path, leave: int, culprit: str) -> None:
        """Filling the tmpfs so model.pt or optim.pt cannot be written raises one DiskFullError;
        committed bytes, latest and free space are unchanged, and after freeing space the
        next save succeeds and resume adopts it."""
        out = tmpfs / "out"
        ckpt, objects = open_run(out)
        train(ckpt, objects, 2)  # commits iteration 2
        filler = fill(tmpfs, leave)
        before = snapshot(out)
        free_before = os.statvfs(tmpfs).f_bavail
        with pytest.raises(DiskFullError) as info:
            train(ckpt, objects, 2)
        assert_message(info.value, culprit)
        assert info.value.bytes_free is not None
        assert info.value.bytes_free <= leave + 8192
        assert info.value.__cause__ is None  # no torch RuntimeError in front of it
        assert snapshot(out) == before
        assert os.statvfs(tmpfs).f_bavail == free_before  # nothing leaked
        ckpts = checkpoints_dir(out)
        assert not [p for p in ckpts.rglob("*") if is_temporary_name(p.name)]
        assert (ckpts / "latest_checkpoint.txt").read_bytes() == before[
            str((ckpts / "latest_checkpoint.txt").relative_to(out))
        ]
        filler.unlink()
        train(ckpt, objects, 2)  # iteration 6 commits
        _, _, resumed = open_resumed(out)
        assert resumed.step == 6
        assert resumed.source is not None
        assert resumed.source.endswith("iter_000000006")
        assert sorted(p.name for p in ckpts.iterdir() if p.name.startswith("iter_")) == [
            "iter_000000002",
            "iter_000000006",
        ]


def save_log(tmp_path: Path) -> list[tuple[str, str]]:
    """The (op, target) log of the second save of a run on the real disk."""
    gate = IoGate()
    ckpt, objects = open_run(tmp_path / "dry", OsFilesystem(gate=gate))
    train(ckpt, objects, 2)
    start = gate.count
    train(ckpt, objects, 2)
    return [(r.op, r.target) for r in gate.log[start:]]


class TestFaultInjection:
    @pytest.mark.parametrize("culprit", ["model.pt", "optim.pt"])
    def test_injected_enospc_through_checkpointer(self, tmp_path: Path, culprit: str) -> None:
        """An ENOSPC injected into the first write of model.pt or optim.pt on the real disk
        raises DiskFullError naming it; committed bytes unchanged; the next save succeeds."""
        log = save_log(tmp_path)
        opened = next(
            i for i, (op, t) in enumerate(log) if op == "open_write" and f".{culprit}.tmp" in t
        )
        offset = next(i for i in range(opened, len(log)) if log[i][0] == "write")
        gate = IoGate()
        out = tmp_path / "out"
        ckpt, objects = open_run(out, OsFilesystem(gate=gate))
        train(ckpt, objects, 2)
        before = snapshot(out)
        gate.faults = {gate.count + offset: FaultKind.NO_SPACE}
        with pytest.raises(DiskFullError) as info:
            train(ckpt, objects, 2)
        assert_message(info.value, culprit)
        tensor_bytes = 128 * 128 * 4 + 128 * 4
        assert info.value.bytes_needed >= tensor_bytes * (2 if culprit == "optim.pt" else 1)
        # model.pt + optim.pt (weights plus AdamW's two moments) at the least
        assert info.value.checkpoint_bytes is not None
        assert info.value.checkpoint_bytes >= 3 * tensor_bytes
        assert f"the whole checkpoint needs at least {info.value.checkpoint_bytes:,} bytes" in str(
            info.value
        )
        assert snapshot(out) == before
        assert not [p for p in out.rglob("*") if is_temporary_name(p.name)]
        train(ckpt, objects, 2)
        assert (checkpoints_dir(out) / "iter_000000006" / ".posttrain-manifest.json").is_file()


class TestSimCapacity:
    def test_capacity_exhausted_through_checkpointer(self, tmp_path: Path) -> None:
        """A SimFilesystem whose capacity runs out mid-save raises DiskFullError with the
        simulated free bytes; raising the capacity lets the next save commit."""
        fs = SimFilesystem()
        root = "/sim/out"
        ckpt, objects = open_run(Path(root), fs)
        train(ckpt, objects, 2)
        before = fs.tree("/sim")
        assert fs.free_bytes("/") is None  # no capacity: unknown
        fs.capacity_bytes = sum(len(v) for v in before.values()) + 10_000
        assert fs.free_bytes("/") == 10_000
        with pytest.raises(DiskFullError) as info:
            train(ckpt, objects, 2)
        assert_message(info.value, "model.pt")
        assert info.value.bytes_free == 10_000
        assert info.value.bytes_needed >= 128 * 128 * 4
        assert fs.tree("/sim") == before
        fs.capacity_bytes = None
        train(ckpt, objects, 2)
        assert any(k.endswith("iter_000000006/.posttrain-manifest.json") for k in fs.tree("/sim"))
