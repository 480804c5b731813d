"""The artifact catalog: which partial artifacts an attempt holds, and in what state.

The counterpart of :mod:`statecraft.checkpoint.kernel.catalog` for ``<run>/checkpoint_artifacts/``:
the same listing (:func:`~statecraft.checkpoint.kernel.catalog.list_directories`), each
directory classified as an artifact (an artifact has its own manifest and states).
An artifact is never a resume source, but it constrains resume: a committed artifact at
``iter_N`` means the run reached step ``N`` after the full checkpoints it holds, so a resume
from an older full checkpoint would train into a save collision at ``N`` (the resume rules:
:mod:`statecraft.checkpoint.resume.rules`). ``resume``, ``statecraft inspect``
and the facade's save-without-resume rule read it.

::

    artifacts = scan_artifacts(open_artifacts(run_dir))   # None -> an empty catalog
    artifacts.entries[0].state                # ArtifactState.COMMITTED / CORRUPT / PARTIAL
    artifacts.newest_with_manifest()          # committed or corrupt-with-manifest: fail closed

Readers never create ``checkpoint_artifacts/`` (only a save does): :func:`open_artifacts`
stats the directory before building a store on it, and :func:`scan_artifacts` of ``None`` is
an empty catalog.
"""

from __future__ import annotations

import enum
from pathlib import Path

import attrs

from statecraft.checkpoint.kernel.artifact_release import read_release, release_path
from statecraft.checkpoint.kernel.artifact_verify import VerifiedArtifact, verify_artifact
from statecraft.checkpoint.kernel.catalog import list_directories
from statecraft.checkpoint.kernel.layout import (
    ARTIFACT_MANIFEST_NAME,
    ARTIFACTS_DIR,
    MANIFEST_NAME,
    iter_dirname,
)
from statecraft.checkpoint.kernel.verify import LEVELS
from statecraft.errors import CheckpointError
from statecraft.storage.base import Store
from statecraft.storage.filesystem import Filesystem, OsFilesystem
from statecraft.storage.local import LocalStore
from statecraft.writers.base import Writer

__all__ = [
    "ArtifactCatalog",
    "ArtifactEntry",
    "ArtifactState",
    "open_artifacts",
    "scan_artifacts",
]


class ArtifactState(enum.Enum):
    """The state of one ``checkpoint_artifacts/iter_N``.

    - ``PARTIAL``: no manifest at all (an interrupted artifact save): never counted.
    - ``CORRUPT``: a manifest is there (the artifact manifest, or a full-checkpoint manifest
      that does not belong in an artifact directory) but the artifact does not verify at the
      scan level; :attr:`ArtifactEntry.reason` says why. It still counts for the resume rules
      (fail closed: a damaged commit is still a step the run reached).
    - ``COMMITTED``: the artifact manifest is the commit and the artifact verifies.
    - ``RELEASED``: ``archive prune-verified`` proved its archive and released (some or all
      of) its payloads: the manifest, the ``.uploaded`` marker and the release record
      ``.archive-released.json`` stay; it counts for the resume rules like a committed one;
      :attr:`ArtifactEntry.reason` names the archive (fetch it back to use it).
    """

    PARTIAL = "partial"
    CORRUPT = "corrupt"
    COMMITTED = "committed"
    RELEASED = "released"


@attrs.frozen
class ArtifactEntry:
    """One artifact's state and why.

    Attributes:
        where: ``<store>/iter_<9 digits>`` as the store describes it (``local:/...``).
        path: its OS path when the store has one (what ``statecraft.load_weights`` takes),
            else ``where``.
        has_manifest: a manifest file is present (``COMMITTED``, and ``CORRUPT`` entries).
        verified: the proof when ``COMMITTED`` (dropped by :meth:`light`).
        components: the logical components its manifest records (empty unless committed).
        metrics: the metrics its manifest records (an artifact that evaluated before its
            commit), else ``None``.
        kind: ``"artifact"`` (the checkpoint catalog's entries say ``"checkpoint"``).
    """

    iteration: int
    state: ArtifactState
    where: str
    path: str
    has_manifest: bool
    reason: str = ""
    verified: VerifiedArtifact | None = attrs.field(default=None, eq=False, repr=False)
    components: tuple[str, ...] = ()
    metrics: dict[str, float] | None = attrs.field(default=None, hash=False)
    kind: str = "artifact"

    def light(self) -> ArtifactEntry:
        """This entry without its proof (small to broadcast to other ranks)."""
        return attrs.evolve(self, verified=None)

    @property
    def name(self) -> str:
        return iter_dirname(self.iteration)

    @property
    def counts(self) -> bool:
        """The resume rules count it: a manifest is there (committed, or corrupt: fail
        closed)."""
        return self.has_manifest


@attrs.frozen
class ArtifactCatalog:
    """The artifacts of one attempt, newest first (``store`` is ``None`` when the attempt
    has no ``checkpoint_artifacts/``)."""

    store: Store | None
    level: str
    entries: tuple[ArtifactEntry, ...] = ()

    def entry(self, iteration: int) -> ArtifactEntry | None:
        return next((e for e in self.entries if e.iteration == iteration), None)

    def committed(self) -> tuple[ArtifactEntry, ...]:
        """The verified artifacts, newest first."""
        return tuple(e for e in self.entries if e.state is ArtifactState.COMMITTED)

    def newest_with_manifest(self) -> ArtifactEntry | None:
        """The newest artifact holding a manifest, committed or corrupt (fail closed: a
        damaged commit still marks a step the run reached), or ``None``."""
        return next((e for e in self.entries if e.counts), None)


def _classify(store: Store, iteration: int, *, level: str, writer: Writer | None) -> ArtifactEntry:
    name = iter_dirname(iteration)
    where = f"{store.describe()}/{name}"
    path = store.local_path(name) or where
    manifests = [m for m in (ARTIFACT_MANIFEST_NAME, MANIFEST_NAME) if store.stat(f"{name}/{m}")]
    if not manifests:
        return ArtifactEntry(
            iteration,
            ArtifactState.PARTIAL,
            where,
            path,
            False,
            f"{where}: has no artifact manifest ({ARTIFACT_MANIFEST_NAME}): not committed (an "
            "interrupted artifact save); it is never counted or read",
        )
    if ARTIFACT_MANIFEST_NAME in manifests and store.stat(release_path(name)) is not None:
        try:
            archive = read_release(store, name).archive
        except (CheckpointError, OSError) as exc:
            archive = f"an archive its release record does not name ({exc})"
        return ArtifactEntry(
            iteration,
            ArtifactState.RELEASED,
            where,
            path,
            True,
            f"released (archived at {archive}): its local payloads were pruned after the "
            "archive was proven; fetch it back with statecraft archive fetch",
        )
    try:
        verified = verify_artifact(store, iteration, level=level, writer=writer)
    except Exception as exc:  # anything that fails verification is corrupt, with why
        reason = str(exc) if isinstance(exc, CheckpointError) else f"{type(exc).__name__}: {exc}"
        return ArtifactEntry(iteration, ArtifactState.CORRUPT, where, path, True, reason)
    return ArtifactEntry(
        iteration,
        ArtifactState.COMMITTED,
        where,
        path,
        True,
        "",
        verified,
        tuple(verified.manifest.components),
        verified.manifest.metrics,
    )


def scan_artifacts(
    store: Store | None, *, level: str = "digest", writer: Writer | None = None
) -> ArtifactCatalog:
    """Classify every ``iter_*`` of ``store`` (an attempt's ``checkpoint_artifacts`` root,
    or ``None`` when the attempt has none: an empty catalog), verified at ``level`` with
    :func:`~statecraft.checkpoint.kernel.artifact_verify.verify_artifact`. Reads only; a damaged
    artifact is an entry with its reason, never an exception.

    Level ``"manifest"`` (the resume rules) reads only the manifests; ``"size"`` and
    ``"digest"`` also read the files (``statecraft inspect``).

    Raises:
        CheckpointError: ``level`` is not a verification level.
    """
    if level not in LEVELS:
        raise CheckpointError(
            f"artifact catalog level must be one of {list(LEVELS)}, got {level!r}"
        )
    if store is None:
        return ArtifactCatalog(None, level)
    entries = (
        _classify(store, iteration, level=level, writer=writer)
        for iteration in list_directories(store)
    )
    return ArtifactCatalog(store, level, tuple(entries))


def open_artifacts(run_dir: str | Path, *, filesystem: Filesystem | None = None) -> Store | None:
    """The ``checkpoint_artifacts`` store of the attempt at ``run_dir``, or ``None`` when it
    has none. Nothing is created: the directory is stat'ed first (a ``LocalStore`` would
    create its root)."""
    fs = filesystem or OsFilesystem()
    path = str(Path(run_dir).absolute() / ARTIFACTS_DIR)
    stat = fs.stat(path)
    if stat is None or not stat.is_dir:
        return None
    return LocalStore(path, fs=fs)
