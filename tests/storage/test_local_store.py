"""Tests of statecraft.storage.local: LocalStore on the real filesystem (``tmp_path``).

I/O order is recorded through an IoGate on OsFilesystem, so the durability discipline of
DESIGN.md §4 (temp name, fsync, rename, fsync of the directory) is pinned on the real OS.
"""

from __future__ import annotations

import errno
import itertools
import os
from pathlib import Path

import pytest
import xxhash

from statecraft.engine import FaultKind, IoGate, SimulatedCrash
from statecraft.errors import StoreConflictError, StoreError
from statecraft.storage import FileRecord, LocalStore, OsFilesystem, is_temporary_name
from statecraft.storage.base import check_relative_path
from statecraft.storage.digest import Digest

MiB = 1 << 20


def xxh3(data: bytes) -> Digest:
    """The xxh3_128 digest of ``data``, computed here with ``xxhash`` itself."""
    return Digest("xxh3_128", xxhash.xxh3_128_hexdigest(data))


def gated(root: Path, **gate_args: object) -> tuple[LocalStore, IoGate]:
    """A LocalStore over the real OS whose operations pass a fresh gate."""
    gate = IoGate(**gate_args)  # type: ignore[arg-type]
    return LocalStore(root, fs=OsFilesystem(gate=gate)), gate


def entries(root: Path) -> list[str]:
    """Every name directly inside ``root``, temporaries included."""
    return sorted(os.listdir(root))


def temporaries(root: Path) -> list[str]:
    """Leftover temporary names anywhere under ``root``."""
    return [p.name for p in root.rglob("*") if is_temporary_name(p.name)]


def failing_write(store: LocalStore, path: str, data: bytes, error: Exception) -> None:
    """Write ``data`` inside ``open_atomic`` and raise ``error`` before leaving the block."""
    with store.open_atomic(path) as writer:
        writer.write(data)
        raise error


class TestWriteAtomic:
    """LocalStore.write_atomic: replace a file atomically and durably."""

    def test_writes_and_replaces(self, tmp_path: Path) -> None:
        """A second write replaces the first; only the final name remains in the directory."""
        store = LocalStore(tmp_path)
        store.write_atomic("f", b"first version")
        store.write_atomic("f", b"second")
        assert (tmp_path / "f").read_bytes() == b"second"
        assert entries(tmp_path) == ["f"]

    def test_record_matches_the_file(self, tmp_path: Path) -> None:
        """The FileRecord names the path, the size and the digest of the bytes on disk."""
        store = LocalStore(tmp_path)
        record = store.write_atomic("f", b"abc")
        data = (tmp_path / "f").read_bytes()
        assert record == FileRecord("f", len(data), xxh3(data))

    def test_multi_mib_write_digest(self, tmp_path: Path) -> None:
        """A single multi-MiB write (the parallel digest path) records the true size and
        digest."""
        data = os.urandom(5 * MiB + 123)
        record = LocalStore(tmp_path).write_atomic("big", data)
        on_disk = (tmp_path / "big").read_bytes()
        assert on_disk == data
        assert record.size == len(data)
        assert record.digest == xxh3(on_disk)

    def test_empty_write(self, tmp_path: Path) -> None:
        """Writing no bytes publishes an empty file with the digest of b''."""
        record = LocalStore(tmp_path).write_atomic("empty", b"")
        assert (tmp_path / "empty").read_bytes() == b""
        assert record == FileRecord("empty", 0, xxh3(b""))

    def test_io_order(self, tmp_path: Path) -> None:
        """write_atomic performs exactly: open temp, write, fsync, rename over the name, fsync
        the directory."""
        store, gate = gated(tmp_path)
        store.write_atomic("f", b"payload")
        assert [r.op for r in gate.log] == ["open_write", "write", "fsync", "rename", "fsync_dir"]
        temp = gate.log[0].target
        assert os.path.dirname(temp) == str(tmp_path)
        assert is_temporary_name(os.path.basename(temp))
        assert gate.log[3].target == str(tmp_path / "f")
        assert gate.log[4].target == str(tmp_path)

    def test_io_order_in_subdirectory(self, tmp_path: Path) -> None:
        """The temp name lives in the target's own directory, which is the one fsynced."""
        LocalStore(tmp_path).make_dirs("a/b")
        store, gate = gated(tmp_path)
        store.write_atomic("a/b/f", b"payload")
        assert os.path.dirname(gate.log[0].target) == str(tmp_path / "a" / "b")
        assert gate.log[-1].target == str(tmp_path / "a" / "b")

    def test_fsync_error_raises_store_error_and_publishes_nothing(self, tmp_path: Path) -> None:
        """An injected fsync EIO raises StoreError, leaves the old bytes and no temp file, and
        is not retried."""
        LocalStore(tmp_path).write_atomic("f", b"old")
        store, gate = gated(tmp_path, faults={2: FaultKind.IO_ERROR})
        with pytest.raises(StoreError) as info:
            store.write_atomic("f", b"new")
        message = str(info.value)
        assert message.startswith(f"local:{tmp_path}: writing 'f' failed (")
        assert "nothing was published and the previous content is untouched" in message
        assert isinstance(info.value.__cause__, OSError)
        assert info.value.__cause__.errno == errno.EIO
        assert (tmp_path / "f").read_bytes() == b"old"
        assert entries(tmp_path) == ["f"]
        ops = [r.op for r in gate.log]
        assert ops == ["open_write", "write", "fsync", "unlink"]  # no retry, no rename

    def test_no_space_on_small_write_is_a_store_error(self, tmp_path: Path) -> None:
        """ENOSPC on a buffered (small) write raises StoreError and publishes nothing."""
        store, _ = gated(tmp_path, faults={1: FaultKind.NO_SPACE})
        with pytest.raises(StoreError, match="nothing was published") as info:
            store.write_atomic("f", b"small")
        assert info.value.__cause__.errno == errno.ENOSPC  # type: ignore[union-attr]
        assert entries(tmp_path) == []

    def test_no_space_on_large_write_is_a_store_error(self, tmp_path: Path) -> None:
        """ENOSPC on a multi-MiB write raises StoreError like a small write, nothing published."""
        store, _ = gated(tmp_path, faults={1: FaultKind.NO_SPACE})
        with pytest.raises(StoreError, match="nothing was published"):
            store.write_atomic("f", bytes(2 * MiB))

    def test_leftover_temp_of_crashed_writer_does_not_block(self, tmp_path: Path) -> None:
        """A writer killed mid-write leaves its temp file; a new store (same pid, same first
        temp name) still writes, and the leftover is untouched."""
        crashing, _ = gated(tmp_path, crash_at=2)
        with pytest.raises(SimulatedCrash):
            crashing.write_atomic("f", b"half")
        (leftover,) = temporaries(tmp_path)
        store = LocalStore(tmp_path)
        store.write_atomic("f", b"whole")
        assert (tmp_path / "f").read_bytes() == b"whole"
        assert temporaries(tmp_path) == [leftover]
        assert (tmp_path / leftover).read_bytes() == b"half"


class TestOpenAtomic:
    """LocalStore.open_atomic: a writer that publishes on a clean exit only."""

    def test_many_small_writes_are_buffered(self, tmp_path: Path) -> None:
        """Thousands of small writes reach the OS in a few large chunks, and the record still
        matches the file."""
        store, gate = gated(tmp_path)
        chunk = bytes(range(256)) * 4
        with store.open_atomic("f") as writer:
            for _ in range(6000):  # ~5.9 MiB in 1 KiB pieces
                writer.write(chunk)
        data = (tmp_path / "f").read_bytes()
        assert data == chunk * 6000
        assert writer.record == FileRecord("f", len(data), xxh3(data))
        # one write call per full 256 KiB buffer, plus the rest
        assert [r.op for r in gate.log].count("write") == -(-len(data) // (256 << 10))

    def test_mixed_chunk_sizes_keep_order_and_digest(self, tmp_path: Path) -> None:
        """Small and multi-MiB chunks, in any order, are written and hashed in order."""
        pieces = [b"head", os.urandom(2 * MiB), b"mid" * 1000, os.urandom(MiB), os.urandom(300)]
        pieces.insert(3, os.urandom(3 * MiB + 7))
        store = LocalStore(tmp_path)
        with store.open_atomic("f") as writer:
            for piece in pieces:
                assert writer.write(memoryview(piece)) == len(piece)
        expected = b"".join(pieces)
        assert (tmp_path / "f").read_bytes() == expected
        assert writer.record is not None
        assert writer.record.size == len(expected)
        assert writer.record.digest == xxh3(expected)

    def test_exception_inside_block_publishes_nothing(self, tmp_path: Path) -> None:
        """An exception in the with block aborts: the old bytes stay, no temp file remains."""
        store = LocalStore(tmp_path)
        store.write_atomic("f", b"old")
        with pytest.raises(RuntimeError, match="serializer failed"):
            failing_write(store, "f", b"partial new bytes", RuntimeError("serializer failed"))
        assert (tmp_path / "f").read_bytes() == b"old"
        assert entries(tmp_path) == ["f"]

    def test_exception_on_new_name_leaves_no_trace(self, tmp_path: Path) -> None:
        """An aborted write of a new name leaves the directory empty."""
        store = LocalStore(tmp_path)
        with pytest.raises(ValueError, match="boom"):
            failing_write(store, "new", os.urandom(2 * MiB), ValueError("boom"))
        assert entries(tmp_path) == []

    def test_write_after_commit_is_refused(self, tmp_path: Path) -> None:
        """Writing to or committing a finished writer raises StoreError naming the path."""
        store = LocalStore(tmp_path)
        with store.open_atomic("f") as writer:
            writer.write(b"x")
        with pytest.raises(StoreError, match="f: write after commit or abort"):
            writer.write(b"y")
        with pytest.raises(StoreError, match="f: commit after commit or abort"):
            writer.commit()


class TestCreateExclusive:
    """LocalStore.create_exclusive: publish only if the name is free."""

    def test_creates_a_new_name(self, tmp_path: Path) -> None:
        """A free name is published with its record; no temp file remains."""
        record = LocalStore(tmp_path).create_exclusive("marker", b"claimed")
        assert (tmp_path / "marker").read_bytes() == b"claimed"
        assert record == FileRecord("marker", 7, xxh3(b"claimed"))
        assert entries(tmp_path) == ["marker"]

    def test_refuses_an_existing_name(self, tmp_path: Path) -> None:
        """An existing name raises StoreConflictError; its bytes are unchanged and no temp
        file remains."""
        store = LocalStore(tmp_path)
        store.write_atomic("marker", b"first owner")
        with pytest.raises(StoreConflictError) as info:
            store.create_exclusive("marker", b"second owner")
        assert str(info.value) == (
            f"local:{tmp_path}: 'marker' already exists; an exclusive create never overwrites. "
            "Inspect the existing file before deciding what to do"
        )
        assert isinstance(info.value, FileExistsError)
        assert (tmp_path / "marker").read_bytes() == b"first owner"
        assert entries(tmp_path) == ["marker"]

    def test_io_order(self, tmp_path: Path) -> None:
        """create_exclusive writes and fsyncs a temp, links it to the name, unlinks the temp,
        then fsyncs the directory."""
        store, gate = gated(tmp_path)
        store.create_exclusive("marker", b"claimed")
        assert [r.op for r in gate.log] == [
            "open_write",
            "write",
            "fsync",
            "link",
            "unlink",
            "fsync_dir",
        ]
        assert gate.log[3].target == str(tmp_path / "marker")
        assert gate.log[4].target == gate.log[0].target
        assert gate.log[5].target == str(tmp_path)


class TestDirectories:
    """make_dirs, delete, delete_tree and sweep_temporaries."""

    def test_make_dirs_creates_each_level_durably(self, tmp_path: Path) -> None:
        """Each missing level is created then its parent fsynced; existing levels are skipped."""
        (tmp_path / "a").mkdir()
        store, gate = gated(tmp_path)
        store.make_dirs("a/b/c")
        assert (tmp_path / "a" / "b" / "c").is_dir()
        assert [(r.op, r.target) for r in gate.log] == [
            ("mkdir", str(tmp_path / "a" / "b")),
            ("fsync_dir", str(tmp_path / "a")),
            ("mkdir", str(tmp_path / "a" / "b" / "c")),
            ("fsync_dir", str(tmp_path / "a" / "b")),
        ]
        store.make_dirs("a/b/c")  # idempotent
        assert len(gate.log) == 4

    def test_make_dirs_refuses_a_file_in_the_way(self, tmp_path: Path) -> None:
        """A file where a directory should be raises StoreError naming it."""
        store = LocalStore(tmp_path)
        store.write_atomic("a", b"file")
        with pytest.raises(StoreError, match="'a' exists and is not a directory"):
            store.make_dirs("a/b")

    def test_root_is_created_durably(self, tmp_path: Path) -> None:
        """A missing root is created level by level, each parent fsynced."""
        gate = IoGate()
        LocalStore(tmp_path / "x" / "y", fs=OsFilesystem(gate=gate))
        assert (tmp_path / "x" / "y").is_dir()
        assert [(r.op, r.target) for r in gate.log] == [
            ("mkdir", str(tmp_path / "x")),
            ("fsync_dir", str(tmp_path)),
            ("mkdir", str(tmp_path / "x" / "y")),
            ("fsync_dir", str(tmp_path / "x")),
        ]

    def test_root_must_be_absolute(self) -> None:
        """A relative root is refused with a message saying what is expected."""
        with pytest.raises(StoreError, match="LocalStore root must be an absolute path, got 'rel'"):
            LocalStore("rel")

    def test_delete_tree_removes_files_before_directories(self, tmp_path: Path) -> None:
        """delete_tree unlinks every file, then removes each emptied directory, fsyncing as it
        goes; the rest of the store is untouched."""
        store = LocalStore(tmp_path)
        store.make_dirs("ckpt/sub")
        store.write_atomic("ckpt/a", b"1")
        store.write_atomic("ckpt/sub/b", b"2")
        store.write_atomic("keep", b"3")
        gated_store, gate = gated(tmp_path)
        gated_store.delete_tree("ckpt")
        assert entries(tmp_path) == ["keep"]
        assert [r.op for r in gate.log] == [
            "unlink",  # ckpt/a
            "unlink",  # ckpt/sub/b
            "fsync_dir",
            "rmdir",
            "fsync_dir",
            "fsync_dir",
            "rmdir",
            "fsync_dir",
        ]
        assert gate.log[3].target == str(tmp_path / "ckpt" / "sub")
        assert gate.log[6].target == str(tmp_path / "ckpt")
        assert gate.log[7].target == str(tmp_path)

    def test_delete_tree_of_missing_path_is_a_no_op(self, tmp_path: Path) -> None:
        """Deleting a tree that does not exist does nothing."""
        store, gate = gated(tmp_path)
        store.delete_tree("absent")
        assert gate.log == []

    def test_delete_file_is_durable(self, tmp_path: Path) -> None:
        """delete unlinks the file and fsyncs its directory; a missing file is fine."""
        LocalStore(tmp_path).write_atomic("f", b"x")
        store, gate = gated(tmp_path)
        store.delete("f")
        store.delete("f")
        assert entries(tmp_path) == []
        assert [r.op for r in gate.log] == ["unlink", "fsync_dir", "unlink"]

    def test_sweep_temporaries(self, tmp_path: Path) -> None:
        """sweep_temporaries removes crashed writers' temp files only, and names them."""
        store = LocalStore(tmp_path)
        store.make_dirs("d")
        store.write_atomic("d/keep", b"k")
        crashing, _ = gated(tmp_path, crash_at=3)
        with pytest.raises(SimulatedCrash):
            crashing.write_atomic("d/f", b"half")
        (tmp_path / "d" / ".hidden").write_bytes(b"not ours")
        leftovers = temporaries(tmp_path)
        assert len(leftovers) == 1
        assert store.sweep_temporaries("d") == leftovers
        assert entries(tmp_path / "d") == [".hidden", "keep"]
        assert store.sweep_temporaries("d") == []

    def test_listing_and_stat(self, tmp_path: Path) -> None:
        """list is sorted and [] for a missing directory; stat says size and kind."""
        store = LocalStore(tmp_path)
        store.make_dirs("d")
        store.write_atomic("d/b", b"bb")
        store.write_atomic("d/a", b"a")
        assert store.list("d") == ["a", "b"]
        assert store.list("missing") == []
        assert store.list("d/a") == []
        assert store.stat("d/b").size == 2  # type: ignore[union-attr]
        assert store.stat("d").is_dir  # type: ignore[union-attr]
        assert store.stat("nope") is None
        assert store.read_bytes("d/b") == b"bb"
        with store.open_read("d/a") as f:
            assert f.read() == b"a"
        assert store.local_path("d/a") == str(tmp_path / "d" / "a")
        assert store.describe() == f"local:{tmp_path}"


BAD_PATHS = ["/etc/passwd", "..", "../x", "a/../b", "./a", "a/.", "a//b", "a/"]


class TestPathValidation:
    """Store paths are clean relative names; anything else is refused before any I/O."""

    @pytest.mark.parametrize("path", ["", *BAD_PATHS])
    def test_check_relative_path_message(self, path: str) -> None:
        """check_relative_path names the path and gives an example of a good one."""
        with pytest.raises(StoreError) as info:
            check_relative_path(path)
        assert str(info.value) == (
            f"store path {path!r} must be a relative name without '.', '..' or empty segments "
            "(e.g. 'iter_000000100/model.pt')"
        )

    @pytest.mark.parametrize("path", BAD_PATHS)
    @pytest.mark.parametrize("operation", ["write_atomic", "create_exclusive"])
    def test_store_writes_refuse_bad_paths(self, tmp_path: Path, path: str, operation: str) -> None:
        """Writing through a bad path raises StoreError and performs no I/O."""
        store, gate = gated(tmp_path / "root")
        gate.log.clear()
        with pytest.raises(StoreError, match="must be a relative name"):
            getattr(store, operation)(path, b"x")
        assert gate.log == []

    @pytest.mark.parametrize("operation", ["read_bytes", "stat", "delete", "make_dirs"])
    def test_other_operations_refuse_bad_paths(self, tmp_path: Path, operation: str) -> None:
        """Reads, stat, delete and make_dirs refuse ``..`` as well."""
        store = LocalStore(tmp_path)
        with pytest.raises(StoreError, match="must be a relative name"):
            getattr(store, operation)("../escape")

    @pytest.mark.parametrize("operation", ["write_atomic", "create_exclusive"])
    def test_empty_path_is_refused(self, tmp_path: Path, operation: str) -> None:
        """Writing to the empty path raises the validation error and touches nothing."""
        root = tmp_path / "root"
        store = LocalStore(root)
        with pytest.raises(StoreError, match="must be a relative name"):
            getattr(store, operation)("", b"x")
        assert entries(tmp_path) == ["root"]


class TestIsTemporaryName:
    """is_temporary_name: recognises LocalStore's temp names only."""

    @pytest.mark.parametrize(
        ("name", "expected"),
        [
            (".model.pt.tmp-123-4", True),
            (".a.tmp-1-1", True),
            ("model.pt.tmp-123-4", False),
            (".model.pt", False),
            (".model.pt.tmp-x-4", False),
            (".tmp-1-1", False),
        ],
    )
    def test_recognises_temp_names(self, name: str, expected: bool) -> None:
        """Only ``.<name>.tmp-<pid>-<n>`` counts as a temporary name."""
        assert is_temporary_name(name) is expected


class TestWriteback:
    def test_large_writes_start_device_writeback_in_order(self, tmp_path: Path) -> None:
        """A multi-MiB write schedules writeback of contiguous ranges while writing, so the
        commit's fsync does not start the whole flush at the end; the bytes are unchanged."""
        calls: list[tuple[int, int]] = []

        class Recording(OsFilesystem):
            def start_writeback(self, handle: int, offset: int, length: int) -> None:
                calls.append((offset, length))
                super().start_writeback(handle, offset, length)

        store = LocalStore(tmp_path, fs=Recording())
        data = os.urandom(3 << 20)
        with store.open_atomic("big") as writer:
            for _ in range(4):
                writer.write(data)
        assert calls
        assert calls[0][0] == 0
        assert all(a[0] + a[1] == b[0] for a, b in itertools.pairwise(calls))
        assert (tmp_path / "big").read_bytes() == data * 4


class TestDeleteTreeNeverFollowsLinks:
    def _outside(self, tmp_path: Path) -> Path:
        outside = tmp_path / "precious"
        outside.mkdir()
        (outside / "data.bin").write_bytes(b"keep me")
        return outside

    def test_a_linked_directory_inside_is_unlinked_not_emptied(self, tmp_path: Path) -> None:
        """delete_tree of a directory holding a symlink to another directory removes the link
        and leaves the linked directory's files alone."""
        outside = self._outside(tmp_path)
        store = LocalStore(tmp_path / "root")
        store.make_dirs("iter_000000002")
        store.write_atomic("iter_000000002/model.pt", b"x")
        os.symlink(outside, tmp_path / "root" / "iter_000000002" / "sub")
        store.delete_tree("iter_000000002")
        assert store.stat("iter_000000002") is None
        assert (outside / "data.bin").read_bytes() == b"keep me"

    def test_a_linked_directory_itself_is_unlinked(self, tmp_path: Path) -> None:
        """delete_tree of a path that is a symlink to a directory removes only the link."""
        outside = self._outside(tmp_path)
        store = LocalStore(tmp_path / "root")
        os.symlink(outside, tmp_path / "root" / "iter_000000004")
        assert store.stat("iter_000000004").is_dir  # an output root may be a link
        store.delete_tree("iter_000000004")
        assert not (tmp_path / "root" / "iter_000000004").is_symlink()
        assert (outside / "data.bin").read_bytes() == b"keep me"
