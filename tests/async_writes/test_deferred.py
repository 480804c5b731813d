"""Deferred publications of LocalStore (``open_atomic(..., defer_sync=True)``,
``make_dirs(..., defer_sync=True)``): what is durable when, the order the settle imposes
before the next publication, and failures surfacing there with nothing published."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from statecraft.engine import IoGate
from statecraft.errors import StoreError
from statecraft.storage import CrashKind, LocalStore, LossChoice, OsFilesystem, SimWorld
from statecraft.storage.deferred import runs_concurrently
from statecraft.storage.digest import file_digest
from statecraft.storage.local import is_temporary_name

ALL_LOST = LossChoice("all_lost", frozenset())


def deferred_write(store: LocalStore, path: str, data: bytes) -> None:
    with store.open_atomic(path, defer_sync=True) as writer:
        writer.write(data)


def after_power_loss(world: SimWorld) -> LocalStore:
    """The store a restarted process finds after a power loss that kept nothing unsynced."""
    return LocalStore("/ckpt", fs=world.after_crash(CrashKind.POWER_LOSS, ALL_LOST).fs)


class TestSimulated:
    def test_a_deferred_name_is_durable_only_after_the_settle(self) -> None:
        """Before the settle a power loss takes the deferred file's name; after it, the
        file survives with its bytes."""
        world = SimWorld()
        store = world.local_store("/ckpt")
        store.make_dirs("d")
        deferred_write(store, "d/f", b"bytes")
        assert store.read_bytes("d/f") == b"bytes"  # visible to this process at once
        assert after_power_loss(world).stat("d/f") is None
        store.settle()
        assert after_power_loss(world).read_bytes("d/f") == b"bytes"

    def test_deferred_directories_are_durable_after_the_settle(self) -> None:
        """``make_dirs(defer_sync=True)`` leaves the new directory to the next settle."""
        world = SimWorld()
        store = world.local_store("/ckpt")
        store.make_dirs("a/b", defer_sync=True)
        assert after_power_loss(world).stat("a") is None
        store.settle()
        assert after_power_loss(world).stat("a/b") is not None

    def test_the_exclusive_create_settles_before_its_link(self) -> None:
        """Deferred files share one directory fsync, done (with the new directory's parent)
        before the manifest's link, while the manifest's temporary is fsynced."""
        world = SimWorld()
        store = world.local_store("/ckpt")
        world.rearm(gate := IoGate())
        store.make_dirs("it", defer_sync=True)
        deferred_write(store, "it/a", b"a")
        deferred_write(store, "it/b", b"b")
        store.create_exclusive("it/m", b"manifest")
        ops = [(r.op, r.target.split(" ")[0]) for r in gate.log]
        assert [op for op, _ in ops] == [
            "mkdir",
            *["open_write", "write", "fsync", "rename"] * 2,
            "open_write",
            "write",
            "fsync_dir",
            "fsync_dir",
            "fsync",
            "link",
            "unlink",
            "fsync_dir",
        ]
        assert [t for op, t in ops if op == "fsync_dir"] == ["/ckpt", "/ckpt/it", "/ckpt/it"]
        survivor = after_power_loss(world)
        assert [survivor.read_bytes(f"it/{n}") for n in "abm"] == [b"a", b"b", b"manifest"]

    def test_a_gated_filesystem_commits_in_order(self) -> None:
        """Where a gate counts operations, commits never run on helper threads."""
        assert runs_concurrently(OsFilesystem())
        assert not runs_concurrently(OsFilesystem(gate=IoGate()))
        assert not runs_concurrently(SimWorld().fs)


class FailingFsync(OsFilesystem):
    """The real OS, whose fsync of any file whose name contains ``bad`` fails with EIO (as a
    dying disk's would), on whichever thread runs it."""

    def __init__(self) -> None:
        super().__init__()
        self.bad: set[int] = set()

    def open_write(self, path: str, *, exclusive: bool) -> int:
        handle = super().open_write(path, exclusive=exclusive)
        if "bad" in os.path.basename(path):
            self.bad.add(handle)
        return handle

    def close(self, handle: int) -> None:
        self.bad.discard(handle)  # the descriptor number is reused by the next open
        super().close(handle)

    def fsync(self, handle: int) -> None:
        if handle in self.bad:
            raise OSError(errno.EIO, "injected EIO")
        super().fsync(handle)


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


class TestRealFilesystem:
    def test_concurrent_commits_publish_every_file(self, tmp_path: Path) -> None:
        """Deferred files committed on helper threads are all there after the settle, each
        matching the record (size and digest) its commit returned."""
        store = LocalStore(tmp_path)
        store.make_dirs("d", defer_sync=True)
        payloads = {f"d/f{i}": os.urandom((i + 1) << 20) for i in range(3)}
        records = {}
        for path, data in payloads.items():
            with store.open_atomic(path, defer_sync=True) as writer:
                writer.write(data)
            records[path] = writer.record
        store.create_exclusive("d/manifest", b"{}")
        for path, data in payloads.items():
            assert (tmp_path / path).read_bytes() == data
            assert records[path].size == len(data)
            assert records[path].digest == file_digest(store, path)
        assert not any(is_temporary_name(p.name) for p in tmp_path.rglob("*"))

    def test_a_failed_deferred_fsync_refuses_the_next_commit(self, tmp_path: Path) -> None:
        """A deferred file whose fsync fails makes the next exclusive create raise that
        failure before it links: the manifest is not published, no temporary remains, and
        what was committed before is byte-identical."""
        LocalStore(tmp_path).make_dirs("d")
        LocalStore(tmp_path).write_atomic("d/old", b"committed")
        before = snapshot(tmp_path)
        store = LocalStore(tmp_path, fs=FailingFsync())
        deferred_write(store, "d/good", b"good")
        deferred_write(store, "d/bad", b"bad bytes")  # returns: the fsync runs behind it
        with pytest.raises(StoreError) as info:
            store.create_exclusive("d/manifest", b"{}")
        message = str(info.value)
        assert message.startswith(f"local:{tmp_path}: writing 'd/bad' failed (")
        assert "nothing was published and the previous content is untouched" in message
        assert not (tmp_path / "d" / "manifest").exists()
        assert not (tmp_path / "d" / "bad").exists()
        assert not any(is_temporary_name(p.name) for p in tmp_path.rglob("*"))
        assert {k: v for k, v in snapshot(tmp_path).items() if k in before} == before
        store.create_exclusive("d/manifest", b"{}")  # the failure is reported once

    def test_a_removal_drops_the_failure_of_what_it_removes(self, tmp_path: Path) -> None:
        """Removing the directory of a failed deferred file (a save's discard) waits for the
        commits, does not raise their failure, and removes the tree."""
        LocalStore(tmp_path).write_atomic("keep", b"committed")
        store = LocalStore(tmp_path, fs=FailingFsync())
        store.make_dirs("it")
        deferred_write(store, "it/bad", b"bad bytes")
        store.delete_tree("it")
        assert sorted(os.listdir(tmp_path)) == ["keep"]
        assert (tmp_path / "keep").read_bytes() == b"committed"
