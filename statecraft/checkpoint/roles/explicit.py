"""An explicit multi-role resume source (``resume=<path>``): a committed boundary directory
``.../role_checkpoints/iter_<9 digits>`` (of this attempt or another), resolved and proven with
the same verdict ``resume=auto`` uses (:func:`~statecraft.checkpoint.roles.reading.
judge_boundary`: ``_SUCCESS``, every role unit's manifest and files by size and digest, every
role's counter). Any problem fails the resume, naming the path and the fix: an explicit source
never falls back and never trains from scratch. Reads only.
"""

from __future__ import annotations

from pathlib import Path

from statecraft.checkpoint.roles.layout import ROLES_DIR, iter_dirname, parse_iter_dirname
from statecraft.checkpoint.roles.reading import BoundaryVerdict, judge_boundary
from statecraft.errors import CheckpointCorruptError, ResumeError
from statecraft.storage.base import Store
from statecraft.storage.filesystem import Filesystem
from statecraft.storage.local import LocalStore

__all__ = ["verify_explicit_boundary"]

_SHAPE = f"a committed multi-role boundary directory <run>/{ROLES_DIR}/iter_<9 digits>"


def verify_explicit_boundary(path_text: str, fs: Filesystem) -> tuple[Store, BoundaryVerdict]:
    """The roles store holding the boundary ``path_text`` and its committed verdict.

    Raises:
        ResumeError: the path does not exist, is a file, is not an ``iter_<9 digits>``
            directory under ``role_checkpoints/`` (a single-role checkpoint included), or is
            a partial boundary (no ``_SUCCESS``).
        CheckpointCorruptError: the boundary is damaged (its marker, a role unit, a file or a
            counter does not verify).
    """
    path = Path(path_text).expanduser().absolute()
    stat = fs.stat(str(path))
    if stat is None:
        raise ResumeError(
            f"resume={path_text}: no such boundary (expected {_SHAPE}). Refusing to train from "
            "scratch; fix the path, or use resume=auto",
            path=str(path),
        )
    iteration = parse_iter_dirname(path.name) if stat.is_dir else None
    if iteration is None or path.parent.name != ROLES_DIR:
        what = "a file" if not stat.is_dir else f"the directory {path.name!r} of {path.parent}"
        raise ResumeError(
            f"resume={path_text}: {what} is not {_SHAPE} (a multi-role run resumes from a "
            f"boundary, never from a single-role checkpoints/iter_* directory); point resume at "
            f"one, e.g. .../{ROLES_DIR}/{iter_dirname(1)}, or use resume=auto",
            path=str(path),
        )
    store = LocalStore(str(path.parent.resolve()), fs=fs)
    verdict = judge_boundary(store, iteration)
    if verdict.state == "partial":
        raise ResumeError(
            f"resume={path_text}: the boundary is a partial ({verdict.reason}); it was never "
            "committed and is never loaded. Point resume at a committed boundary, or use "
            "resume=auto",
            path=str(path),
        )
    if verdict.state != "committed":
        raise CheckpointCorruptError(
            str(path), f"the boundary does not verify ({verdict.reason})",
            "point resume at another committed boundary, or use resume=auto",
        )  # fmt: skip
    return store, verdict
