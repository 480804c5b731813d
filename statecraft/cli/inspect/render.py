"""The text of ``statecraft inspect``: :func:`render_text` of :func:`inspect_path`'s data."""

from __future__ import annotations

import posixpath
from typing import Any

from statecraft.checkpoint.archive.marker import MARKER_NAME
from statecraft.checkpoint.kernel.layout import (
    ARTIFACT_MANIFEST_NAME,
    ARTIFACTS_DIR,
    CHECKPOINTS_DIR,
    LATEST_POINTER,
    MANIFEST_NAME,
)
from statecraft.cli.inspect.archive import archive_note
from statecraft.cli.inspect.blobs import blob_lines
from statecraft.cli.inspect.checkpoints import PARTIAL
from statecraft.cli.inspect.data import data_line
from statecraft.cli.inspect.dcp import dcp_lines
from statecraft.cli.inspect.retention import file_note
from statecraft.cli.inspect.units import units_lines

__all__ = ["render_text"]


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit} ({n} B)"
    return f"{n} B"


def _file_lines(it: dict[str, Any], manifest_name: str, files: bool) -> list[str]:
    """The files of one iteration or artifact, with what differs from its manifest; with
    ``files`` false (the brief view) only the files that carry a note."""
    lines = []
    width = max((len(f["name"]) for f in it["files"]), default=0)
    for f in it["files"]:
        note = ""
        retained = file_note(it, f["name"], f["size"]) if manifest_name == MANIFEST_NAME else None
        if retained is not None:
            note = retained
        elif f["name"] == MARKER_NAME:
            note = archive_note(it, f["name"]) or ""
        elif not f["in_manifest"] and f["name"] != manifest_name and it["state"] != PARTIAL:
            note = "  (not in the manifest)"
        elif f["size"] is None:
            note = f"  (MISSING; manifest recorded {f['recorded_size']} B)"
        elif f["recorded_size"] is not None and f["recorded_size"] != f["size"]:
            note = f"  (manifest recorded {f['recorded_size']} B)"
        if files or note:
            lines.append(f"      {f['name']:<{width}}  {_size(f['size'])}{note}")
    return lines


def _artifacts_lines(report: dict[str, Any], files: bool) -> list[str]:
    """An attempt's partial artifacts (never resume sources)."""
    lines = [f"  {ARTIFACTS_DIR}: {report['path']} (partial artifacts; never resume sources)"]
    if not report["entries"]:
        lines.append("    (no iter_* directories)")
    for a in report["entries"]:
        components = f"[{', '.join(a['components'])}]" if a["components"] else "[?]"
        lines.append(
            f"    {a['name']}  artifact  {a['state']:<9}  {components}  {_size(a['total_bytes'])}"
        )
        if a["reason"]:
            lines.append(f"      why: {a['reason']}")
        if a.get("archive"):
            lines.append(f"      archive: {a['archive']['detail']}")
        if a["metrics"]:
            lines.append(f"      metrics: {a['metrics']}")
        lines.extend(_file_lines(a, ARTIFACT_MANIFEST_NAME, files))
    if report["newest_with_manifest"]:
        lines.append(
            f"    newest with a manifest: {report['newest_with_manifest']} (a resume must be at "
            "or beyond it)"
        )
    return lines


def _checkpoints_lines(report: dict[str, Any], files: bool) -> list[str]:
    lines = [f"  checkpoints: {report['path']}"]
    if not report["iterations"]:
        lines.append("    (no iter_* directories)")
    for it in report["iterations"]:
        state = "weights-only" if it["state"] == "weights_only" else it["state"]
        kept = f"  kept by: {', '.join(it['kept_by'])}" if it.get("kept_by") else ""
        lines.append(f"    {it['name']}  {state:<9}  {_size(it['total_bytes'])}{kept}")
        if it["reason"]:
            lines.append(f"      why: {it['reason']}")
        if it["metrics"]:
            lines.append(f"      metrics: {it['metrics']}")
        for note in it["notes"]:
            lines.append(f"      note: {note}")
        lines.extend(data_line(it))
        lines.extend(blob_lines(it, _size))
        lines.extend(_file_lines(it, MANIFEST_NAME, files))
        if files:
            lines.extend(dcp_lines(it.get("dcp")))
    for name in report["other_entries"]:
        lines.append(f"    {name}  (not a checkpoint)")
    lines.append(
        f"    total: {_size(report['total_bytes'])} in {len(report['iterations'])} iteration(s)"
    )
    if report.get("retention") is not None:
        last = report["retention"]
        lines.append(
            f"    last retention pass: after iter_{last['saved_iteration']:09d} under "
            f"{last['policy']}"
        )
    if report.get("latest") is not None:
        latest = report["latest"]
        lines.append(f"    {LATEST_POINTER}: {latest['status']}: {latest['detail']}")
    if report.get("auto") is not None:
        auto = report["auto"]
        if auto["action"] == "refuse":
            lines.append(f"    resume=auto would refuse: {auto['reason']}")
        else:
            pick = auto["pick"] or "nothing (fresh start)"
            lines.append(f"    resume=auto would pick {pick}: {auto['reason']}")
        for p in auto["passed_over"]:
            lines.append(f"      passed over {p['name']}: {p['reason']}")
    if report.get("explicit") is not None:
        lines.append(f"    explicit resume: {report['explicit']['reason']}")
    return lines


def _runs_lines(runs: list[dict[str, Any]]) -> list[str]:
    """The runs under an output root, one block each."""
    lines = [f"runs ({len(runs)}):"]
    for run in runs:
        newest = run["newest_committed"] or "none"
        latest = run["latest"] or "-"
        if run["latest_status"] != "ok":
            latest = f"{latest} ({run['latest_status']})" if run["latest"] else run["latest_status"]
        lines.append(
            f"  {run['run']}  attempts: {run['attempts']}  newest committed: {newest}  "
            f"{LATEST_POINTER}: {latest}"
        )
        lines.append(f"    {run['adopted_attempt']}")
    lines.append("")
    lines.append("inspect one run for its checkpoints: statecraft inspect <run path>")
    return lines


def render_text(data: dict[str, Any], *, files: bool = True) -> str:
    """The human-readable report of :func:`inspect_path`'s data; ``files`` false (the
    command's default, ``--brief``) shows one line per iteration and only the files that
    carry a note, ``--files`` every file with its size."""
    level = data["verify_level"]
    how = (
        "sizes and content digests"
        if level == "digest"
        else "sizes only; --verify also checks content digests, as resume's default does"
    )
    lines = [f"{data['path']} ({data['kind']}; verification: {how})"]
    if data["kind"] == "units":
        return "\n".join(lines + units_lines(data["units"], files=files)) + "\n"
    if data["kind"] == "root":
        return "\n".join(lines + _runs_lines(data["runs"])) + "\n"
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
        if a["artifacts"] is not None:
            lines.extend(_artifacts_lines(a["artifacts"], files))
        if a["checkpoints"] is not None:
            lines.extend(_checkpoints_lines(a["checkpoints"], files))
        elif data["kind"] != "artifact":
            lines.append(f"  no {CHECKPOINTS_DIR}/ yet")
    if data.get("explicit_resume") is not None and data["kind"] == "artifact":
        lines.append("")
        lines.append(data["explicit_resume"]["reason"])
    auto = data.get("resume_auto")
    if auto is not None:
        lines.append("")
        where = data["adopted_attempt"]
        lines.append(f"resume=auto (verify={level}) would: {auto['would']}")
        if auto["action"] == "refuse":
            pass  # the line above is the refusal with its reason and fixes
        elif auto["pick"]:
            lines.append(
                f"resume=auto (verify={level}) would resume from "
                f"{posixpath.join(where, CHECKPOINTS_DIR, auto['pick'])}"
            )
        else:
            lines.append(
                f"resume=auto (verify={level}) would start fresh in {where}: {auto['reason']}"
            )
    return "\n".join(lines) + "\n"
