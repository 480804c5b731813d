"""The data of ``statecraft inspect``: what is on disk in a checkpoints layout, read through
the checkpoint catalog (:func:`~statecraft.checkpoint.kernel.catalog.scan`), the artifact catalog
(:mod:`.artifacts`) and the layout's RUN_TS rule
(:func:`~statecraft.checkpoint.kernel.layout.list_attempts`), so a checkpoint shown ``committed``
(or in a validation stage) is one resume (at that verification level) would accept, and
"resume=auto would" is decided by resume's own rules.

This module finds what PATH is (an output root, a job, an attempt, a checkpoints or artifacts
dir, one iteration or artifact) and assembles the attempts; the report of each
``checkpoints/`` dir is :mod:`.checkpoints`'s."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from statecraft.checkpoint.kernel.catalog import scan
from statecraft.checkpoint.kernel.layout import (
    ARTIFACTS_DIR,
    CHECKPOINTS_DIR,
    LATEST_POINTER,
    iter_dirname,
    list_attempts,
    newest_attempt,
    parse_iter_dirname,
)
from statecraft.checkpoint.resume.eval_load import find_runs
from statecraft.checkpoint.resume.rules import artifact_source_refusal
from statecraft.cli.inspect.artifacts import artifacts_of, artifacts_report, auto_record
from statecraft.cli.inspect.checkpoints import COMMITTED, CORRUPT, PARTIAL, checkpoints_report
from statecraft.cli.inspect.disk import FS as _FS
from statecraft.cli.inspect.disk import is_dir
from statecraft.cli.inspect.units import units_report
from statecraft.errors import InspectError
from statecraft.storage.local import LocalStore

__all__ = ["COMMAND", "COMMITTED", "CORRUPT", "PARTIAL", "InspectError", "inspect_path"]

COMMAND = "inspect"


def _attempt_entry(
    run_dir: Path,
    run_ts: str,
    level: str,
    *,
    legacy: bool,
    checkpoints_dir: Path | None = None,
    only: int | None = None,
    only_artifact: int | None = None,
) -> dict[str, Any]:
    """One attempt's record: its artifacts and the report of its checkpoints dir
    (``checkpoints_dir``, default ``run_dir/checkpoints``; only iteration ``only``; none when
    ``only_artifact`` names the one artifact shown)."""
    artifacts = artifacts_of(run_dir, level)
    where = checkpoints_dir or run_dir / CHECKPOINTS_DIR
    checkpoints = None
    if only_artifact is None and is_dir(where):
        checkpoints = checkpoints_report(where, level, artifacts, only=only)
    return {
        "run_ts": run_ts,
        "legacy": legacy,
        "path": str(run_dir.resolve()),
        "has_artifacts": is_dir(run_dir / ARTIFACTS_DIR),
        "artifacts": artifacts_report(artifacts, only=only_artifact),
        "checkpoints": checkpoints,
    }


def _nested_runs(target: Path, level: str) -> list[dict[str, Any]]:
    """The runs of every output root directly under ``target`` (``<target>/<root>/<project>/
    <group>/<name>``), each named ``<root>/<project>/<group>/<name>``."""
    out = []
    for name in sorted(_FS.listdir(str(target))):
        root = target / name
        if is_dir(root):
            for job in find_runs(root, filesystem=_FS):
                record = _run_report(root, job, level)
                record["run"] = f"{name}/{record['run']}"
                out.append(record)
    return out


def _units_data(target: Path, level: str, units: dict[str, Any]) -> dict[str, Any]:
    """The data of a PATH holding framework checkpoints (:mod:`.units`)."""
    return {
        "path": str(target),
        "kind": "units",
        "verify_level": level,
        "attempts": [],
        "adopted_attempt": None,
        "adoption_reason": None,
        "resume_auto": None,
        "explicit_resume": None,
        "runs": [],
        "units": units,
    }


def _looks_like_checkpoints(path: Path) -> bool:
    if path.name == CHECKPOINTS_DIR or _FS.stat(str(path / LATEST_POINTER)) is not None:
        return True
    return any(
        parse_iter_dirname(name) is not None and is_dir(path / name)
        for name in _FS.listdir(str(path))
    )


def _run_report(root: Path, job: Path, level: str) -> dict[str, Any]:
    """One run under an output root: its identity, attempts, and the newest committed
    iteration and latest pointer of the attempt ``resume=auto`` adopts."""
    project, group, name = job.relative_to(root).parts
    attempts = list_attempts(job, filesystem=_FS)
    legacy = is_dir(job / CHECKPOINTS_DIR)
    adopted = job if legacy else job / str(newest_attempt(job, filesystem=_FS))
    record: dict[str, Any] = {
        "run": f"{project}/{group}/{name}",
        "project": project,
        "group": group,
        "name": name,
        "path": str(job),
        "attempts": len(attempts) + int(legacy),
        "adopted_attempt": str(adopted),
        "newest_committed": None,
        "newest_committed_iteration": None,
        "latest": None,
        "latest_status": "missing",
    }
    if not is_dir(adopted / CHECKPOINTS_DIR):
        return record
    catalog = scan(
        LocalStore(str((adopted / CHECKPOINTS_DIR).resolve()), fs=_FS),
        level=level,
        keep_payloads=False,
    )
    chosen = catalog.pick().chosen
    if chosen is not None:
        record["newest_committed"] = chosen.name
        record["newest_committed_iteration"] = chosen.iteration
    latest = catalog.latest
    record["latest_status"] = latest.state.value
    if latest.iteration is not None:
        record["latest"] = iter_dirname(latest.iteration)
    return record


def _valid_run_ts(path: Path) -> bool:
    """``path`` is named like an attempt (the layout's own RUN_TS rule)."""
    return path.name in list_attempts(path.parent, filesystem=_FS)


def inspect_path(path: str | os.PathLike[str], *, verify: bool = False) -> dict[str, Any]:
    """Describe the checkpoints layout at ``path`` (see the module doc). Reads only.

    Returns:
        ``{"path", "kind", "verify_level", "attempts", "adopted_attempt", "adoption_reason",
        "resume_auto", "explicit_resume", "runs"}``. ``kind`` is ``root``, ``job``, ``attempt``,
        ``checkpoints`` or ``iteration``. For an output root (``root``: a directory holding
        ``<project>/<group>/<name>`` runs) ``runs`` lists each run (``run``, ``project``, ``group``,
        ``name``, ``path``, ``attempts``, ``adopted_attempt``, ``newest_committed`` /
        ``newest_committed_iteration`` in the attempt ``resume=auto`` adopts, ``latest`` /
        ``latest_status`` of its pointer) and ``attempts`` is empty; for every other kind ``runs``
        is empty. Each attempt (``run_ts``, ``legacy``, ``path``, ``has_artifacts``) holds its
        ``artifacts`` (:func:`~.artifacts.artifacts_report`, ``None`` without
        ``checkpoint_artifacts/``) and its ``checkpoints`` report — ``iterations`` newest first,
        each with ``kind`` (``checkpoint``), ``state``, ``stage`` (the validation stage of an
        adoptable one, else ``None``), ``reason``, ``metrics``, ``notes``, ``files`` (``size``
        on disk, ``recorded_size`` in the manifest), ``total_bytes``, ``policy``, ``kept_by``,
        ``retention_action`` (:func:`~.retention.retention_fields`); ``retention`` (the last
        pass, :func:`~.retention.decision_report`); ``latest`` (``status``:
        ok / missing / garbage / dangling); ``total_bytes``; ``auto``
        (:func:`~.artifacts.auto_record`: ``action`` adopt / fresh / refuse, ``would``,
        ``pick``, ``iteration``, ``stage``, ``reason``, ``passed_over``, ``checkpoint``,
        ``artifact``) — or ``None`` when the attempt has no ``checkpoints/`` yet.
        ``resume_auto`` is the adopted attempt's ``auto``; for an ``iteration`` or ``artifact``
        PATH it is ``None`` and ``explicit_resume`` says whether ``resume=PATH`` would load it.
        ``kind`` is also ``artifacts`` (a ``checkpoint_artifacts/`` PATH: its attempt) or
        ``artifact`` (one artifact).

    Example:
        >>> inspect_path("out/proj/group/name")["resume_auto"]["pick"]  # doctest: +SKIP
        'iter_000000008'

    Raises:
        InspectError: ``path`` does not exist, is not a directory, or holds no checkpoints
            layout.
    """
    level = "digest" if verify else "size"
    target = Path(path).expanduser()
    found = _FS.stat(str(target.absolute()))
    if found is None:
        raise InspectError(
            f"{target}: no such file or directory; point inspect at a job dir "
            "(<root>/<project>/<group>/<name>), an attempt, a checkpoints/ dir "
            "or an iter_* dir"
        )
    if not found.is_dir:
        units = units_report(target.absolute(), verify=verify)
        if units is not None:
            return _units_data(target.absolute(), level, units)
        raise InspectError(
            f"{target}: is a file, not a directory; point inspect at a job dir, "
            "an attempt, a checkpoints/ dir or an iter_* dir"
        )
    target = target.resolve()
    data: dict[str, Any] = {
        "path": str(target),
        "kind": "",
        "verify_level": level,
        "attempts": [],
        "adopted_attempt": None,
        "adoption_reason": None,
        "resume_auto": None,
        "explicit_resume": None,
        "runs": [],
    }
    iteration = parse_iter_dirname(target.name)
    if iteration is not None and target.parent.name == ARTIFACTS_DIR:
        return _artifact_path(data, target, iteration, level)
    if iteration is not None:
        data["kind"] = "iteration"
        parent_run = target.parent.parent
        run_ts = parent_run.name if _valid_run_ts(parent_run) else ""
        attempt = _attempt_entry(
            parent_run, run_ts, level, legacy=not run_ts, checkpoints_dir=target.parent,
            only=iteration,
        )  # fmt: skip
        data["attempts"] = [attempt]
        data["explicit_resume"] = attempt["checkpoints"].get("explicit")
        return data
    if target.name == ARTIFACTS_DIR or _looks_like_checkpoints(target):
        run_dir = target.parent
        run_ts = run_dir.name if _valid_run_ts(run_dir) else ""
        artifacts = target.name == ARTIFACTS_DIR
        data["kind"] = "artifacts" if artifacts else "checkpoints"
        data["attempts"] = [
            _attempt_entry(
                run_dir, run_ts, level, legacy=not run_ts,
                checkpoints_dir=None if artifacts else target,
            )
        ]  # fmt: skip
        data["adopted_attempt"] = str(run_dir)
        data["adoption_reason"] = f"PATH is the {target.name} dir of {run_dir.name}"
    elif _valid_run_ts(target):
        data["kind"] = "attempt"
        data["attempts"] = [_attempt_entry(target, target.name, level, legacy=False)]
        data["adopted_attempt"] = str(target)
        data["adoption_reason"] = "PATH is this attempt"
    else:
        attempts = list_attempts(target, filesystem=_FS)
        legacy = is_dir(target / CHECKPOINTS_DIR)
        runs = [] if attempts or legacy else find_runs(target, filesystem=_FS)
        if runs:
            data["kind"] = "root"
            data["runs"] = [_run_report(target, job, level) for job in runs]
            return data
        nested = [] if attempts or legacy else _nested_runs(target, level)
        if nested:  # a directory of output roots (the demo's --out: one root per run)
            data["kind"] = "root"
            data["runs"] = nested
            return data
        units = None if attempts or legacy else units_report(target, verify=verify)
        if units is not None:
            return _units_data(target, level, units)
        if not attempts and not legacy:
            raise InspectError(
                f"{target}: holds no checkpoints layout (no run <project>/<group>/<name>, no "
                "<RUN_TS>/ attempt, no checkpoints/, no iter_* dir); point inspect at an output "
                "root or at <root>/<project>/<group>/<name> or below"
            )
        data["kind"] = "job"
        entries = [_attempt_entry(target / ts, ts, level, legacy=False) for ts in attempts]
        if legacy:  # resolve_run_attempt: a legacy flat layout wins over any attempt dirs
            entries.insert(0, _attempt_entry(target, "", level, legacy=True))
            data["adopted_attempt"] = str(target)
            data["adoption_reason"] = f"legacy flat layout: {target / CHECKPOINTS_DIR} exists"
        else:
            newest = newest_attempt(
                target, filesystem=_FS
            )  # the layout's rule, as resume=auto applies it
            data["adopted_attempt"] = str(target / str(newest))
            data["adoption_reason"] = f"resume=auto adopts the newest attempt {newest}"
        data["attempts"] = entries
    adopted = next(a for a in data["attempts"] if a["path"] == data["adopted_attempt"])
    checkpoints = adopted["checkpoints"]
    data["resume_auto"] = (
        checkpoints["auto"]
        if checkpoints
        else auto_record(None, artifacts_of(Path(adopted["path"]), level), level)
    )
    return data


def _artifact_path(
    data: dict[str, Any], target: Path, iteration: int, level: str
) -> dict[str, Any]:
    """PATH is one ``checkpoint_artifacts/iter_*``: that artifact, and why ``resume=PATH``
    is refused (the resume rule itself)."""
    run_dir = target.parent.parent
    run_ts = run_dir.name if _valid_run_ts(run_dir) else ""
    data["kind"] = "artifact"
    data["attempts"] = [
        _attempt_entry(run_dir, run_ts, level, legacy=not run_ts, only_artifact=iteration)
    ]
    newest = artifacts_of(run_dir, "manifest").newest_with_manifest()
    refusal = artifact_source_refusal(str(target), _FS, newest)
    data["explicit_resume"] = {
        "accepted": False,
        "reason": f"resume={target} would be refused: {refusal}",
    }
    return data
