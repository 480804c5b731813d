"""The text of ``statecraft inspect``: :func:`render_text` of :func:`inspect_path`'s data."""

from __future__ import annotations

import posixpath
from typing import Any

from statecraft.checkpoint.layout import (
    ARTIFACTS_DIR,
    CHECKPOINTS_DIR,
    LATEST_POINTER,
    MANIFEST_NAME,
)
from statecraft.cli.inspect.report import PARTIAL

__all__ = ["render_text"]


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


def render_text(data: dict[str, Any]) -> str:
    """The human-readable report of :func:`inspect_path`'s data."""
    level = data["verify_level"]
    how = (
        "sizes and content digests"
        if level == "digest"
        else "sizes only; --verify also checks content digests, as resume's default does"
    )
    lines = [f"{data['path']} ({data['kind']}; verification: {how})"]
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
