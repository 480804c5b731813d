"""How a :class:`~statecraft.storage.simfs.SimFilesystem` turns into the filesystem a reboot
finds: after a process kill, a power loss (a :class:`LossChoice` of the unsynced operations)
or a node loss, and which loss choices DESIGN.md §4(b) enumerates."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Self

import attrs

from statecraft.storage.simfs_records import ROOT, Inode, LossChoice, PendingOp, apply_writes

__all__ = ["CrashStates"]


class CrashStates:
    """The crash-state half of the simulated filesystem (mixed into ``SimFilesystem``)."""

    _inodes: dict[int, Inode]
    _next_ino: int
    _next_op: int
    capacity_bytes: int | None

    def __init__(self, **kwargs: Any) -> None:  # pragma: no cover - SimFilesystem defines it
        raise NotImplementedError

    def pending_ops(self) -> list[PendingOp]:
        """Every operation accepted but not yet durable, oldest first."""
        ops: dict[int, PendingOp] = {}
        for node in self._inodes.values():
            for w in node.pending:
                what = "truncate" if w.truncate else f"write {len(w.data)}B @{w.offset}"
                ops[w.op_id] = PendingOp(w.op_id, "write", f"{what} to inode {node.ino}")
            for e in node.pending_entries:
                if e.op_id not in ops:
                    verb = "add" if e.add else "remove"
                    ops[e.op_id] = PendingOp(e.op_id, "entry", f"{verb} entry {e.name!r}")
        return [ops[k] for k in sorted(ops)]

    def _rebuilt(
        self,
        entries_of: Callable[[Inode], dict[str, int]],
        data_of: Callable[[Inode], bytes],
    ) -> Self:
        fresh = type(self)(capacity_bytes=self.capacity_bytes)
        fresh._inodes = {}
        stack = [ROOT]
        while stack:
            ino = stack.pop()
            if ino in fresh._inodes:
                continue
            node = self._inodes[ino]
            if node.is_dir:
                entries = entries_of(node)
                fresh._inodes[ino] = Inode(
                    ino, True, entries=dict(entries), synced_entries=dict(entries)
                )
                stack.extend(entries.values())
            else:
                data = data_of(node)
                fresh._inodes[ino] = Inode(ino, False, data=bytearray(data), synced=data)
        fresh._next_ino = self._next_ino
        fresh._next_op = self._next_op
        return fresh

    def after_process_kill(self) -> Self:
        """The filesystem a restarted process sees: all accepted operations survive, and what
        was not yet durable stays not durable (a later power loss can still lose it)."""
        fresh = type(self)(capacity_bytes=self.capacity_bytes)
        fresh._inodes = {}
        stack = [ROOT]
        reachable: set[int] = set()
        while stack:
            ino = stack.pop()
            if ino in reachable:
                continue
            reachable.add(ino)
            node = self._inodes[ino]
            stack.extend(node.entries.values())
            stack.extend(node.synced_entries.values())
            stack.extend(op.ino for op in node.pending_entries)
        for ino in reachable:
            node = self._inodes[ino]
            fresh._inodes[ino] = Inode(
                ino,
                node.is_dir,
                data=bytearray(node.data),
                synced=node.synced,
                pending=[attrs.evolve(w) for w in node.pending],
                entries=dict(node.entries),
                synced_entries=dict(node.synced_entries),
                pending_entries=[attrs.evolve(e) for e in node.pending_entries],
            )
        fresh._next_ino = self._next_ino
        fresh._next_op = self._next_op
        return fresh

    def after_power_loss(self, choice: LossChoice) -> Self:
        """The filesystem after a power loss in which exactly ``choice.kept`` of the unsynced
        operations survive (``choice.torn`` one of them torn)."""

        def entries_of(node: Inode) -> dict[str, int]:
            entries = dict(node.synced_entries)
            for op in node.pending_entries:
                if op.op_id not in choice.kept:
                    continue
                if op.add:
                    entries[op.name] = op.ino
                elif entries.get(op.name) == op.ino:
                    del entries[op.name]
            return entries

        def data_of(node: Inode) -> bytes:
            kept = [w for w in node.pending if w.op_id in choice.kept]
            return apply_writes(node.synced, kept, choice.torn)

        return self._rebuilt(entries_of, data_of)

    def after_node_loss(self) -> Self:
        """A blank disk: the node and its local storage are gone."""
        return type(self)(capacity_bytes=self.capacity_bytes)

    def loss_choices(self) -> list[LossChoice]:
        """The power-loss states DESIGN.md §4(b) enumerates for the current pending operations:
        all lost, all kept, each one lost alone, and the last write torn (prefix / zeros)."""
        pending = self.pending_ops()
        ids = frozenset(p.op_id for p in pending)
        choices = [LossChoice("all_lost", frozenset())]
        if not pending:
            return choices
        choices.append(LossChoice("all_kept", ids))
        if len(pending) > 1:
            choices.extend(LossChoice(f"omit#{p.op_id}", ids - {p.op_id}) for p in pending)
        writes = [p for p in pending if p.kind == "write" and "truncate" not in p.description]
        if writes:
            last = writes[-1].op_id
            choices.append(LossChoice(f"torn_prefix#{last}", ids, (last, "prefix")))
            choices.append(LossChoice(f"torn_zeros#{last}", ids, (last, "zeros")))
        return choices
