"""The ``Writer`` protocol: how a checkpoint's payloads become entries in a store.

In the style of torch DCP's ``StorageWriter``, a writer is driven by the ``save`` transaction in
a fixed order; *what* to write is the plan (:mod:`statecraft.checkpoint.kernel.plan`), *where and
how*
bytes become durable is the store (:class:`~statecraft.storage.base.Store`). The writer only
turns payloads into bytes in that store.

Call order for one save (one writer instance per save; the ``save`` table is the order):

1. :meth:`Writer.prepare` — **coordinator (rank 0)**, once, after ``iter_N/`` is created and
   before any entry is written (effect ``prepare_iteration``).
2. :meth:`Writer.write` — **the rank that owns the entry** (rank 0 for the consolidated
   format), once per entry of the plan, bulk entries before control entries (effects
   ``write_components`` then ``write_control``). Returns the entry's :class:`FileRecord`.
   The entry may still be settling when ``write`` returns (a store's ``defer_sync``): it is
   durable under its name once the store's next publication returns; the manifest's
   exclusive create settles every such entry before its ``link``, so a commit never names a
   file that a power loss could take.
3. :meth:`Writer.finish` — **coordinator**, once, after every entry is durable and before the
   manifest is published (effect ``commit_manifest``); its mapping is recorded in the
   manifest's ``writer`` field.

Loading (resume, ``inspect``): :meth:`Writer.read` — **every rank**, any number of times, on
a checkpoint that verification has already accepted; it never writes.

Enforcement: ``Writer`` is an :class:`abc.ABC`, so an implementation missing a step cannot be
instantiated, and ``write`` before ``prepare`` or ``finish`` twice raises
:class:`~statecraft.errors.CheckpointError` (the base tracks the phase through
:meth:`Writer.begin_write`, which ``save`` calls before each ``write``).

Implementations: :class:`~statecraft.writers.consolidated.ConsolidatedWriter` (one
``torch.save`` file per entry). The DCP writer will be the second.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar, Protocol

import torch

from statecraft.errors import CheckpointError
from statecraft.storage.base import FileRecord, Store

__all__ = ["PlanLike", "Writer", "tensor_bytes"]


class PlanLike(Protocol):
    """What a writer sees of a save plan (``statecraft.checkpoint.kernel.manifest.SavePlan``; the
    writers sit below the checkpoint domain and do not import it)."""

    @property
    def iteration(self) -> int: ...

    @property
    def format(self) -> str: ...

    @property
    def files(self) -> tuple[str, ...]: ...


class Writer(abc.ABC):
    """Turns one save's payloads into entries of a store (see the module docstring for the
    call order and which rank calls each step).

    Attributes:
        format_name: the manifest's ``format`` this writer produces (``"consolidated"``).
    """

    format_name: ClassVar[str]

    _phase: str = "new"  # new -> prepared -> finished (per instance)

    # ----------------------------------------------------------------- save side
    def prepare(self, plan: PlanLike, store: Store) -> None:
        """Step 1 (coordinator): get ready to write ``plan`` into ``store``.

        Raises:
            CheckpointError: the plan's format is not this writer's, or the writer was already
                used for another save.
        """
        if self._phase != "new":
            raise CheckpointError(
                f"{self!r}.prepare: a writer serves one save (it is {self._phase}); create a "
                "new writer per save"
            )
        if plan.format != self.format_name:
            raise CheckpointError(
                f"{self!r}.prepare: the plan's format is {plan.format!r} but this writer "
                f"writes {self.format_name!r}; use the writer of that format"
            )
        self.prepare_plan(plan, store)
        self._phase = "prepared"

    def prepare_plan(self, plan: PlanLike, store: Store) -> None:  # noqa: B027 - optional hook
        """Hook for implementations that lay out the plan up front (default: nothing)."""

    def begin_write(self, name: str) -> None:
        """Check that step 2 may run now (the save path calls it before each ``write``).

        Raises:
            CheckpointError: ``prepare`` has not run, or ``finish`` already ran.
        """
        if self._phase != "prepared":
            raise CheckpointError(
                f"{self!r}.write({name!r}) called while the writer is {self._phase}; the "
                "order is prepare -> write (each entry) -> finish"
            )

    @abc.abstractmethod
    def write(self, store: Store, path: str, payload: object) -> FileRecord:
        """Step 2 (the rank owning the entry): serialize ``payload`` to ``path`` atomically.

        Returns:
            the size and digest of the bytes published under ``path``.

        Raises:
            StoreError: the bytes could not be made durable (nothing was published).
        """

    def finish(self) -> dict[str, str]:
        """Step 3 (coordinator): the writer information recorded in the manifest.

        Raises:
            CheckpointError: ``prepare`` has not run, or ``finish`` already ran.
        """
        if self._phase != "prepared":
            raise CheckpointError(
                f"{self!r}.finish called while the writer is {self._phase}; the order is "
                "prepare -> write (each entry) -> finish, once per save"
            )
        self._phase = "finished"
        return self.writer_info()

    @abc.abstractmethod
    def writer_info(self) -> dict[str, str]:
        """What produced the bytes (library versions), for the manifest's ``writer`` field."""

    # ----------------------------------------------------------------- load side
    # ``-> Any``: the payload is whatever was saved under ``path`` (a state dict, the trainer
    # record, DCP ``Metadata``); the caller knows which and checks it, the writer cannot.
    @abc.abstractmethod
    def read(self, store: Store, path: str, *, mmap: bool = True) -> Any:
        """Load the payload at ``path`` (every rank; never writes).

        Raises:
            CheckpointCorruptError: the entry is not loadable.
        """


def tensor_bytes(payload: object) -> int:
    """The bytes of every tensor in ``payload`` (nested dicts, lists, tuples): what its
    ``torch.save`` file needs at least."""
    stack: list[object] = [payload]
    total = 0
    seen: set[tuple[int, int]] = set()
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            storage = item.untyped_storage()
            key = (storage.data_ptr(), storage.nbytes())
            if key not in seen:
                seen.add(key)
                total += storage.nbytes()
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return total
