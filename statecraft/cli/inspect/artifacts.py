"""The artifact part of ``statecraft inspect``: an attempt's ``checkpoint_artifacts/`` (each
artifact's kind, components, state and files, from the artifact catalog) and the "resume=auto
would" record, computed by the resume machine's own rules
(:func:`~statecraft.checkpoint.resume.rules.auto_outcome`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from statecraft.checkpoint.kernel.artifact_catalog import (
    ArtifactCatalog,
    ArtifactEntry,
    open_artifacts,
    scan_artifacts,
)
from statecraft.checkpoint.kernel.artifact_manifest import ArtifactManifest, read_artifact_manifest
from statecraft.checkpoint.kernel.catalog import Catalog
from statecraft.checkpoint.resume.rules import AutoOutcome, auto_outcome
from statecraft.cli.inspect.archive import archive_field
from statecraft.cli.inspect.disk import FS, file_records, files_on_disk
from statecraft.errors import CheckpointError
from statecraft.storage.local import LocalStore

__all__ = ["artifacts_of", "artifacts_report", "auto_record"]


def artifacts_of(run_dir: Path, level: str) -> ArtifactCatalog:
    """The artifact catalog of the attempt at ``run_dir`` (empty without
    ``checkpoint_artifacts/``; nothing is created)."""
    return scan_artifacts(open_artifacts(run_dir, filesystem=FS), level=level)


def _artifact_record(store: LocalStore, entry: ArtifactEntry) -> dict[str, Any]:
    manifest: ArtifactManifest | None = entry.verified.manifest if entry.verified else None
    if manifest is None and entry.has_manifest:
        try:
            manifest = read_artifact_manifest(store, entry.iteration)
        except (CheckpointError, OSError):
            manifest = None
    on_disk = files_on_disk(store, entry.name)
    recorded = {name: f.size for name, f in manifest.files.items()} if manifest else {}
    return {
        "name": entry.name,
        "iteration": entry.iteration,
        "path": entry.path,
        "kind": entry.kind,
        "state": entry.state.value,
        "reason": entry.reason or None,
        "components": list(manifest.components) if manifest else [],
        "physical": list(manifest.physical) if manifest else [],
        "metrics": dict(manifest.metrics) if manifest and manifest.metrics else None,
        "files": file_records(on_disk, recorded),
        "total_bytes": sum(on_disk.values()),
        "archive": archive_field(store, entry.name) if on_disk else None,
    }


def artifacts_report(catalog: ArtifactCatalog, *, only: int | None = None) -> dict[str, Any] | None:
    """The ``artifacts`` record of an attempt (``None`` without ``checkpoint_artifacts/``):
    ``path``, ``entries`` newest first (``name``, ``iteration``, ``path``, ``kind``
    ``"artifact"``, ``state`` committed / corrupt / partial, ``reason``, ``components``,
    ``physical``, ``metrics``, ``files``, ``total_bytes``) and ``newest_with_manifest`` (the
    one the resume rules count)."""
    store = catalog.store
    if not isinstance(store, LocalStore):
        return None
    entries = [e for e in catalog.entries if only is None or e.iteration == only]
    newest = catalog.newest_with_manifest()
    return {
        "path": store.root,
        "entries": [_artifact_record(store, e) for e in entries],
        "newest_with_manifest": newest.name if newest is not None else None,
    }


def auto_record(catalog: Catalog | None, artifacts: ArtifactCatalog, level: str) -> dict[str, Any]:
    """What ``resume=auto`` would do with an attempt: ``action`` (adopt / fresh / refuse),
    ``would`` (the one-line summary), ``pick`` / ``iteration`` / ``stage`` of the adopted
    checkpoint, ``reason``, ``passed_over``, ``checkpoint`` (the one considered) and
    ``artifact`` (the newest artifact with a manifest)."""
    outcome: AutoOutcome = auto_outcome(catalog, artifacts)
    passed_over = [{"name": p.name, "reason": p.reason} for p in outcome.passed_over]
    chosen = outcome.chosen
    record: dict[str, Any] = {
        "action": outcome.action,
        "would": outcome.line,
        "pick": None,
        "iteration": None,
        "stage": None,
        "reason": "",
        "passed_over": passed_over,
        "checkpoint": chosen.name if chosen is not None else None,
        "artifact": outcome.artifact.name if outcome.artifact is not None else None,
    }
    if outcome.action == "adopt" and chosen is not None:
        record.update(
            pick=chosen.name,
            iteration=chosen.iteration,
            stage=chosen.state.validation_stage.value,
            reason=f"the newest iteration that verifies (verify={level})"
            + (f"; {len(passed_over)} newer passed over" if passed_over else ""),
        )
    elif outcome.action == "refuse":
        record["reason"] = str(outcome.refusal)
    elif catalog is None:
        record["reason"] = "the adopted attempt has no checkpoints/ yet"
    elif catalog.iterations:
        record["reason"] = f"no iteration verifies (verify={level}; {len(passed_over)} passed over)"
    else:
        record["reason"] = "no iter_* directory exists"
    return record
