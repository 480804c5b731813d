"""The records of one publish (the ``publish`` machine, :mod:`.publish_bindings`): what the
effects share (:class:`PublishContext`) and what a completed publish reports
(:class:`PublishReport`)."""

from __future__ import annotations

import attrs

from statecraft.checkpoint.archive.declaration import ArchiveDeclaration
from statecraft.checkpoint.archive.destination import ArchiveDestination
from statecraft.checkpoint.archive.inventory import ArchiveEntry
from statecraft.checkpoint.archive.marker import UploadedMarker
from statecraft.checkpoint.fencing.lease import WriterLease
from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.errors import ArchiveError
from statecraft.storage.base import Store

__all__ = ["PublishContext", "PublishReport"]


@attrs.frozen
class PublishReport:
    """A completed publish.

    Attributes:
        iteration: the artifact's ``iter_N``.
        files: archived files (the manifest included).
        uploaded / skipped: payloads PUT by this run / found remotely with the declared size
            and sha256 (the manifest counts as uploaded when this run created it).
        bytes_uploaded: bytes this run sent.
        seconds: wall time.
        remote_prefix: the archive's key prefix (``<artifacts prefix>/iter_N``).
        marker: the receipt written locally.
    """

    iteration: int
    files: int
    uploaded: int
    skipped: int
    bytes_uploaded: int
    seconds: float
    remote_prefix: str
    marker: UploadedMarker


@attrs.define
class PublishContext:
    """One publish of artifact ``iteration``.

    Attributes:
        artifacts: the ``checkpoint_artifacts`` root store.
        destination: the bucket and the checkpoints-root prefix.
        lease: this process's writer lease, checked before the receipt is written.
        entries: every local file with size and sha256 (filled by ``hash_local``).
        manifest_bytes: the local artifact manifest's bytes (filled by ``hash_local``).
        declaration: the inventory, as declared (filled by ``hash_local``).
        resumed: the declaration already existed (an earlier run declared it).
        observed / problem: what ``observe_publish`` found, and why when uncommitted.
        uploaded / skipped / bytes_uploaded: this run's counters.
        marker: the receipt, once written.
    """

    artifacts: Store
    iteration: int
    destination: ArchiveDestination
    lease: WriterLease | None = None
    entries: tuple[ArchiveEntry, ...] = ()
    manifest_bytes: bytes = b""
    declaration: ArchiveDeclaration | None = None
    resumed: bool = False
    observed: str = ""
    problem: str = ""
    uploaded: int = 0
    skipped: int = 0
    bytes_uploaded: int = 0
    marker: UploadedMarker | None = None

    @property
    def iter_dir(self) -> str:
        return iter_dirname(self.iteration)

    @property
    def where(self) -> str:
        return f"{self.artifacts.describe()}/{self.iter_dir}"

    @property
    def remote_prefix(self) -> str:
        return self.destination.artifact_prefix(self.iteration)

    def key(self, relative: str) -> str:
        return f"{self.remote_prefix}/{relative}"

    def uri(self, relative: str = "") -> str:
        return self.destination.uri(self.key(relative) if relative else self.remote_prefix)

    @property
    def declared(self) -> ArchiveDeclaration:
        if self.declaration is None:
            raise ArchiveError(
                self.where, "a publish step ran before hash_local", "This is a bug in the table."
            )
        return self.declaration
