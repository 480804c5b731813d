"""The report of one ``checkpoints/`` directory for ``statecraft inspect``: each iteration's
state as the checkpoint catalog (:func:`~statecraft.checkpoint.kernel.catalog.scan`) reads it,
its files, archive, DCP and retention fields, the latest pointer as the catalog read it, and
what ``resume=auto`` (or ``resume=<iteration>``) would do, decided by resume's own rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from statecraft.checkpoint.kernel.artifact_catalog import ArtifactCatalog
from statecraft.checkpoint.kernel.catalog import (
    Catalog,
    CatalogEntry,
    CheckpointState,
    LatestState,
    scan,
)
from statecraft.checkpoint.kernel.layout import LATEST_POINTER, iter_dirname, parse_iter_dirname
from statecraft.checkpoint.kernel.manifest import Manifest
from statecraft.checkpoint.kernel.retention_records import RetentionDecision, read_decision
from statecraft.checkpoint.kernel.verify import read_manifest
from statecraft.checkpoint.resume.rules import artifact_refusal
from statecraft.cli.inspect.archive import archive_field
from statecraft.cli.inspect.artifacts import auto_record
from statecraft.cli.inspect.blobs import blob_field
from statecraft.cli.inspect.data import data_field
from statecraft.cli.inspect.dcp import dcp_report
from statecraft.cli.inspect.disk import FS, file_records, files_on_disk
from statecraft.cli.inspect.retention import (
    ROOT_FILES,
    decision_report,
    marked_refusal,
    retention_fields,
)
from statecraft.errors import CheckpointError
from statecraft.storage.local import LocalStore

__all__ = [
    "COMMITTED",
    "CORRUPT",
    "PARTIAL",
    "checkpoints_report",
    "iteration_report",
    "latest_report",
]

COMMITTED, PARTIAL, CORRUPT = (
    CheckpointState.COMMITTED.value,
    CheckpointState.PARTIAL.value,
    CheckpointState.CORRUPT.value,
)


_ADOPTABLE = {state.value for state in CheckpointState if state.adoptable}


def iteration_report(
    store: LocalStore, entry: CatalogEntry, decision: RetentionDecision | None = None
) -> dict[str, Any]:
    """One iteration's record: the catalog's state and reason, its files on disk, and its
    retention fields (:func:`~.retention.retention_fields`)."""
    name = entry.name
    manifest: Manifest | None = entry.verified.manifest if entry.verified else None
    if manifest is None and entry.state is not CheckpointState.PARTIAL:
        try:
            manifest = read_manifest(store, entry.iteration)
        except (CheckpointError, OSError):
            manifest = None
    on_disk = files_on_disk(store, name) if store.stat(name) else {}
    recorded = {n: f.size for n, f in manifest.files.items()} if manifest else {}
    return {
        "name": name,
        "iteration": entry.iteration,
        "path": store.abspath(name),
        "kind": entry.kind,
        "state": entry.state.value,
        "stage": entry.state.validation_stage.value if entry.state.adoptable else None,
        "reason": entry.reason or None,
        "metrics": dict(entry.metrics) if entry.metrics is not None else None,
        "notes": list(entry.notes),
        "files": file_records(on_disk, recorded),
        "total_bytes": sum(on_disk.values()),
        "archive": archive_field(store, name) if on_disk else None,
        "dcp": dcp_report(store, name) if on_disk else None,
        "data": data_field(store, name) if "data.pt" in on_disk else None,
        "blobs": blob_field(store, entry.iteration, manifest),
        **retention_fields(entry, decision),
    }


def latest_report(catalog: Catalog, iterations: list[dict[str, Any]]) -> dict[str, Any]:
    """What the catalog read from ``latest_checkpoint.txt``, worded for the report."""
    latest = catalog.latest
    if latest.state is LatestState.MISSING:
        return {
            "status": "missing",
            "names": None,
            "detail": f"no {LATEST_POINTER}; resume selects by verified manifests",
        }
    if latest.state is LatestState.GARBAGE:
        why = latest.problem
        return {
            "status": "garbage",
            "names": None,
            "detail": f"unreadable ({why}); resume ignores it and selects by verified manifests",
        }
    named = latest.iteration
    if named is None:  # pragma: no cover - OK and DANGLING always name one
        raise CheckpointError("latest pointer state without an iteration")
    name = iter_dirname(named)
    if latest.state is LatestState.DANGLING:
        return {
            "status": "dangling",
            "names": name,
            "detail": f"names {name}, which does not exist; resume ignores it",
        }
    present = {it["iteration"]: it for it in iterations}
    detail = f"names {name} ({present[named]['state']})"
    newer = [
        it["name"] for it in iterations if it["iteration"] > named and it["state"] in _ADOPTABLE
    ]
    if newer:
        detail += f"; newer committed {', '.join(newer)} not yet named (pointer update pending)"
    return {"status": "ok", "names": name, "detail": detail}


def checkpoints_report(
    path: Path, level: str, artifacts: ArtifactCatalog, *, only: int | None = None
) -> dict[str, Any]:
    """The report of the checkpoints dir ``path`` at verification ``level``: every iteration
    (:func:`iteration_report`, newest first; only iteration ``only`` when given), the latest
    pointer, other entries, the last retention pass, what ``resume=auto`` would do, and for
    ``only`` whether ``resume=<that iteration>`` would load it."""
    store = LocalStore(str(path.resolve()), fs=FS)
    catalog = scan(store, level=level, keep_payloads=False)
    decision = read_decision(store)
    numbers = [n for n in catalog.iterations if only is None or n == only]
    iterations = [iteration_report(store, catalog.entry(n), decision) for n in numbers]
    extras = sorted(
        n
        for n in store.list("")
        if parse_iter_dirname(n) is None and n != LATEST_POINTER and n not in ROOT_FILES
    )
    report: dict[str, Any] = {
        "path": store.root,
        "latest": latest_report(catalog, iterations) if only is None else None,
        "iterations": iterations,
        "other_entries": extras,
        "total_bytes": sum(it["total_bytes"] for it in iterations),
        "auto": auto_record(catalog, artifacts, level) if only is None else None,
        "explicit": None,
        "retention": decision_report(decision),
    }
    if only is not None and iterations:
        it = iterations[0]
        entry = catalog.entry(it["iteration"])
        refusal = artifact_refusal(
            artifacts.newest_with_manifest(),
            source=f"resume={it['path']}",
            checkpoint=entry.verified.location if entry.verified else None,
            iteration=entry.iteration,
        )
        accepted = it["state"] in _ADOPTABLE and refusal is None
        marked = marked_refusal(store, entry, path=it["path"])
        if marked is not None:  # resume refuses a marked iteration before verifying it
            reason = f"resume={it['path']} would be refused: {marked}"
        elif accepted:
            reason = f"resume={it['path']} would load {it['name']} (verify={level})"
        elif refusal is not None and it["state"] in _ADOPTABLE:
            reason = f"resume={it['path']} would be refused: {refusal}"
        else:
            reason = f"resume={it['path']} would fail (no fallback): {it['reason']}"
        report["explicit"] = {"accepted": accepted, "reason": reason}
    return report
