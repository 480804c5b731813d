"""Errors of the stores: a failed or conflicting write, an object-store request (failed,
outcome unknown, or refused by its condition), a full disk, a name that is not a regular file,
unusable object-store credentials."""

from __future__ import annotations

from statecraft.errors._base import StatecraftError

__all__ = [
    "CredentialsError",
    "DiskFullError",
    "ObjectRequestError",
    "PreconditionFailed",
    "SpecialFileError",
    "StoreConflictError",
    "StoreError",
]


class StoreError(StatecraftError, OSError):
    """A store operation failed; the store's durability contract still holds."""

    code = "store_error"


class StoreConflictError(StoreError, FileExistsError):
    """An exclusive create found the name already taken; nothing was overwritten."""

    code = "store_conflict"


class ObjectRequestError(StoreError):
    """An object-store request failed or its outcome is unknown (the response was lost); look
    before assuming either."""

    code = "object_request"


class PreconditionFailed(StoreConflictError):
    """A conditional request (``If-None-Match: *`` / ``If-Match``) was refused (HTTP 412)."""

    code = "precondition_failed"


class DiskFullError(StoreError):
    """The disk filled while a file was written (``ENOSPC``); nothing was published, older
    checkpoints and ``latest_checkpoint.txt`` are untouched.

    Fields: ``path`` (the file being written), ``bytes_needed`` (what the file was expected to
    take, at least what was written so far plus what remained), ``bytes_free`` (free bytes
    on that filesystem after the failure; ``None`` when unknown).
    """

    code = "disk_full"
    path: str
    bytes_needed: int
    bytes_free: int | None
    checkpoint_bytes: int | None

    def __init__(
        self,
        path: str,
        *,
        bytes_needed: int,
        bytes_free: int | None,
        checkpoint_bytes: int | None = None,
    ) -> None:
        free = "unknown" if bytes_free is None else f"{bytes_free:,}"
        whole = (
            f" (the whole checkpoint needs at least {checkpoint_bytes:,} bytes)"
            if checkpoint_bytes is not None
            else ""
        )
        super().__init__(
            f"disk full: writing {path} needed at least {bytes_needed:,} bytes{whole} but only "
            f"{free} bytes are free on its filesystem; nothing was published and older "
            "checkpoints are intact. Free space on that disk, keep fewer checkpoints (the "
            "retention knobs keep_optim_last / keep_model_last), or point output_root at a "
            "larger disk, then "
            "save again",
            path=path,
            bytes_needed=bytes_needed,
            bytes_free=bytes_free,
            checkpoint_bytes=checkpoint_bytes,
        )


class SpecialFileError(StoreError, ValueError):
    """A name where statecraft expects a regular file holds something else (a FIFO, a symbolic
    link, a directory, a device, a socket) or a control file larger than its bound; it was not
    read. Also a ``ValueError``: the content at that name is unusable, like a garbled file.

    Fields: ``path``, ``kind`` (``"fifo"``, ``"symlink"``, ``"directory"``, ``"device"``,
    ``"socket"``, ``"too large"``).
    """

    code = "not_a_regular_file"
    path: str
    kind: str

    def __init__(self, path: str, kind: str, detail: str = "") -> None:
        what = {
            "fifo": "is a FIFO (named pipe), not a regular file",
            "symlink": "is a symbolic link (statecraft never follows links to checkpoint files)",
            "directory": "is a directory, not a regular file",
            "device": "is a device, not a regular file",
            "socket": "is a socket, not a regular file",
        }.get(kind, f"is not a regular file ({kind})")
        if detail:
            what = f"{what}; {detail}"
        super().__init__(
            f"{path} {what}. It was not read and the checkpoint holding it counts as damaged. "
            "Replace it with the real file or move the checkpoint aside",
            path=path,
            kind=kind,
        )


class CredentialsError(StatecraftError, ValueError):
    """An object-store credentials file is missing, unreadable or malformed. The message names
    the file and the problem and never echoes a secret. Fields: ``path``, ``problem``."""

    code = "credentials_invalid"
