"""The checkpoint catalog: which checkpoints an attempt holds, and in what state.

One :func:`scan` of a checkpoints store answers every "what is on disk" question the library
asks: the save transaction's observation, resume's candidate list and auto-pick, ``statecraft
inspect``, the demo and a retention pass. It lists the ``iter_*`` directories and reads
``latest_checkpoint.txt`` up front; each iteration is classified on demand (newest first) at
the scan's level and the result is kept, so resume hashes only the checkpoints it tries.

::

    catalog = scan(store, level="digest")
    catalog.latest.state                 # LatestState.OK / MISSING / GARBAGE / DANGLING
    catalog.entry(100).state             # CheckpointState.COMMITTED / CORRUPT / PARTIAL / ABSENT
                                         # / EVALUATION_PENDING / PUBLICATION_PENDING / PUBLISHED
                                         # / WEIGHTS_ONLY / INVALIDATED (retention's markers)
    pick = catalog.pick()                # newest adoptable, with every newer one passed over

How deep each iteration is read is the scan's :class:`Depth`, cheapest first:

- ``LISTING`` and ``STAT``: retention's reading, no bulk file opened or hashed
  (:mod:`statecraft.checkpoint.kernel.catalog_cheap`; a committed iteration is ``UNREAD`` at
  ``LISTING``; each entry carries its directory listing and ``.uploaded``);
- ``VERIFY`` (the default): proven at the verification ``level`` (``"manifest"``,
  ``"size"``, ``"digest"``; :mod:`statecraft.checkpoint.kernel.catalog_verified`, through
  :func:`~statecraft.checkpoint.kernel.verify.verify_checkpoint`).

Retention's view of a scan is :mod:`statecraft.checkpoint.retention.scan`. The partial
artifacts beside the checkpoints (``checkpoint_artifacts/``) are listed by the same
:func:`list_directories` and classified by
:mod:`statecraft.checkpoint.kernel.artifact_catalog`.
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs

from statecraft.checkpoint.kernel.catalog_cheap import classify_cheaply
from statecraft.checkpoint.kernel.catalog_entries import (
    CatalogEntry,
    CheckpointState,
    Depth,
    LatestPointer,
    LatestState,
    PassedOver,
    Pick,
)
from statecraft.checkpoint.kernel.catalog_verified import classify
from statecraft.checkpoint.kernel.layout import LATEST_POINTER, iter_dirname, parse_latest
from statecraft.checkpoint.kernel.verify import LEVELS, list_iterations
from statecraft.errors import CheckpointError
from statecraft.storage.base import Store
from statecraft.writers.base import Writer

__all__ = [
    "Catalog",
    "CatalogEntry",
    "CheckpointState",
    "Depth",
    "LatestPointer",
    "LatestState",
    "PassedOver",
    "Pick",
    "classify",
    "list_directories",
    "read_latest",
    "scan",
]


@attrs.define
class Catalog:
    """The iterations of one checkpoints store, classified on demand (see :func:`scan`).

    Attributes:
        store: the checkpoints root of one attempt.
        level: the verification level a ``COMMITTED`` entry has passed (depth ``VERIFY``).
        iterations: every ``iter_*`` directory's iteration, newest first.
        latest: what ``latest_checkpoint.txt`` says.
        keep_payloads: committed entries keep the components verification parsed (resume
            loads them); ``False`` for a reader that only classifies.
        depth: how deep each iteration is read (:class:`Depth`).
        read_weights_only: at depth ``STAT``, weights-only iterations are read too
            (``False``: one listing each; see
            :func:`~statecraft.checkpoint.kernel.catalog_cheap.classify_cheaply`).
    """

    store: Store
    level: str
    iterations: tuple[int, ...]
    latest: LatestPointer
    writer: Writer | None = None
    keep_payloads: bool = True
    depth: Depth = Depth.VERIFY
    read_weights_only: bool = True
    _entries: dict[int, CatalogEntry] = attrs.field(factory=dict, repr=False)

    def entry(self, iteration: int) -> CatalogEntry:
        """Classify ``iteration`` (verified once, then remembered). Never raises for a bad
        checkpoint: the problem is the entry's ``reason``."""
        if iteration not in self._entries and self.depth is not Depth.VERIFY:
            self._entries[iteration] = classify_cheaply(
                self.store, iteration, depth=self.depth, read_weights_only=self.read_weights_only
            )
        elif iteration not in self._entries:
            self._entries[iteration] = classify(
                self.store,
                iteration,
                level=self.level,
                writer=self.writer,
                keep_payloads=self.keep_payloads,
            )
        return self._entries[iteration]

    def entries(self) -> Iterator[CatalogEntry]:
        """Every listed iteration's entry, newest first (each verified as it is reached)."""
        for iteration in self.iterations:
            yield self.entry(iteration)

    def pick(self) -> Pick:
        """Resume's auto-pick: verify newest first, stop at the first adoptable one."""
        passed: list[PassedOver] = []
        for entry in self.entries():
            if entry.state.adoptable:
                return Pick(entry, tuple(passed))
            passed.append(PassedOver(entry.name, entry.reason))
        return Pick(None, tuple(passed))


def read_latest(store: Store, iterations: tuple[int, ...] | list[int]) -> LatestPointer:
    """Classify ``latest_checkpoint.txt`` against the listed iterations."""
    if store.stat(LATEST_POINTER) is None:
        return LatestPointer(LatestState.MISSING)
    try:
        latest = parse_latest(store.read_bytes(LATEST_POINTER))
    except FileNotFoundError:
        return LatestPointer(LatestState.MISSING)
    except ValueError as exc:
        return LatestPointer(
            LatestState.GARBAGE,
            None,
            f"{store.describe()}/{LATEST_POINTER} is unreadable ({exc}); "
            "ignoring it and selecting by verified manifests",
            str(exc),
        )
    if latest not in iterations:
        return LatestPointer(
            LatestState.DANGLING,
            latest,
            f"{store.describe()}/{LATEST_POINTER} names {iter_dirname(latest)}, "
            "which does not exist; ignoring it and selecting by verified manifests",
        )
    return LatestPointer(LatestState.OK, latest)


def list_directories(store: Store) -> tuple[int, ...]:
    """The iterations whose ``iter_*`` in ``store`` is a directory, newest first (one listing
    of the root and a ``stat`` of each; the artifact catalog's listing)."""
    found = []
    for iteration in list_iterations(store):
        stat = store.stat(iter_dirname(iteration))
        if stat is not None and stat.is_dir:
            found.append(iteration)
    return tuple(found)


def scan(
    store: Store,
    *,
    level: str = "digest",
    writer: Writer | None = None,
    keep_payloads: bool = True,
    depth: Depth = Depth.VERIFY,
    read_weights_only: bool = True,
) -> Catalog:
    """List the attempt in ``store`` and read its latest pointer; iterations are classified
    when first asked for, read to ``depth`` (see the module docstring) and, at depth
    ``VERIFY``, verified at ``level`` (``"manifest"``, ``"size"``, ``"digest"``).

    Args:
        keep_payloads: committed entries keep their parsed components (resume); pass
            ``False`` to classify only (``statecraft inspect``: nothing stays mapped).
        depth: ``LISTING`` / ``STAT`` for retention's cheap reading (``level`` unused).
        read_weights_only: at depth ``STAT``, also read weights-only iterations (a model
            policy judges them); ``False``: one listing each.

    Raises:
        CheckpointError: ``level`` is not a verification level.
    """
    if level not in LEVELS:
        raise CheckpointError(f"catalog level must be one of {list(LEVELS)}, got {level!r}")
    iterations = tuple(list_iterations(store))
    latest = read_latest(store, iterations)
    return Catalog(
        store, level, iterations, latest, writer, keep_payloads, depth, read_weights_only
    )
