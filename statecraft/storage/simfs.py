"""An in-memory filesystem that obeys the power-loss rules of DESIGN.md §4.

It records, per file, the data made durable by ``fsync`` and the writes since; per directory,
the entries made durable by a directory ``fsync`` and the entry operations (create, rename,
unlink, mkdir) since. A crash turns it into the filesystem that a reboot would find:

- **process kill** (:meth:`SimFilesystem.after_process_kill`): everything the OS accepted
  survives.
- **power loss** (:meth:`SimFilesystem.after_power_loss`): file data survives only if fsynced
  after it was written; a directory entry change survives only if the directory was fsynced
  after it. Each unsynced operation may independently survive or not (a
  :class:`LossChoice` says which), and one write may be torn (a prefix, or zero-filled). A
  rename that did not survive reverts. After a failed ``fsync`` the affected data is lost for
  good, even if a later ``fsync`` succeeds (never retry-and-trust).
- **node loss** (:meth:`SimFilesystem.after_node_loss`): the disk is gone.

Every mutating call passes the optional :class:`~statecraft.engine.crash.IoGate`, so it is a
crash point, and may receive an injected fault (``EIO``, ``ENOSPC``).
"""

from __future__ import annotations

import errno
import io
from typing import BinaryIO

from statecraft.engine.crash import FaultKind, IoGate
from statecraft.errors import SpecialFileError
from statecraft.storage.filesystem import MAX_CONTROL_BYTES, FileStat, fault_error
from statecraft.storage.simfs_crash import CrashStates
from statecraft.storage.simfs_records import (
    ROOT,
    EntryOp,
    Inode,
    LossChoice,
    PendingOp,
    Write,
    apply_writes,
    split_path,
)

__all__ = ["LossChoice", "PendingOp", "SimFilesystem"]


class SimFilesystem(CrashStates):
    """A simulated POSIX filesystem with explicit durability.

    Args:
        gate: the I/O gate shared with the runner (crash points and injected faults).
        capacity_bytes: total file bytes the disk holds; a write beyond raises ``ENOSPC``.
    """

    def __init__(self, *, gate: IoGate | None = None, capacity_bytes: int | None = None) -> None:
        self.gate = gate
        self.capacity_bytes = capacity_bytes
        self._inodes: dict[int, Inode] = {ROOT: Inode(ROOT, True)}
        self._next_ino = 1
        self._next_op = 0
        self._handles: dict[int, list[int]] = {}  # handle -> [ino, position]
        self._next_handle = 3

    def __repr__(self) -> str:
        return f"SimFilesystem(files={sum(not i.is_dir for i in self._inodes.values())})"

    # ------------------------------------------------------------------ helpers
    def _io(self, op: str, path: str) -> FaultKind | None:
        if self.gate is None:
            return None
        fault = self.gate.before_io(op, path)
        if fault is None:
            return None
        if op in ("fsync", "fsync_dir", "sync_path"):
            return fault.kind  # the caller loses the unsynced data, then raises
        raise fault_error(fault, op, path)

    def _op_id(self) -> int:
        self._next_op += 1
        return self._next_op

    def _lookup(self, path: str) -> Inode | None:
        node = self._inodes[ROOT]
        for part in split_path(path):
            if not node.is_dir or part not in node.entries:
                return None
            node = self._inodes[node.entries[part]]
        return node

    def _parent(self, path: str) -> tuple[Inode, str]:
        parts = split_path(path)
        if not parts:
            raise OSError(errno.EINVAL, "the root has no parent", path)
        parent = self._lookup("/" + "/".join(parts[:-1]))
        if parent is None:
            raise FileNotFoundError(errno.ENOENT, "no such directory", path)
        if not parent.is_dir:
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", path)
        return parent, parts[-1]

    def _add_entry(self, parent: Inode, name: str, ino: int, op_id: int) -> None:
        parent.entries[name] = ino
        parent.pending_entries.append(EntryOp(op_id, True, name, ino))

    def _remove_entry(self, parent: Inode, name: str, op_id: int) -> None:
        ino = parent.entries.pop(name)
        parent.pending_entries.append(EntryOp(op_id, False, name, ino))

    def _used_bytes(self, *, extra: int) -> int:
        """Bytes held by files reachable from the root or still open (``extra``)."""
        live = {extra} | {ino for ino, _ in self._handles.values()}
        stack = [ROOT]
        while stack:
            node = self._inodes[stack.pop()]
            for child in node.entries.values():
                if self._inodes[child].is_dir:
                    stack.append(child)
                else:
                    live.add(child)
        return sum(len(self._inodes[i].data) for i in live)

    def _new_inode(self, is_dir: bool) -> Inode:
        node = Inode(self._next_ino, is_dir)
        self._inodes[node.ino] = node
        self._next_ino += 1
        return node

    # ------------------------------------------------------------- Filesystem
    def open_write(self, path: str, *, exclusive: bool) -> int:
        self._io("open_write", path)
        parent, name = self._parent(path)
        op_id = self._op_id()
        if name in parent.entries:
            if exclusive:
                raise FileExistsError(errno.EEXIST, "file exists", path)
            node = self._inodes[parent.entries[name]]
            if node.is_dir:
                raise IsADirectoryError(errno.EISDIR, "is a directory", path)
            node.data = bytearray()
            node.pending.append(Write(op_id, 0, b"", truncate=True))
        else:
            node = self._new_inode(False)
            self._add_entry(parent, name, node.ino, op_id)
        handle = self._next_handle
        self._next_handle += 1
        self._handles[handle] = [node.ino, 0]
        return handle

    def write(self, handle: int, data: bytes | memoryview) -> None:
        ino, position = self._handles[handle]
        self._io("write", f"handle {handle} (+{len(data)} bytes)")
        payload = bytes(data)
        if self.capacity_bytes is not None:
            used = self._used_bytes(extra=ino)
            if used + len(payload) > self.capacity_bytes:
                raise OSError(errno.ENOSPC, "no space left on device (simulated)", str(handle))
        node = self._inodes[ino]
        node.data[position : position + len(payload)] = payload
        node.pending.append(Write(self._op_id(), position, payload))
        self._handles[handle][1] = position + len(payload)

    def fsync(self, handle: int) -> None:
        node = self._inodes[self._handles[handle][0]]
        fault = self._io("fsync", f"handle {handle}")
        if fault is not None:
            node.pending.clear()  # the data is lost for good: a later fsync cannot save it
            code = errno.ENOSPC if fault is FaultKind.NO_SPACE else errno.EIO
            raise OSError(code, "fsync failed (injected); unsynced data is lost", str(handle))
        node.synced = apply_writes(node.synced, node.pending, None)
        node.pending.clear()

    def start_writeback(self, handle: int, offset: int, length: int) -> None:
        """A hint with no effect on durability: nothing to simulate."""

    def close(self, handle: int) -> None:
        self._handles.pop(handle)

    def rename(self, src: str, dst: str) -> None:
        self._io("rename", f"{src} -> {dst}")
        src_parent, src_name = self._parent(src)
        dst_parent, dst_name = self._parent(dst)
        if src_name not in src_parent.entries:
            raise FileNotFoundError(errno.ENOENT, "no such file", src)
        ino = src_parent.entries[src_name]
        existing = dst_parent.entries.get(dst_name)
        if existing is not None and existing != ino:
            if self._inodes[existing].is_dir and not self._inodes[ino].is_dir:
                raise IsADirectoryError(errno.EISDIR, "cannot rename a file over a directory", dst)
            if self._inodes[ino].is_dir and not self._inodes[existing].is_dir:
                raise NotADirectoryError(
                    errno.ENOTDIR, "cannot rename a directory over a file", dst
                )
            if self._inodes[existing].is_dir and self._inodes[existing].entries:
                raise OSError(errno.ENOTEMPTY, "directory not empty", dst)
        op_id = self._op_id()
        self._remove_entry(src_parent, src_name, op_id)
        self._add_entry(dst_parent, dst_name, ino, op_id)

    def link(self, src: str, dst: str) -> None:
        self._io("link", f"{src} -> {dst}")
        src_node = self._lookup(src)
        if src_node is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", src)
        dst_parent, dst_name = self._parent(dst)
        if dst_name in dst_parent.entries:
            raise FileExistsError(errno.EEXIST, "file exists", dst)
        self._add_entry(dst_parent, dst_name, src_node.ino, self._op_id())

    def unlink(self, path: str) -> None:
        self._io("unlink", path)
        parent, name = self._parent(path)
        if name not in parent.entries:
            raise FileNotFoundError(errno.ENOENT, "no such file", path)
        if self._inodes[parent.entries[name]].is_dir:
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        self._remove_entry(parent, name, self._op_id())

    def mkdir(self, path: str) -> None:
        self._io("mkdir", path)
        parent, name = self._parent(path)
        if name in parent.entries:
            raise FileExistsError(errno.EEXIST, "file exists", path)
        node = self._new_inode(True)
        self._add_entry(parent, name, node.ino, self._op_id())

    def rmdir(self, path: str) -> None:
        self._io("rmdir", path)
        parent, name = self._parent(path)
        node = self._lookup(path)
        if node is None:
            raise FileNotFoundError(errno.ENOENT, "no such directory", path)
        if not node.is_dir:
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", path)
        if node.entries:
            raise OSError(errno.ENOTEMPTY, "directory not empty", path)
        self._remove_entry(parent, name, self._op_id())

    def fsync_dir(self, path: str) -> None:
        node = self._lookup(path)
        if node is None or not node.is_dir:
            raise FileNotFoundError(errno.ENOENT, "no such directory", path)
        fault = self._io("fsync_dir", path)
        if fault is not None:
            node.pending_entries.clear()
            code = errno.ENOSPC if fault is FaultKind.NO_SPACE else errno.EIO
            raise OSError(code, "directory fsync failed (injected)", path)
        for op in node.pending_entries:
            if op.add:
                node.synced_entries[op.name] = op.ino
            elif node.synced_entries.get(op.name) == op.ino:
                del node.synced_entries[op.name]
        node.pending_entries.clear()

    def sync_path(self, path: str) -> None:
        node = self._lookup(path)
        if node is None:
            raise FileNotFoundError(errno.ENOENT, "no such file or directory", path)
        if node.is_dir:
            self.fsync_dir(path)
            return
        fault = self._io("sync_path", path)
        if fault is not None:
            node.pending.clear()
            raise OSError(errno.EIO, "fsync failed (injected); unsynced data is lost", path)
        node.synced = apply_writes(node.synced, node.pending, None)
        node.pending.clear()

    def listdir(self, path: str) -> list[str]:
        node = self._lookup(path)
        if node is None:
            raise FileNotFoundError(errno.ENOENT, "no such directory", path)
        if not node.is_dir:
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", path)
        return sorted(node.entries)

    def stat(self, path: str) -> FileStat | None:
        node = self._lookup(path)
        if node is None:
            return None
        return FileStat(size=0 if node.is_dir else len(node.data), is_dir=node.is_dir)

    def _file(self, path: str) -> Inode:
        node = self._lookup(path)
        if node is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", path)
        if node.is_dir:
            raise SpecialFileError(path, "directory")
        return node

    def read(self, path: str) -> bytes:
        node = self._file(path)
        if len(node.data) > MAX_CONTROL_BYTES:
            raise SpecialFileError(
                path,
                "too large",
                f"it holds {len(node.data):,} bytes, more than the {MAX_CONTROL_BYTES:,} "
                "a control file may",
            )
        return bytes(node.data)

    def open_read(self, path: str) -> BinaryIO:
        return io.BytesIO(bytes(self._file(path).data))

    def free_bytes(self, path: str) -> int | None:
        """What ``capacity_bytes`` leaves (``None``: no capacity set)."""
        if self.capacity_bytes is None:
            return None
        return max(0, self.capacity_bytes - self._used_bytes(extra=ROOT))

    def real_path(self, path: str) -> str | None:
        return None

    # ---------------------------------------------------------------- helpers
    def sync_all(self) -> None:
        """Make every accepted operation durable (test setup: "this state is on disk")."""
        for node in self._inodes.values():
            node.synced = bytes(node.data) if not node.is_dir else b""
            node.pending.clear()
            node.synced_entries = dict(node.entries)
            node.pending_entries.clear()

    def makedirs(self, path: str) -> None:
        """Create ``path`` and its parents (not a crash point; for test setup)."""
        gate, self.gate = self.gate, None
        try:
            current = ""
            for part in split_path(path):
                current += "/" + part
                if self._lookup(current) is None:
                    self.mkdir(current)
        finally:
            self.gate = gate

    def tree(self, path: str = "/") -> dict[str, bytes]:
        """Every file under ``path`` (relative name -> bytes), as a process would read it."""
        out: dict[str, bytes] = {}
        base = self._lookup(path)
        if base is None:
            return out
        stack: list[tuple[str, Inode]] = [("", base)]
        while stack:
            prefix, node = stack.pop()
            for name, ino in node.entries.items():
                child = self._inodes[ino]
                rel = f"{prefix}{name}"
                if child.is_dir:
                    stack.append((rel + "/", child))
                else:
                    out[rel] = bytes(child.data)
        return dict(sorted(out.items()))
