"""Tests of statecraft.storage.simfs and statecraft.storage.sim: the durability model of
DESIGN.md §4, one rule per test, then a hypothesis test over random operation sequences.

Setup helpers make a starting state durable with ``sync_all`` so that each test changes exactly
one thing and checks what a crash does to it.
"""

from __future__ import annotations

import errno

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statecraft.engine import FaultKind, IoGate
from statecraft.storage import CrashKind, LossChoice, PendingOp, SimFilesystem, SimWorld

ALL_LOST = LossChoice("all_lost", frozenset())


def all_kept(fs: SimFilesystem) -> LossChoice:
    """The loss choice that keeps every pending operation."""
    return LossChoice("all_kept", frozenset(p.op_id for p in fs.pending_ops()))


def write_file(fs: SimFilesystem, path: str, data: bytes, *, fsync: bool = True) -> None:
    """Create (or truncate) ``path`` and write ``data``, fsyncing it when asked."""
    handle = fs.open_write(path, exclusive=False)
    fs.write(handle, data)
    if fsync:
        fs.fsync(handle)
    fs.close(handle)


def durable_file(path: str, data: bytes) -> SimFilesystem:
    """A filesystem on which ``path`` holds ``data`` durably (entry and bytes)."""
    fs = SimFilesystem()
    fs.makedirs(path.rsplit("/", 1)[0] or "/")
    write_file(fs, path, data)
    fs.sync_all()
    return fs


def last_write(fs: SimFilesystem) -> int:
    """The id of the newest pending write."""
    return [p.op_id for p in fs.pending_ops() if p.kind == "write"][-1]


def choice_named(fs: SimFilesystem, name: str) -> LossChoice:
    """The systematic loss choice called ``name``."""
    (choice,) = [c for c in fs.loss_choices() if c.name == name]
    return choice


class TestProcessKill:
    """SimFilesystem.after_process_kill: everything the OS accepted survives."""

    def test_unsynced_data_and_entries_survive(self) -> None:
        """Unsynced writes, creates and renames are all there after a process kill."""
        fs = durable_file("/d/old", b"old")
        write_file(fs, "/d/new", b"unsynced bytes", fsync=False)
        fs.rename("/d/old", "/d/moved")
        after = fs.after_process_kill()
        assert after.tree("/d") == {"moved": b"old", "new": b"unsynced bytes"}
        assert after.pending_ops() != []  # still not durable: a later power loss may lose them

    def test_unsynced_data_stays_volatile_after_process_kill(self) -> None:
        """A process kill does not fsync anything: a power loss after it still loses what the
        dead process left unsynced."""
        fs = durable_file("/d/f", b"")
        write_file(fs, "/d/f", b"never fsynced", fsync=False)
        restarted = fs.after_process_kill()
        assert restarted.read("/d/f") == b"never fsynced"
        assert restarted.after_power_loss(ALL_LOST).read("/d/f") == b""

    def test_sim_world_process_kill(self) -> None:
        """SimWorld.after_crash(PROCESS_KILL) keeps the unsynced disk state and the bucket."""
        world = SimWorld()
        world.fs.makedirs("/d")
        write_file(world.fs, "/d/f", b"data", fsync=False)
        world.bucket.put("k", b"v")
        after = world.after_crash(CrashKind.PROCESS_KILL)
        assert after.fs.tree("/") == {"d/f": b"data"}
        assert after.bucket.get("k") == b"v"


class TestPowerLossData:
    """after_power_loss, file data: durable only once fsynced after the write."""

    def test_unsynced_write_lost_with_all_lost(self) -> None:
        """Data written but not fsynced is gone after a power loss that loses every
        unsynced operation."""
        fs = durable_file("/d/f", b"")
        handle = fs.open_write("/d/f", exclusive=False)
        fs.write(handle, b"not yet durable")
        assert fs.read("/d/f") == b"not yet durable"  # the live process sees it
        assert fs.after_power_loss(ALL_LOST).read("/d/f") == b""

    def test_unsynced_write_kept_with_all_kept(self) -> None:
        """The same unsynced write may also survive (the all_kept choice)."""
        fs = durable_file("/d/f", b"")
        write_file(fs, "/d/f", b"maybe durable", fsync=False)
        assert fs.after_power_loss(all_kept(fs)).read("/d/f") == b"maybe durable"

    def test_fsynced_data_survives(self) -> None:
        """Data fsynced after it was written survives a power loss of everything unsynced."""
        fs = durable_file("/d/f", b"")
        write_file(fs, "/d/f", b"durable now", fsync=True)
        assert fs.pending_ops() == []
        assert fs.after_power_loss(ALL_LOST).read("/d/f") == b"durable now"

    def test_write_after_fsync_is_not_covered(self) -> None:
        """An fsync covers the writes before it only; a later write is lost with all_lost."""
        fs = durable_file("/d/f", b"")
        handle = fs.open_write("/d/f", exclusive=False)
        fs.write(handle, b"first")
        fs.fsync(handle)
        fs.write(handle, b"+second")
        assert fs.after_power_loss(ALL_LOST).read("/d/f") == b"first"
        assert fs.after_power_loss(all_kept(fs)).read("/d/f") == b"first+second"

    def test_unsynced_truncate_reverts(self) -> None:
        """Reopening a durable file with truncation is itself unsynced: all_lost gives the old
        bytes back."""
        fs = durable_file("/d/f", b"old content")
        handle = fs.open_write("/d/f", exclusive=False)
        assert fs.read("/d/f") == b""
        fs.close(handle)
        assert fs.after_power_loss(ALL_LOST).read("/d/f") == b"old content"
        assert fs.after_power_loss(all_kept(fs)).read("/d/f") == b""

    def test_power_loss_leaves_the_live_filesystem_alone(self) -> None:
        """Computing a crash state does not change the filesystem it is computed from."""
        fs = durable_file("/d/f", b"")
        write_file(fs, "/d/f", b"pending", fsync=False)
        before = fs.pending_ops()
        fs.after_power_loss(ALL_LOST)
        assert fs.pending_ops() == before
        assert fs.read("/d/f") == b"pending"
        assert fs.after_power_loss(all_kept(fs)).read("/d/f") == b"pending"

    def test_crash_state_starts_fully_durable(self) -> None:
        """The filesystem a reboot finds has no pending operations of its own."""
        fs = durable_file("/d/f", b"")
        write_file(fs, "/d/f", b"pending", fsync=False)
        after = fs.after_power_loss(all_kept(fs))
        assert after.pending_ops() == []
        assert after.after_power_loss(ALL_LOST).read("/d/f") == b"pending"


class TestPowerLossEntries:
    """after_power_loss, directory entries: durable only once the parent is fsynced."""

    def test_create_reverted_without_dir_fsync(self) -> None:
        """A new file whose data was fsynced but whose directory was not vanishes."""
        fs = durable_file("/d/other", b"x")
        write_file(fs, "/d/new", b"payload", fsync=True)
        assert fs.after_power_loss(ALL_LOST).tree("/d") == {"other": b"x"}

    def test_create_survives_with_dir_fsync(self) -> None:
        """The same file survives once its directory was fsynced after the create."""
        fs = durable_file("/d/other", b"x")
        write_file(fs, "/d/new", b"payload", fsync=True)
        fs.fsync_dir("/d")
        assert fs.after_power_loss(ALL_LOST).tree("/d") == {"new": b"payload", "other": b"x"}

    def test_dir_fsync_of_another_directory_does_not_cover(self) -> None:
        """Fsyncing a different directory leaves the create unsynced."""
        fs = durable_file("/d/other", b"x")
        fs.makedirs("/e")
        fs.sync_all()
        write_file(fs, "/d/new", b"payload", fsync=True)
        fs.fsync_dir("/e")
        assert "new" not in fs.after_power_loss(ALL_LOST).tree("/d")

    def test_rename_reverts_to_old_content(self) -> None:
        """A rename over a durable name, not followed by a directory fsync, reverts: the old
        content is back under the name and the source name is back too."""
        fs = durable_file("/d/cur", b"old")
        write_file(fs, "/d/tmp", b"new", fsync=True)
        fs.fsync_dir("/d")
        fs.rename("/d/tmp", "/d/cur")
        assert fs.tree("/d") == {"cur": b"new"}
        assert fs.after_power_loss(ALL_LOST).tree("/d") == {"cur": b"old", "tmp": b"new"}
        assert fs.after_power_loss(all_kept(fs)).tree("/d") == {"cur": b"new"}

    def test_rename_durable_after_dir_fsync(self) -> None:
        """The same rename survives once the directory was fsynced after it."""
        fs = durable_file("/d/cur", b"old")
        write_file(fs, "/d/tmp", b"new", fsync=True)
        fs.rename("/d/tmp", "/d/cur")
        fs.fsync_dir("/d")
        assert fs.after_power_loss(ALL_LOST).tree("/d") == {"cur": b"new"}

    def test_rename_is_atomic_in_every_choice(self) -> None:
        """Both halves of a rename are one operation: no choice shows both names or neither."""
        fs = durable_file("/d/a", b"a")
        fs.rename("/d/a", "/d/b")
        (rename_op,) = fs.pending_ops()
        assert rename_op.kind == "entry"
        for choice in fs.loss_choices():
            assert fs.after_power_loss(choice).tree("/d") in ({"a": b"a"}, {"b": b"a"})

    def test_unlink_reverts_without_dir_fsync(self) -> None:
        """An unlink not covered by a directory fsync may be undone by a power loss."""
        fs = durable_file("/d/f", b"still here")
        fs.unlink("/d/f")
        assert fs.tree("/d") == {}
        assert fs.after_power_loss(ALL_LOST).tree("/d") == {"f": b"still here"}
        assert fs.after_power_loss(all_kept(fs)).tree("/d") == {}

    def test_unlink_durable_after_dir_fsync(self) -> None:
        """An unlink followed by a directory fsync stays done."""
        fs = durable_file("/d/f", b"gone")
        fs.unlink("/d/f")
        fs.fsync_dir("/d")
        assert fs.after_power_loss(ALL_LOST).tree("/d") == {}

    def test_lost_mkdir_takes_its_subtree(self) -> None:
        """When a directory's creation is lost, everything made inside it is lost too, even
        fully synced files."""
        fs = durable_file("/root/keep", b"k")
        fs.mkdir("/root/sub")
        write_file(fs, "/root/sub/f", b"synced", fsync=True)
        fs.fsync_dir("/root/sub")
        after = fs.after_power_loss(ALL_LOST)
        assert after.tree("/root") == {"keep": b"k"}
        assert after.stat("/root/sub") is None

    def test_mkdir_durable_after_parent_fsync(self) -> None:
        """The same subtree survives once the parent of the new directory was fsynced."""
        fs = durable_file("/root/keep", b"k")
        fs.mkdir("/root/sub")
        fs.fsync_dir("/root")
        write_file(fs, "/root/sub/f", b"synced", fsync=True)
        fs.fsync_dir("/root/sub")
        assert fs.after_power_loss(ALL_LOST).tree("/root") == {"keep": b"k", "sub/f": b"synced"}


class TestLossChoices:
    """SimFilesystem.loss_choices / pending_ops: the systematic power-loss states."""

    def test_no_pending_ops_gives_one_choice(self) -> None:
        """With nothing unsynced the only choice is all_lost (which loses nothing)."""
        fs = durable_file("/d/f", b"x")
        assert fs.pending_ops() == []
        assert fs.loss_choices() == [ALL_LOST]

    def test_pending_ops_describe_each_operation(self) -> None:
        """pending_ops lists each unsynced operation, oldest first, with its kind."""
        fs = durable_file("/d/f", b"x")
        handle = fs.open_write("/d/g", exclusive=True)
        fs.write(handle, b"abc")
        ops = fs.pending_ops()
        assert [(p.kind, p.description) for p in ops] == [
            ("entry", "add entry 'g'"),
            ("write", f"write 3B @0 to inode {ops[1].description.rsplit(' ', 1)[1]}"),
        ]
        assert ops[0].op_id < ops[1].op_id
        assert all(isinstance(p, PendingOp) for p in ops)

    def test_names_of_the_systematic_choices(self) -> None:
        """Two unsynced ops give all_lost, all_kept, omit-one of each, and the last write torn
        as a prefix and as zeros."""
        fs = durable_file("/d/f", b"")
        handle = fs.open_write("/d/g", exclusive=True)
        fs.write(handle, b"abcdefgh")
        create, write = (p.op_id for p in fs.pending_ops())
        choices = {c.name: c for c in fs.loss_choices()}
        assert list(choices) == [
            "all_lost",
            "all_kept",
            f"omit#{create}",
            f"omit#{write}",
            f"torn_prefix#{write}",
            f"torn_zeros#{write}",
        ]
        assert choices[f"omit#{create}"].kept == frozenset({write})
        assert choices[f"torn_zeros#{write}"].torn == (write, "zeros")

    def test_omit_one_loses_only_that_operation(self) -> None:
        """omit#i keeps every unsynced operation but i."""
        fs = durable_file("/d/a", b"")
        write_file(fs, "/d/b", b"", fsync=True)
        fs.sync_all()
        write_file(fs, "/d/a", b"A", fsync=False)
        write_file(fs, "/d/b", b"B", fsync=False)
        write_a = [p.op_id for p in fs.pending_ops() if p.kind == "write" and "1B" in p.description]
        after = fs.after_power_loss(choice_named(fs, f"omit#{write_a[0]}"))
        assert after.tree("/d") == {"a": b"", "b": b"B"}

    def test_torn_last_write_as_prefix(self) -> None:
        """torn_prefix keeps the first half of the last unsynced write."""
        fs = durable_file("/d/f", b"")
        write_file(fs, "/d/f", b"abcdefgh", fsync=False)
        write = last_write(fs)
        torn = fs.after_power_loss(choice_named(fs, f"torn_prefix#{write}"))
        assert torn.read("/d/f") == b"abcd"

    def test_torn_last_write_as_zeros(self) -> None:
        """torn_zeros keeps the last write's length but fills it with zeros."""
        fs = durable_file("/d/f", b"")
        write_file(fs, "/d/f", b"abcdefgh", fsync=False)
        write = last_write(fs)
        torn = fs.after_power_loss(choice_named(fs, f"torn_zeros#{write}"))
        assert torn.read("/d/f") == bytes(8)

    def test_torn_extension_keeps_the_synced_prefix(self) -> None:
        """An extended but unsynced file keeps its synced bytes and holds a prefix or zeros
        beyond them."""
        fs = durable_file("/d/f", b"")
        handle = fs.open_write("/d/f", exclusive=False)
        fs.write(handle, b"0123")
        fs.fsync(handle)
        fs.write(handle, b"4567")
        (write,) = [p.op_id for p in fs.pending_ops()]
        prefix = fs.after_power_loss(choice_named(fs, f"torn_prefix#{write}")).read("/d/f")
        zeros = fs.after_power_loss(choice_named(fs, f"torn_zeros#{write}")).read("/d/f")
        assert prefix == b"012345"
        assert zeros == b"0123" + bytes(4)


class TestFaults:
    """Injected faults and a full disk."""

    def test_fsync_failure_loses_data_for_good(self) -> None:
        """After an fsync that failed with EIO, the data is lost under power loss even though
        a later fsync succeeded (never retry-and-trust)."""
        gate = IoGate(faults={2: FaultKind.IO_ERROR})
        fs = durable_file("/d/f", b"")
        fs.gate = gate
        handle = fs.open_write("/d/f", exclusive=False)  # op 0
        fs.write(handle, b"precious")  # op 1
        with pytest.raises(OSError, match="fsync failed") as info:
            fs.fsync(handle)  # op 2: fails
        assert info.value.errno == errno.EIO
        fs.fsync(handle)  # op 3: succeeds, but too late
        assert fs.read("/d/f") == b"precious"  # the page cache still shows it
        assert fs.after_power_loss(ALL_LOST).read("/d/f") == b""
        assert fs.after_power_loss(all_kept(fs)).read("/d/f") == b""

    def test_fsync_no_space_loses_data_for_good(self) -> None:
        """Any fsync error, ENOSPC included, loses the unsynced data even if a retry succeeds."""
        fs = durable_file("/d/f", b"")
        fs.gate = IoGate(faults={2: FaultKind.NO_SPACE})
        handle = fs.open_write("/d/f", exclusive=False)  # op 0
        fs.write(handle, b"precious")  # op 1
        with pytest.raises(OSError) as info:
            fs.fsync(handle)  # op 2: fails with ENOSPC
        assert info.value.errno == errno.ENOSPC
        fs.fsync(handle)  # op 3: succeeds, but too late
        assert fs.after_power_loss(ALL_LOST).read("/d/f") == b""

    def test_dir_fsync_failure_loses_entries_for_good(self) -> None:
        """After a failed directory fsync, the entry changes before it are not durable even
        after a later directory fsync succeeds."""
        fs = durable_file("/d/other", b"x")
        write_file(fs, "/d/new", b"payload", fsync=True)
        fs.gate = IoGate(faults={0: FaultKind.IO_ERROR})
        with pytest.raises(OSError, match="directory fsync failed") as info:
            fs.fsync_dir("/d")
        assert info.value.errno == errno.EIO
        fs.fsync_dir("/d")
        assert "new" not in fs.after_power_loss(ALL_LOST).tree("/d")

    def test_io_error_on_write_does_not_apply(self) -> None:
        """An injected EIO on a write raises and leaves the file unchanged."""
        fs = durable_file("/d/f", b"")
        fs.gate = IoGate(faults={1: FaultKind.IO_ERROR})
        handle = fs.open_write("/d/f", exclusive=False)
        with pytest.raises(OSError, match=r"injected io_error at I/O op #1 \(write\)") as info:
            fs.write(handle, b"data")
        assert info.value.errno == errno.EIO
        assert fs.read("/d/f") == b""

    def test_no_space_fault(self) -> None:
        """An injected NO_SPACE fault makes the write fail with ENOSPC and write nothing."""
        fs = durable_file("/d/f", b"")
        fs.gate = IoGate(faults={1: FaultKind.NO_SPACE})
        handle = fs.open_write("/d/f", exclusive=False)
        with pytest.raises(OSError, match=r"injected no_space at I/O op #1 \(write\)") as info:
            fs.write(handle, b"data")
        assert info.value.errno == errno.ENOSPC
        assert fs.read("/d/f") == b""

    def test_capacity_exceeded(self) -> None:
        """A write beyond capacity_bytes fails with ENOSPC and writes nothing; writes that fit
        succeed."""
        fs = SimFilesystem(capacity_bytes=10)
        fs.makedirs("/d")
        handle = fs.open_write("/d/f", exclusive=True)
        fs.write(handle, b"12345678")
        with pytest.raises(OSError, match="no space left on device") as info:
            fs.write(handle, b"abc")
        assert info.value.errno == errno.ENOSPC
        fs.write(handle, b"ab")
        assert fs.read("/d/f") == b"12345678ab"

    def test_unlink_frees_space(self) -> None:
        """Space held by a file comes back once its last name is unlinked."""
        fs = SimFilesystem(capacity_bytes=10)
        fs.makedirs("/d")
        write_file(fs, "/d/a", b"12345678")
        fs.unlink("/d/a")
        write_file(fs, "/d/b", b"12345678")
        assert fs.read("/d/b") == b"12345678"

    def test_crash_at_gate_index(self) -> None:
        """An armed gate stops the operation at its index; nothing of it happens."""
        from statecraft.engine import SimulatedCrash

        fs = durable_file("/d/f", b"old")
        fs.gate = IoGate(crash_at=0)
        with pytest.raises(SimulatedCrash, match=r"before I/O op #0 \(rename"):
            fs.rename("/d/f", "/d/g")
        assert fs.tree("/d") == {"f": b"old"}


class TestNamespace:
    """POSIX namespace rules of SimFilesystem."""

    def test_link_fails_if_destination_exists(self) -> None:
        """link refuses an existing destination with EEXIST and changes nothing."""
        fs = durable_file("/d/a", b"A")
        write_file(fs, "/d/b", b"B")
        with pytest.raises(FileExistsError) as info:
            fs.link("/d/a", "/d/b")
        assert info.value.errno == errno.EEXIST
        assert fs.tree("/d") == {"a": b"A", "b": b"B"}

    def test_link_gives_a_second_name(self) -> None:
        """A link shares the inode: both names read the same bytes."""
        fs = durable_file("/d/a", b"A")
        fs.link("/d/a", "/d/b")
        fs.unlink("/d/a")
        assert fs.tree("/d") == {"b": b"A"}

    def test_exclusive_open_refuses_existing_name(self) -> None:
        """open_write(exclusive=True) on an existing name raises FileExistsError."""
        fs = durable_file("/d/a", b"A")
        with pytest.raises(FileExistsError, match="file exists"):
            fs.open_write("/d/a", exclusive=True)

    def test_rmdir_refuses_non_empty_directory(self) -> None:
        """rmdir of a directory with entries raises ENOTEMPTY."""
        fs = durable_file("/d/a", b"A")
        with pytest.raises(OSError, match="directory not empty") as info:
            fs.rmdir("/d")
        assert info.value.errno == errno.ENOTEMPTY

    def test_paths_must_be_absolute(self) -> None:
        """A relative path is refused with a message saying what is expected."""
        fs = SimFilesystem()
        with pytest.raises(ValueError, match="absolute POSIX paths, got 'rel/x'"):
            fs.stat("rel/x")

    def test_rename_file_over_directory_is_refused(self) -> None:
        """Renaming a file over a directory raises IsADirectoryError and changes nothing."""
        fs = durable_file("/d/sub/f", b"inside")
        write_file(fs, "/d/file", b"x")
        with pytest.raises(IsADirectoryError):
            fs.rename("/d/file", "/d/sub")
        assert fs.tree("/d") == {"file": b"x", "sub/f": b"inside"}


class TestSimWorld:
    """SimWorld.after_crash: the three crash kinds over disk and bucket."""

    def test_node_loss_blanks_the_disk_but_keeps_the_bucket(self) -> None:
        """After node loss the local disk is empty and every bucket object is intact."""
        world = SimWorld()
        world.local_store("/store").write_atomic("f", b"durable locally")
        world.object_store().write_atomic("remote/f", b"in the bucket")
        after = world.after_crash(CrashKind.NODE_LOSS)
        assert after.fs.tree("/") == {}
        assert after.fs.stat("/store") is None
        assert after.bucket.get("remote/f") == b"in the bucket"

    def test_power_loss_applies_the_choice(self) -> None:
        """after_crash(POWER_LOSS, choice) is the filesystem's power loss under that choice."""
        world = SimWorld()
        world.fs.makedirs("/d")
        world.settle()
        write_file(world.fs, "/d/f", b"x", fsync=True)
        assert world.after_crash(CrashKind.POWER_LOSS, ALL_LOST).fs.tree("/") == {}
        kept = all_kept(world.fs)
        assert world.after_crash(CrashKind.POWER_LOSS, kept).fs.tree("/") == {"d/f": b"x"}

    def test_power_loss_needs_a_choice(self) -> None:
        """A power loss without a LossChoice is refused with a message saying why."""
        with pytest.raises(ValueError, match="a power loss needs a LossChoice"):
            SimWorld().after_crash(CrashKind.POWER_LOSS)

    def test_crashed_world_is_independent(self) -> None:
        """Writes to the crashed world's disk or bucket do not reach the original."""
        world = SimWorld()
        world.bucket.put("k", b"1")
        after = world.after_crash(CrashKind.PROCESS_KILL)
        after.bucket.put("k", b"2")
        after.local_store("/s").write_atomic("f", b"x")
        assert world.bucket.get("k") == b"1"
        assert world.fs.tree("/") == {}

    def test_settle_makes_everything_durable_and_resets_the_gate(self) -> None:
        """settle() syncs the disk and starts a fresh I/O count."""
        world = SimWorld()
        world.local_store("/s").write_atomic("f", b"x")
        world.fs.unlink("/s/f")
        assert world.gate.count > 0
        world.settle()
        assert world.gate.count == 0
        assert world.fs.pending_ops() == []
        assert world.after_crash(CrashKind.POWER_LOSS, ALL_LOST).fs.tree("/") == {}


# --------------------------------------------------------------------------- property test

NAMES = ("a", "b", "c")
TORN_MODES = ("prefix", "zeros")


@attrs.define
class Model:
    """What the test knows about the live filesystem, to judge any crash state.

    Inodes are numbered by creation; each is written only by appends, so every content it
    ever held is a prefix of its final content.
    """

    content: dict[int, bytes] = attrs.field(factory=dict)
    handles: dict[int, int] = attrs.field(factory=dict)
    synced: dict[int, bool] = attrs.field(factory=dict)
    live: dict[str, int] = attrs.field(factory=dict)  # name -> inode now
    ever: dict[str, set[int]] = attrs.field(factory=dict)  # name -> inodes it ever named
    durable: set[str] = attrs.field(factory=set)  # names whose current entry is durable

    def bind(self, name: str, ino: int) -> None:
        self.live[name] = ino
        self.ever.setdefault(name, set()).add(ino)
        self.durable.discard(name)


operations = st.lists(
    st.one_of(
        st.tuples(st.just("create"), st.binary(min_size=1, max_size=6)),
        st.tuples(st.just("append"), st.integers(0, 5), st.binary(min_size=1, max_size=6)),
        st.tuples(st.just("fsync"), st.integers(0, 5)),
        st.tuples(st.just("rename"), st.integers(0, 5), st.sampled_from(NAMES)),
        st.tuples(st.just("fsync_dir")),
    ),
    max_size=14,
)


def apply(fs: SimFilesystem, model: Model, op: tuple) -> None:
    """Perform ``op`` on the filesystem and record it in the model."""
    kind = op[0]
    if kind == "create":
        ino = len(model.content)
        handle = fs.open_write(f"/d/t{ino}", exclusive=True)
        fs.write(handle, op[1])
        model.content[ino] = op[1]
        model.handles[ino] = handle
        model.synced[ino] = False
        model.bind(f"t{ino}", ino)
    elif kind in ("append", "fsync", "rename") and model.content:
        ino = op[1] % len(model.content)
        if kind == "append":
            fs.write(model.handles[ino], op[2])
            model.content[ino] += op[2]
            model.synced[ino] = False
        elif kind == "fsync":
            fs.fsync(model.handles[ino])
            model.synced[ino] = True
        elif f"t{ino}" in model.live:
            fs.rename(f"/d/t{ino}", f"/d/{op[2]}")
            del model.live[f"t{ino}"]
            model.durable.discard(f"t{ino}")
            model.bind(op[2], ino)
    elif kind == "fsync_dir":
        fs.fsync_dir("/d")
        model.durable = set(model.live)


def plausible(got: bytes, full: bytes) -> bool:
    """``got`` is a prefix of ``full`` in which some bytes may have become zeros (lost or
    torn unsynced writes)."""
    return len(got) <= len(full) and all(g in (f, 0) for g, f in zip(got, full, strict=False))


class TestPowerLossProperty:
    """After any operation sequence and any loss choice, files are versions or torn
    versions of what was written, and what was made durable is intact."""

    @settings(max_examples=300, deadline=None)
    @given(ops=operations, data=st.data())
    def test_every_crash_state_is_explainable(self, ops: list[tuple], data: st.DataObject) -> None:
        """Every file after a power loss holds (a torn variant of) a content that existed
        under its name, and every fsynced file whose name was dir-fsynced is intact."""
        fs = SimFilesystem()
        fs.makedirs("/d")
        fs.sync_all()
        model = Model()
        for op in ops:
            apply(fs, model, op)
        pending = [p.op_id for p in fs.pending_ops()]
        kept = set(data.draw(st.sets(st.sampled_from(pending))) if pending else ())
        writes = [p.op_id for p in fs.pending_ops() if p.kind == "write"]
        torn = None
        if writes and data.draw(st.booleans()):
            torn = (data.draw(st.sampled_from(writes)), data.draw(st.sampled_from(TORN_MODES)))
            kept.add(torn[0])
        after = fs.after_power_loss(LossChoice("random", frozenset(kept), torn))

        tree = after.tree("/d")
        for name, got in tree.items():
            assert name in model.ever, f"{name!r} never existed"
            versions = [model.content[i] for i in model.ever[name]]
            assert any(plausible(got, v) for v in versions), (
                f"{name!r} holds {got!r}, not a version of {versions}"
            )
        for name in model.durable:
            ino = model.live[name]
            if model.synced[ino]:
                assert tree.get(name) == model.content[ino], f"durable {name!r} not intact"
