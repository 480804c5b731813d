"""``statecraft inspect PATH``: what is on disk, what state each checkpoint is in, and what
``resume=auto`` would pick. Read-only: it never writes, renames or deletes anything.

PATH may be a job dir (``<root>/<project>/<group>/<name>``), one attempt dir (``.../<RUN_TS>``),
a ``checkpoints/`` dir, or one ``iter_*`` dir. For every checkpoints dir it reports each
``iter_*`` as

- ``committed``: the manifest is valid and the checkpoint verifies (files present with their
  recorded sizes, ``trainer.pt`` well-formed; with ``--verify`` also every SHA-256 digest);
- ``partial``: no manifest — an interrupted save, never adopted;
- ``corrupt``: anything else that fails verification (malformed manifest, missing or resized
  file, malformed ``trainer.pt``; with ``--verify`` also a digest mismatch),

with its files and sizes, what ``latest_checkpoint.txt`` names (or that it is missing, garbage
or dangling), and which iteration ``resume=auto`` would adopt, listing every newer one it passes
over with the reason. Classification is exactly resume's: it calls
:func:`~statecraft.checkpoint.transactions.resume.verify_checkpoint` (level ``"digest"``
with ``--verify``, ``"size"`` without) on
:func:`~statecraft.checkpoint.transactions.resume.list_iterations`, so a checkpoint shown
``committed`` is one resume (at that verification level) would accept.

Exit status: 0 when PATH holds a checkpoints layout (whatever state the checkpoints are in);
1 when PATH does not exist or holds no checkpoints layout. ``--json`` prints the same data in
the CLI's versioned envelope (see :func:`statecraft.cli.envelope.emit`).
"""

from __future__ import annotations

import argparse
import os
import posixpath
from pathlib import Path
from typing import Any, BinaryIO, NoReturn

from statecraft.checkpoint.layout import (
    ARTIFACTS_DIR,
    CHECKPOINTS_DIR,
    LATEST_POINTER,
    MANIFEST_NAME,
    iter_dirname,
    list_attempts,
    parse_iter_dirname,
    parse_latest,
)
from statecraft.checkpoint.manifest import Manifest
from statecraft.checkpoint.transactions.resume import list_iterations, verify_checkpoint
from statecraft.checkpoint.transactions.save import read_manifest
from statecraft.cli.envelope import emit
from statecraft.errors import CheckpointError, StatecraftError, StoreError
from statecraft.storage.filesystem import FileStat, OsFilesystem
from statecraft.storage.local import LocalStore

__all__ = ["inspect_path", "render_text", "run_inspect"]

COMMAND = "inspect"
COMMITTED, PARTIAL, CORRUPT = "committed", "partial", "corrupt"


class InspectError(StatecraftError, FileNotFoundError):
    """PATH does not exist or holds no checkpoints layout."""

    code = "no_checkpoints_layout"


class _ReadOnlyFilesystem:
    """The real filesystem with every mutating operation refused: inspect cannot write,
    even by accident through a store method that would."""

    def __init__(self) -> None:
        self._os = OsFilesystem()

    def __repr__(self) -> str:
        return "ReadOnlyFilesystem()"

    def _refuse(self, op: str, path: str) -> NoReturn:
        raise StoreError(f"statecraft inspect is read-only but something tried to {op} {path}")

    def open_write(self, path: str, *, exclusive: bool) -> int:
        self._refuse("open for writing", path)

    def write(self, handle: int, data: bytes | memoryview) -> None:
        self._refuse("write to handle", str(handle))

    def fsync(self, handle: int) -> None:
        self._refuse("fsync handle", str(handle))

    def close(self, handle: int) -> None:
        self._refuse("close handle", str(handle))

    def rename(self, src: str, dst: str) -> None:
        self._refuse("rename onto", dst)

    def link(self, src: str, dst: str) -> None:
        self._refuse("link", dst)

    def unlink(self, path: str) -> None:
        self._refuse("unlink", path)

    def mkdir(self, path: str) -> None:
        self._refuse("mkdir", path)

    def rmdir(self, path: str) -> None:
        self._refuse("rmdir", path)

    def fsync_dir(self, path: str) -> None:
        self._refuse("fsync directory", path)

    def listdir(self, path: str) -> list[str]:
        return self._os.listdir(path)

    def stat(self, path: str) -> FileStat | None:
        return self._os.stat(path)

    def read(self, path: str) -> bytes:
        return self._os.read(path)

    def open_read(self, path: str) -> BinaryIO:
        return self._os.open_read(path)

    def real_path(self, path: str) -> str | None:
        return path


# ------------------------------------------------------------------------------ data
def _files_on_disk(root: Path) -> dict[str, int]:
    """Relative path -> size of every regular file under ``root`` (sorted, recursive)."""
    found: dict[str, int] = {}
    for directory, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            full = Path(directory) / name
            try:
                found[full.relative_to(root).as_posix()] = full.stat().st_size
            except OSError:
                continue
    return dict(sorted(found.items()))


def _iteration_report(store: LocalStore, iteration: int, level: str) -> dict[str, Any]:
    name = iter_dirname(iteration)
    has_manifest = store.stat(f"{name}/{MANIFEST_NAME}") is not None
    reason: str | None = None
    try:
        verify_checkpoint(store, iteration, level=level)
        state = COMMITTED
    except CheckpointError as exc:
        state = CORRUPT if has_manifest else PARTIAL
        reason = str(exc)
    except Exception as exc:  # a reader bug must not hide the other checkpoints
        state = CORRUPT if has_manifest else PARTIAL
        first_line = (str(exc).splitlines() or [""])[0][:200]
        reason = (
            f"{store.describe()}/{name}: verification raised {type(exc).__name__}: {first_line}"
        )
    manifest: Manifest | None = None
    if has_manifest:
        try:
            manifest = read_manifest(store, iteration)
        except (CheckpointError, OSError):
            manifest = None
    on_disk = _files_on_disk(Path(store.abspath(name))) if store.stat(name) else {}
    recorded = dict(manifest.files) if manifest else {}
    files = []
    for file_name in sorted(set(on_disk) | set(recorded)):
        entry = recorded.get(file_name)
        files.append(
            {
                "name": file_name,
                "size": on_disk.get(file_name),
                "recorded_size": entry.size if entry else None,
                "in_manifest": entry is not None,
            }
        )
    return {
        "name": name,
        "iteration": iteration,
        "path": store.abspath(name),
        "state": state,
        "reason": reason,
        "files": files,
        "total_bytes": sum(on_disk.values()),
    }


def _latest_report(store: LocalStore, iterations: list[dict[str, Any]]) -> dict[str, Any]:
    present = {it["iteration"]: it for it in iterations}
    if store.stat(LATEST_POINTER) is None:
        return {
            "status": "missing",
            "names": None,
            "detail": f"no {LATEST_POINTER}; resume selects by verified manifests",
        }
    try:
        named = parse_latest(store.read_bytes(LATEST_POINTER))
    except ValueError as exc:
        return {
            "status": "garbage",
            "names": None,
            "detail": (f"unreadable ({exc}); resume ignores it and selects by verified manifests"),
        }
    name = iter_dirname(named)
    if named not in present:
        return {
            "status": "dangling",
            "names": name,
            "detail": f"names {name}, which does not exist; resume ignores it",
        }
    target = present[named]["state"]
    detail = f"names {name} ({target})"
    newer = [
        it["name"] for it in iterations if it["iteration"] > named and it["state"] == COMMITTED
    ]
    if newer:
        detail += f"; newer committed {', '.join(newer)} not yet named (pointer update pending)"
    return {"status": "ok", "names": name, "detail": detail}


def _auto_pick(iterations: list[dict[str, Any]], level: str) -> dict[str, Any]:
    passed_over = []
    for it in iterations:  # newest first, as resume considers them
        if it["state"] == COMMITTED:
            return {
                "pick": it["name"],
                "iteration": it["iteration"],
                "reason": f"the newest iteration that verifies (verify={level})"
                + (f"; {len(passed_over)} newer passed over" if passed_over else ""),
                "passed_over": passed_over,
            }
        passed_over.append({"name": it["name"], "reason": it["reason"]})
    why = (
        f"no iteration verifies (verify={level}; {len(passed_over)} passed over)"
        if iterations
        else "no iter_* directory exists"
    )
    return {"pick": None, "iteration": None, "reason": why, "passed_over": passed_over}


def _checkpoints_report(path: Path, level: str, *, only: int | None = None) -> dict[str, Any]:
    store = LocalStore(str(path.resolve()), fs=_ReadOnlyFilesystem())
    numbers = list_iterations(store)
    if only is not None:
        numbers = [n for n in numbers if n == only]
    iterations = [_iteration_report(store, n, level) for n in numbers]
    extras = sorted(
        n for n in store.list("") if parse_iter_dirname(n) is None and n != LATEST_POINTER
    )
    report: dict[str, Any] = {
        "path": store.root,
        "latest": _latest_report(store, iterations) if only is None else None,
        "iterations": iterations,
        "other_entries": extras,
        "total_bytes": sum(it["total_bytes"] for it in iterations),
        "auto": _auto_pick(iterations, level) if only is None else None,
        "explicit": None,
    }
    if only is not None and iterations:
        it = iterations[0]
        accepted = it["state"] == COMMITTED
        report["explicit"] = {
            "accepted": accepted,
            "reason": (
                f"resume={it['path']} would load {it['name']} (verify={level})"
                if accepted
                else f"resume={it['path']} would fail (no fallback): {it['reason']}"
            ),
        }
    return report


def _attempt_entry(
    run_dir: Path,
    run_ts: str,
    level: str,
    *,
    legacy: bool,
    checkpoints: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One attempt's record; ``checkpoints`` defaults to the report of its checkpoints dir."""
    if checkpoints is None and (run_dir / CHECKPOINTS_DIR).is_dir():
        checkpoints = _checkpoints_report(run_dir / CHECKPOINTS_DIR, level)
    return {
        "run_ts": run_ts,
        "legacy": legacy,
        "path": str(run_dir.resolve()),
        "has_artifacts": (run_dir / ARTIFACTS_DIR).is_dir(),
        "checkpoints": checkpoints,
    }


def _looks_like_checkpoints(path: Path) -> bool:
    if path.name == CHECKPOINTS_DIR or (path / LATEST_POINTER).exists():
        return True
    return any(parse_iter_dirname(p.name) is not None for p in path.iterdir() if p.is_dir())


def _valid_run_ts(path: Path) -> bool:
    """``path`` is named like an attempt (the layout's own RUN_TS rule)."""
    return path.name in list_attempts(path.parent)


def inspect_path(path: str | os.PathLike[str], *, verify: bool = False) -> dict[str, Any]:
    """Describe the checkpoints layout at ``path`` (see the module doc). Reads only.

    Returns:
        ``{"path", "kind", "verify_level", "attempts", "adopted_attempt", "adoption_reason",
        "resume_auto", "explicit_resume"}``. ``kind`` is ``job``, ``attempt``, ``checkpoints``
        or ``iteration``. Each attempt (``run_ts``, ``legacy``, ``path``, ``has_artifacts``)
        holds its ``checkpoints`` report — ``iterations`` newest first, each with ``state``,
        ``reason``, ``files`` (``size`` on disk, ``recorded_size`` in the manifest) and
        ``total_bytes``; ``latest`` (``status``: ok / missing / garbage / dangling);
        ``total_bytes``; ``auto`` (``pick``, ``reason``, ``passed_over``) — or ``None`` when
        the attempt has no ``checkpoints/`` yet. ``resume_auto`` is the adopted attempt's pick;
        for an ``iteration`` PATH it is ``None`` and ``explicit_resume`` says whether
        ``resume=PATH`` would load it.

    Example:
        >>> inspect_path("out/proj/group/name")["resume_auto"]["pick"]  # doctest: +SKIP
        'iter_000000008'

    Raises:
        InspectError: ``path`` does not exist, is not a directory, or holds no checkpoints
            layout.
    """
    level = "digest" if verify else "size"
    target = Path(path).expanduser()
    if not target.exists():
        raise InspectError(
            f"{target}: no such file or directory; point inspect at a job dir "
            "(<root>/<project>/<group>/<name>), an attempt, a checkpoints/ dir "
            "or an iter_* dir"
        )
    if not target.is_dir():
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
    }
    iteration = parse_iter_dirname(target.name)
    if iteration is not None:
        data["kind"] = "iteration"
        checkpoints = _checkpoints_report(target.parent, level, only=iteration)
        parent_run = target.parent.parent
        run_ts = parent_run.name if _valid_run_ts(parent_run) else ""
        data["attempts"] = [
            _attempt_entry(parent_run, run_ts, level, legacy=not run_ts, checkpoints=checkpoints)
        ]
        data["explicit_resume"] = checkpoints.get("explicit")
        return data
    if _looks_like_checkpoints(target):
        data["kind"] = "checkpoints"
        run_dir = target.parent
        run_ts = run_dir.name if _valid_run_ts(run_dir) else ""
        data["attempts"] = [
            _attempt_entry(
                run_dir, run_ts, level, legacy=not run_ts,
                checkpoints=_checkpoints_report(target, level),
            )
        ]  # fmt: skip
        data["adopted_attempt"] = str(run_dir)
        data["adoption_reason"] = f"PATH is the checkpoints dir of {run_dir.name}"
    elif _valid_run_ts(target):
        data["kind"] = "attempt"
        data["attempts"] = [_attempt_entry(target, target.name, level, legacy=False)]
        data["adopted_attempt"] = str(target)
        data["adoption_reason"] = "PATH is this attempt"
    else:
        attempts = list_attempts(target)
        legacy = (target / CHECKPOINTS_DIR).is_dir()
        if not attempts and not legacy:
            raise InspectError(
                f"{target}: holds no checkpoints layout (no <RUN_TS>/ attempt, no checkpoints/, "
                "no iter_* dir); point inspect at <root>/<project>/<group>/<name> or below"
            )
        data["kind"] = "job"
        entries = [_attempt_entry(target / ts, ts, level, legacy=False) for ts in attempts]
        if legacy:  # resolve_run_attempt: a legacy flat layout wins over any attempt dirs
            entries.insert(0, _attempt_entry(target, "", level, legacy=True))
            data["adopted_attempt"] = str(target)
            data["adoption_reason"] = f"legacy flat layout: {target / CHECKPOINTS_DIR} exists"
        else:
            data["adopted_attempt"] = str(target / attempts[-1])
            data["adoption_reason"] = f"resume=auto adopts the newest attempt {attempts[-1]}"
        data["attempts"] = entries
    adopted = next(a for a in data["attempts"] if a["path"] == data["adopted_attempt"])
    checkpoints = adopted["checkpoints"]
    data["resume_auto"] = (
        checkpoints["auto"]
        if checkpoints
        else {
            "pick": None,
            "iteration": None,
            "passed_over": [],
            "reason": "the adopted attempt has no checkpoints/ yet",
        }
    )
    return data


# ------------------------------------------------------------------------------ text
def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit} ({n} B)"
    return f"{n} B"


def _checkpoints_lines(report: dict[str, Any]) -> list[str]:
    lines = [f"  checkpoints: {report['path']}"]
    if not report["iterations"]:
        lines.append("    (no iter_* directories)")
    for it in report["iterations"]:
        lines.append(f"    {it['name']}  {it['state']:<9}  {_size(it['total_bytes'])}")
        if it["reason"]:
            lines.append(f"      why: {it['reason']}")
        width = max((len(f["name"]) for f in it["files"]), default=0)
        for f in it["files"]:
            note = ""
            if not f["in_manifest"] and f["name"] != MANIFEST_NAME and it["state"] != PARTIAL:
                note = "  (not in the manifest)"
            elif f["size"] is None:
                note = f"  (MISSING; manifest recorded {f['recorded_size']} B)"
            elif f["recorded_size"] is not None and f["recorded_size"] != f["size"]:
                note = f"  (manifest recorded {f['recorded_size']} B)"
            lines.append(f"      {f['name']:<{width}}  {_size(f['size'])}{note}")
    for name in report["other_entries"]:
        lines.append(f"    {name}  (not a checkpoint)")
    lines.append(
        f"    total: {_size(report['total_bytes'])} in {len(report['iterations'])} iteration(s)"
    )
    if report.get("latest") is not None:
        latest = report["latest"]
        lines.append(f"    {LATEST_POINTER}: {latest['status']}: {latest['detail']}")
    if report.get("auto") is not None:
        auto = report["auto"]
        pick = auto["pick"] or "nothing (fresh start)"
        lines.append(f"    resume=auto would pick {pick}: {auto['reason']}")
        for p in auto["passed_over"]:
            lines.append(f"      passed over {p['name']}: {p['reason']}")
    if report.get("explicit") is not None:
        lines.append(f"    explicit resume: {report['explicit']['reason']}")
    return lines


def render_text(data: dict[str, Any]) -> str:
    """The human-readable report of :func:`inspect_path`'s data."""
    level = data["verify_level"]
    how = (
        "sizes and SHA-256 digests"
        if level == "digest"
        else "sizes only; --verify also checks SHA-256 digests, as resume's default does"
    )
    lines = [f"{data['path']} ({data['kind']}; verification: {how})"]
    if data["kind"] == "job":
        lines.append(f"attempts ({len(data['attempts'])}, oldest first):")
        for a in data["attempts"]:
            adopted = a["path"] == data["adopted_attempt"]
            mark = "  <- resume=auto adopts this one" if adopted else ""
            label = a["run_ts"] or "(legacy flat layout)"
            lines.append(f"  {label}  {a['path']}{mark}")
        if data["adoption_reason"]:
            lines.append(f"  ({data['adoption_reason']})")
    for a in data["attempts"]:
        label = a["run_ts"] or "legacy flat layout"
        lines.append("")
        lines.append(f"attempt {label}: {a['path']}")
        if a["has_artifacts"]:
            lines.append(f"  {ARTIFACTS_DIR}/ present (partial artifacts; never resume sources)")
        if a["checkpoints"] is None:
            lines.append(f"  no {CHECKPOINTS_DIR}/ yet")
        else:
            lines.extend(_checkpoints_lines(a["checkpoints"]))
    auto = data.get("resume_auto")
    if auto is not None:
        lines.append("")
        where = data["adopted_attempt"]
        if auto["pick"]:
            lines.append(
                f"resume=auto (verify={level}) would resume from "
                f"{posixpath.join(where, CHECKPOINTS_DIR, auto['pick'])}"
            )
        else:
            lines.append(
                f"resume=auto (verify={level}) would start fresh in {where}: {auto['reason']}"
            )
    return "\n".join(lines) + "\n"


def run_inspect(args: argparse.Namespace) -> int:
    """The ``statecraft inspect PATH [--verify] [--json]`` command; see the module doc."""
    as_json = bool(getattr(args, "json", False))
    try:
        data = inspect_path(args.path, verify=bool(getattr(args, "verify", False)))
    except InspectError as exc:
        return emit(
            COMMAND,
            as_json=as_json,
            data={"path": str(args.path)},
            exit_code=1,
            errors=[(exc.code, str(exc))],
        )
    except OSError as exc:
        return emit(
            COMMAND,
            as_json=as_json,
            data={"path": str(args.path)},
            exit_code=1,
            errors=[("unreadable", f"{args.path}: cannot be read ({exc})")],
        )
    return emit(COMMAND, as_json=as_json, data=data, text=render_text(data))
