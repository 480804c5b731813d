"""Errors of the archive transactions (upload, publish, fetch, prune-verified, ``objects``)."""

from __future__ import annotations

from statecraft.errors._checkpoint import CheckpointError

__all__ = [
    "ArchiveError",
    "ArchiveMismatchError",
    "FetchDestinationExistsError",
    "UploadRefusedError",
]


class ArchiveError(CheckpointError):
    """An archive transaction (upload, publish, fetch, prune-verified, ``objects``) could not
    finish: a remote object is missing or does not match, a record is malformed, or the
    destination refused. Nothing local was deleted or overwritten; the message says what was
    found, what was expected and what to do. Fields: ``path`` (the local or ``s3://`` culprit),
    ``problem``."""

    code = "archive_failed"

    def __init__(self, path: str, problem: str, what_to_do: str = "") -> None:
        tail = f" {what_to_do}" if what_to_do else ""
        super().__init__(f"{path}: {problem}.{tail}", path=path, problem=problem)


class ArchiveMismatchError(ArchiveError, FileExistsError):
    """A publish was refused before any payload was touched: the destination already holds an
    immutable declaration (or manifest) of a different inventory. Fields as
    :class:`ArchiveError`."""

    code = "archive_mismatch"


class UploadRefusedError(ArchiveError):
    """The archive upload refused an iteration before any request: it is not committed, or is
    weights-only, invalidated, or evaluation/publication-pending. Nothing was touched. Fields
    as :class:`ArchiveError`."""

    code = "upload_refused"


class FetchDestinationExistsError(ArchiveError, FileExistsError):
    """``archive fetch`` refused: the destination directory already exists. A fetch never
    overwrites or merges into a local directory; nothing was changed there. Fields as
    :class:`ArchiveError`."""

    code = "fetch_destination_exists"
