"""What a catalog reader points at, resolved to checkpoints directories, newest attempt first.

A source is an output root holding exactly one run, a job dir ``<root>/<project>/<group>/
<name>`` (every attempt, and a legacy flat ``checkpoints/``), one attempt dir ``.../<RUN_TS>``
or a ``checkpoints/`` dir: the kinds :func:`statecraft.load_weights` takes, less a single
``iter_*`` (list its ``checkpoints/`` instead) and the partial artifacts (never listed: they
are not checkpoints).
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs

from statecraft.checkpoint.kernel.layout import CHECKPOINTS_DIR, list_attempts, parse_iter_dirname
from statecraft.errors import CheckpointSourceError
from statecraft.storage.filesystem import OsFilesystem

__all__ = ["CheckpointsDir", "resolve"]

_FS = OsFilesystem()
_KINDS = (
    "an output root with one run, a run dir <root>/<project>/<group>/<name>, an attempt dir "
    "<run dir>/<RUN_TS>, a checkpoints/ dir, a Lightning ModelCheckpoint dirpath or a Hugging "
    "Face output_dir holding a committed checkpoint"
)


@attrs.frozen
class CheckpointsDir:
    """One checkpoints directory to list, and the attempt it belongs to (``None``: a legacy
    flat ``checkpoints/``, or a ``checkpoints/`` dir given directly outside an attempt)."""

    path: Path
    attempt: str | None


def _is_dir(path: Path) -> bool:
    stat = _FS.stat(str(path))
    return stat is not None and stat.is_dir and not stat.link


def _is_job_dir(path: Path) -> bool:
    return _is_dir(path / CHECKPOINTS_DIR) or bool(list_attempts(path, filesystem=_FS))


def _runs_under(root: Path) -> list[Path]:
    def subdirs(path: Path) -> list[Path]:
        return [path / n for n in sorted(_FS.listdir(str(path))) if _is_dir(path / n)]

    return [
        job
        for project in subdirs(root)
        for group in subdirs(project)
        for job in subdirs(group)
        if _is_job_dir(job)
    ]


def _of_job(job: Path) -> list[CheckpointsDir]:
    found = [
        CheckpointsDir(job / ts / CHECKPOINTS_DIR, ts)
        for ts in reversed(list_attempts(job, filesystem=_FS))
        if _is_dir(job / ts / CHECKPOINTS_DIR)
    ]
    if _is_dir(job / CHECKPOINTS_DIR):  # a legacy flat checkpoints/ counts as the newest
        found.insert(0, CheckpointsDir(job / CHECKPOINTS_DIR, None))
    return found


def resolve(source: str | os.PathLike[str]) -> list[CheckpointsDir]:
    """The checkpoints directories under ``source``, newest attempt first (see the module
    docstring); an attempt without a ``checkpoints/`` dir has none.

    Raises:
        CheckpointSourceError: ``source`` is not an existing directory, is an ``iter_*`` dir,
            or holds no run or several runs (each named, with the fix).
    """
    if not isinstance(source, str | os.PathLike):
        raise CheckpointSourceError(
            f"checkpoints(source): expected a path ({_KINDS}), got {type(source).__name__}",
            source=repr(source),
            runs=[],
        )
    given = os.fspath(source)
    path = Path(given).expanduser().absolute()
    if not _is_dir(path):
        raise CheckpointSourceError(
            f"{given}: no such directory; point at {_KINDS}", source=given, runs=[]
        )
    if parse_iter_dirname(path.name) is not None:
        raise CheckpointSourceError(
            f"{given}: is one checkpoint; point at its checkpoints/ dir ({path.parent}) to "
            "list them, or load it directly with statecraft.load_weights",
            source=given,
            runs=[],
        )
    if path.name == CHECKPOINTS_DIR:
        attempts = list_attempts(path.parent.parent, filesystem=_FS)
        attempt = path.parent.name if path.parent.name in attempts else None
        return [CheckpointsDir(path, attempt)]
    if path.name in list_attempts(path.parent, filesystem=_FS):  # an attempt dir
        inner = path / CHECKPOINTS_DIR
        return [CheckpointsDir(inner, path.name)] if _is_dir(inner) else []
    if _is_job_dir(path):
        return _of_job(path)
    runs = _runs_under(path)
    if len(runs) != 1:
        listed = ", ".join(str(r.relative_to(path)) for r in runs)
        raise CheckpointSourceError(
            f"{given}: holds {'no run' if not runs else f'{len(runs)} runs ({listed})'}; "
            f"point at one of: {_KINDS}" + (f", e.g. {runs[0]}" if runs else ""),
            source=given,
            runs=[str(r) for r in runs],
        )
    return _of_job(runs[0])
