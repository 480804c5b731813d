"""Every implementation satisfies its protocol, member by member (Store, Filesystem,
AtomicWriter), and the structural check names what a broken implementation lacks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statecraft.cli.inspect import ReadOnlyFilesystem
from statecraft.storage import SimWorld
from statecraft.storage.base import AtomicWriter, Store, missing_members, protocol_members
from statecraft.storage.filesystem import Filesystem, OsFilesystem
from statecraft.storage.local import LocalStore
from statecraft.storage.objects import ObjectStore, SimBucket
from statecraft.storage.simfs import SimFilesystem

FILESYSTEM_MEMBERS = (
    "close",
    "free_bytes",
    "fsync",
    "fsync_dir",
    "link",
    "listdir",
    "mkdir",
    "open_read",
    "open_write",
    "read",
    "real_path",
    "rename",
    "rmdir",
    "start_writeback",
    "stat",
    "sync_path",
    "unlink",
    "write",
)
STORE_MEMBERS = (
    "create_exclusive",
    "delete",
    "delete_tree",
    "describe",
    "list",
    "local_path",
    "make_dirs",
    "make_durable",
    "open_atomic",
    "open_read",
    "read_bytes",
    "read_range",
    "stat",
    "write_atomic",
)


def _filesystems() -> list[Any]:
    return [OsFilesystem(), SimFilesystem(), ReadOnlyFilesystem()]


def _stores(tmp_path: Path) -> list[Any]:
    return [
        LocalStore(str(tmp_path / "local")),
        SimWorld().local_store("/ckpt"),
        ObjectStore(SimBucket(), prefix="ckpt"),
    ]


class TestProtocolMembers:
    def test_filesystem_members_are_listed(self) -> None:
        """The structural check sees every member the Filesystem protocol declares."""
        assert protocol_members(Filesystem) == FILESYSTEM_MEMBERS

    def test_store_members_are_listed(self) -> None:
        """The structural check sees every member the Store protocol declares."""
        assert protocol_members(Store) == STORE_MEMBERS

    def test_atomic_writer_members_are_listed(self) -> None:
        """Attributes and the context-manager methods of AtomicWriter are members too."""
        assert set(protocol_members(AtomicWriter)) >= {
            "__enter__",
            "__exit__",
            "abort",
            "commit",
            "flush",
            "path",
            "record",
            "write",
        }


class TestImplementations:
    @pytest.mark.parametrize("fs", _filesystems(), ids=repr)
    def test_every_filesystem_satisfies_the_protocol(self, fs: Any) -> None:
        """OsFilesystem, SimFilesystem and inspect's read-only one lack no member."""
        assert missing_members(fs, Filesystem) == []
        assert isinstance(fs, Filesystem)

    def test_every_store_satisfies_the_protocol(self, tmp_path: Path) -> None:
        """LocalStore (real and simulated) and ObjectStore lack no member."""
        for store in _stores(tmp_path):
            assert missing_members(store, Store) == [], store
            assert isinstance(store, Store)

    def test_every_atomic_writer_satisfies_the_protocol(self, tmp_path: Path) -> None:
        """The writers the stores hand out satisfy AtomicWriter."""
        for store in _stores(tmp_path):
            writer = store.open_atomic("probe.bin")
            try:
                assert missing_members(writer, AtomicWriter) == [], store
            finally:
                writer.abort()


class TestBrokenImplementation:
    def test_a_missing_member_is_named(self) -> None:
        """A filesystem without sync_path and start_writeback (the read-only adapter's old
        defect) is reported with both names."""

        class Incomplete(ReadOnlyFilesystem):
            sync_path = None  # type: ignore[assignment]

        class Lacking:
            def __getattr__(self, name: str) -> Any:
                if name in ("sync_path", "start_writeback"):
                    raise AttributeError(name)
                return getattr(OsFilesystem(), name)

        assert missing_members(Incomplete(), Filesystem) == ["sync_path"]
        assert missing_members(Lacking(), Filesystem) == ["start_writeback", "sync_path"]
        assert not isinstance(Lacking(), Filesystem)
