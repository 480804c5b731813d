"""Directory layout, checkpoint names and the run attempt (RUN_TS).

::

    <output_root>/<project>/<group>/<name>/<RUN_TS>/checkpoints/
      iter_000000100/
        model.pt  optim.pt  trainer.pt  [data.pt]  .posttrain-manifest.json
      latest_checkpoint.txt      # names the newest committed iteration ("iter_000000100\\n")

RUN_TS (``YYYYmmddHHMMSS``) is minted at the first launch of an attempt and reused by every
resumed window; ``resume=off`` mints a sibling attempt and never overwrites; a legacy job whose
``<name>/checkpoints/`` exists keeps that flat layout. Under ``torch.distributed`` rank 0
resolves and broadcasts (:func:`~statecraft.parallel.rank0.on_rank_zero`).

Every directory operation goes through a :class:`~statecraft.storage.filesystem.Filesystem`
(the facade's, by default the real OS), so fault injection and the crash harness cover attempt
creation too. :func:`list_attempts` and :func:`newest_attempt` are the one RUN_TS rule; the
facade, resume and ``statecraft inspect`` all use them.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path

import attrs

from statecraft.errors import ConfigError, ConfigIssue, ResumeError
from statecraft.parallel.collectives import Collective, SingleProcess
from statecraft.parallel.rank0 import on_rank_zero
from statecraft.storage.filesystem import Filesystem, OsFilesystem

__all__ = [
    "ARTIFACT_MANIFEST_NAME",
    "LATEST_POINTER",
    "MANIFEST_NAME",
    "RunAttempt",
    "RunIdentity",
    "as_run_identity",
    "format_latest",
    "iter_dirname",
    "list_attempts",
    "newest_attempt",
    "parse_iter_dirname",
    "parse_latest",
    "resolve_run_attempt",
]

LATEST_POINTER = "latest_checkpoint.txt"
MANIFEST_NAME = ".posttrain-manifest.json"
CHECKPOINTS_DIR = "checkpoints"
ARTIFACTS_DIR = "checkpoint_artifacts"
#: the commit record of a partial artifact, written last (checkpoint/kernel/artifact_manifest.py)
ARTIFACT_MANIFEST_NAME = ".posttrain-checkpoint-artifact.json"
_ITER_RE = re.compile(r"^iter_(\d{9})$")
_RUN_TS_RE = re.compile(r"^\d{14}$")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
log = logging.getLogger("statecraft.layout")


def iter_dirname(iteration: int) -> str:
    """``iter_`` and the iteration in 9 digits.

    Raises:
        ValueError: ``iteration`` is negative, not an int, or does not fit 9 digits.
    """
    if isinstance(iteration, bool) or not isinstance(iteration, int) or not 0 <= iteration < 10**9:
        raise ValueError(f"iteration must be an int in [0, 999999999], got {iteration!r}")
    return f"iter_{iteration:09d}"


def parse_iter_dirname(name: str) -> int | None:
    """The iteration of an ``iter_<9 digits>`` name, ``None`` for any other name."""
    match = _ITER_RE.match(name)
    return int(match.group(1)) if match else None


def format_latest(iteration: int) -> bytes:
    """The bytes of ``latest_checkpoint.txt`` naming ``iteration``."""
    return f"{iter_dirname(iteration)}\n".encode()


def parse_latest(data: bytes) -> int:
    """The iteration named by ``latest_checkpoint.txt`` content.

    Raises:
        ValueError: the content is not exactly one ``iter_<9 digits>`` line.
    """
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError(f"not ASCII text: {data[:40]!r}") from None
    iteration = parse_iter_dirname(text.strip())
    if iteration is None or text.strip() != text.rstrip("\n"):
        raise ValueError(f"expected one line 'iter_<9 digits>', got {text[:60]!r}")
    return iteration


@attrs.frozen
class RunIdentity:
    """The job a checkpoint belongs to: ``<project>/<group>/<name>``.

    Raises:
        ConfigError: a part is empty or not a plain path segment.
    """

    project: str
    group: str
    name: str

    def __attrs_post_init__(self) -> None:
        issues = [
            ConfigIssue(f"run.{field}", value, "a plain name: letters, digits, '.', '_', '-'")
            for field, value in (
                ("project", self.project),
                ("group", self.group),
                ("name", self.name),
            )
            if not isinstance(value, str) or not _NAME_RE.match(value)
        ]
        if issues:
            raise ConfigError(issues, source="RunIdentity")

    @classmethod
    def named(cls, name: str, *, project: str = "default", group: str = "default") -> RunIdentity:
        """The identity of a run known by one name: ``default/default/<name>`` unless
        ``project`` / ``group`` are given (for scripts that only have an output directory).

        Raises:
            ConfigError: a part is empty or not a plain path segment.

        Example:
            >>> RunIdentity.named("mlp")
            RunIdentity(project='default', group='default', name='mlp')
        """
        return cls(project, group, name)

    def job_dir(self, output_root: Path) -> Path:
        return Path(output_root) / self.project / self.group / self.name


def as_run_identity(run: object, *, source: str = "Checkpointer(run=...)") -> RunIdentity:
    """``run`` as a :class:`RunIdentity`: an identity is returned as it is, a plain string is
    one run name (:meth:`RunIdentity.named`).

    Raises:
        ConfigError: ``run`` is neither (naming ``run`` and what it accepts), or the name is
            not a plain path segment.
    """
    if isinstance(run, RunIdentity):
        return run
    if isinstance(run, str):
        return RunIdentity.named(run)
    raise ConfigError(
        [
            ConfigIssue(
                "run",
                run,
                "a RunIdentity(project, group, name) or one run name as a str "
                "(RunIdentity.named: project and group default to 'default')",
            )
        ],
        source=source,
    )


@attrs.frozen
class RunAttempt:
    """The resolved attempt directory of this launch.

    Attributes:
        run_dir: ``<job>/<RUN_TS>`` (or ``<job>`` for a legacy flat layout).
        run_ts: the attempt's RUN_TS (``""`` for the legacy layout).
        legacy: the job uses the flat ``<name>/checkpoints/`` layout.
        minted: this launch created the attempt (fresh start).
        reason: one line saying why this attempt was chosen.
    """

    run_dir: Path
    run_ts: str
    legacy: bool
    minted: bool
    reason: str

    @property
    def checkpoints_dir(self) -> Path:
        return self.run_dir / CHECKPOINTS_DIR

    @property
    def artifacts_dir(self) -> Path:
        return self.run_dir / ARTIFACTS_DIR


def _valid_run_ts(value: str) -> bool:
    if not _RUN_TS_RE.match(value):
        return False
    try:
        dt.datetime.strptime(value, "%Y%m%d%H%M%S")
    except ValueError:
        return False
    return True


def _is_dir(fs: Filesystem, path: Path) -> bool:
    stat = fs.stat(str(path))
    return stat is not None and stat.is_dir


def list_attempts(job_dir: Path, *, filesystem: Filesystem | None = None) -> list[str]:
    """RUN_TS names of the attempts under ``job_dir``, oldest first (the one RUN_TS rule:
    a directory named ``YYYYmmddHHMMSS`` that is a valid timestamp)."""
    fs = filesystem or OsFilesystem()
    if not _is_dir(fs, job_dir):
        return []
    return [
        name
        for name in sorted(fs.listdir(str(job_dir)))
        if _valid_run_ts(name) and _is_dir(fs, job_dir / name)
    ]


def newest_attempt(job_dir: Path, *, filesystem: Filesystem | None = None) -> str | None:
    """The RUN_TS ``resume=auto`` adopts: the newest attempt, or ``None`` when there is none."""
    attempts = list_attempts(job_dir, filesystem=filesystem)
    return attempts[-1] if attempts else None


def _mkdir_durable(fs: Filesystem, path: Path) -> bool:
    """Create ``path`` (parents too), fsyncing each parent; False if it already existed."""
    missing = []
    current = path
    while fs.stat(str(current)) is None:
        missing.append(current)
        current = current.parent
    created = False
    for directory in reversed(missing):
        try:
            fs.mkdir(str(directory))
        except FileExistsError:
            if directory == path:
                return False
            continue
        created = created or directory == path
        fs.fsync_dir(str(directory.parent))
    return created


def _mint(fs: Filesystem, job_dir: Path, now: Callable[[], dt.datetime]) -> str:
    """A new RUN_TS no attempt of the job uses, created durably (a sibling never collides)."""
    stamp = now().replace(microsecond=0)
    for _ in range(3600):
        run_ts = stamp.strftime("%Y%m%d%H%M%S")
        if _mkdir_durable(fs, job_dir / run_ts):
            return run_ts
        stamp += dt.timedelta(seconds=1)
    raise ResumeError(f"{job_dir}: could not mint a free RUN_TS near {stamp}; clean up the job dir")


def _resolve_on_rank_zero(
    output_root: Path,
    run: RunIdentity,
    *,
    resume: str,
    run_ts: str,
    now: Callable[[], dt.datetime],
    fs: Filesystem,
) -> RunAttempt:
    job_dir = run.job_dir(output_root)
    if run_ts:
        if not _valid_run_ts(run_ts):
            raise ConfigError([ConfigIssue("run_ts", run_ts, "YYYYmmddHHMMSS or empty")])
        created = _mkdir_durable(fs, job_dir / run_ts)
        return RunAttempt(
            job_dir / run_ts, run_ts, False, created, f"run_ts={run_ts} pinned by config"
        )
    if _is_dir(fs, job_dir / CHECKPOINTS_DIR):
        return RunAttempt(
            job_dir, "", True, False, f"legacy flat layout: {job_dir / CHECKPOINTS_DIR} exists"
        )
    latest = newest_attempt(job_dir, filesystem=fs)
    if resume == "auto" and latest is not None:
        return RunAttempt(
            job_dir / latest,
            latest,
            False,
            False,
            f"resume=auto adopts the newest attempt {latest}",
        )
    minted = _mint(fs, job_dir, now)
    why = {
        "auto": "resume=auto found no attempt: minted a new one",
        "off": "resume=off: minted a sibling attempt (older attempts are kept)",
    }.get(resume, f"resume={resume}: continuing in a new sibling attempt")
    return RunAttempt(job_dir / minted, minted, False, True, why)


def resolve_run_attempt(
    output_root: str | os.PathLike[str],
    run: RunIdentity,
    *,
    resume: str,
    run_ts: str = "",
    collective: Collective | None = None,
    now: Callable[[], dt.datetime] = dt.datetime.now,
    filesystem: Filesystem | None = None,
) -> RunAttempt:
    """Resolve (rank 0) and broadcast the attempt directory of this launch.

    Rules: a pinned ``run_ts`` wins; a legacy ``<name>/checkpoints/`` keeps the flat layout;
    ``resume=auto`` adopts the newest existing attempt or mints one; ``resume=off`` always
    mints a sibling; an explicit resume path continues in a newly minted sibling so that
    nothing the source attempt committed can be overwritten or collide with a replayed step.

    Args:
        filesystem: what directories are listed and created through (default: the real OS);
            the facade passes its own so fault injection covers attempt creation.

    Raises:
        ConfigError: ``run_ts`` is malformed.
        OSError: a directory could not be created (on every rank).
    """
    collective = collective or SingleProcess()
    fs = filesystem or OsFilesystem()
    attempt = on_rank_zero(
        collective,
        lambda: _resolve_on_rank_zero(
            Path(output_root), run, resume=resume, run_ts=run_ts, now=now, fs=fs
        ),
    )
    log.info("run attempt %s (%s)", attempt.run_dir, attempt.reason)
    return attempt
