"""The retention part of ``statecraft inspect``: retention's mark on each iteration
(weights-only, invalidated, with the policy its marker names), which policies keep it (the
last retention pass's decision, ``checkpoints/.retention-decision.json``: informational, so a
missing or unreadable record leaves the column blank), and why ``resume=PATH`` of a marked
iteration would be refused (the resume refusal itself)."""

from __future__ import annotations

from typing import Any

from statecraft.checkpoint.kernel.catalog import CatalogEntry
from statecraft.checkpoint.kernel.retention_marks import (
    MARKERS,
    MarkKind,
    invalidated_refusal,
    newest_resumable,
    weights_only_refusal,
)
from statecraft.checkpoint.kernel.retention_records import (
    RETENTION_DECISION,
    UPLOADED_MARKER,
    RetentionDecision,
)
from statecraft.checkpoint.kernel.verify import OPTIMIZER_ENTRIES
from statecraft.cli.inspect.archive import archive_note
from statecraft.storage.base import Store

__all__ = [
    "RETENTION_FILES",
    "decision_report",
    "file_note",
    "marked_refusal",
    "retention_fields",
]

#: files retention writes inside ``iter_N/`` (never "not in the manifest" noise)
RETENTION_FILES = frozenset({*MARKERS, UPLOADED_MARKER})
#: files retention writes in the checkpoints root (not "not a checkpoint" entries)
ROOT_FILES = frozenset({RETENTION_DECISION})


def retention_fields(entry: CatalogEntry, decision: RetentionDecision | None) -> dict[str, Any]:
    """The retention fields of one iteration's report: ``policy`` (the policy its marker
    names, ``None`` unmarked or when the marker is damaged), ``kept_by`` (the policies that
    keep it in the last retention pass, ``[]`` when that pass did not keep it, ``None`` when
    the pass has no row for it or there is no decision record) and ``retention_action``
    (``keep`` / ``weights_only`` / ``delete`` in that pass, else ``None``)."""
    row = None
    if decision is not None:
        row = next((r for r in decision.rows if r.iteration == entry.iteration), None)
    return {
        "policy": entry.policy,
        "kept_by": list(row.kept_by) if row is not None else None,
        "retention_action": row.action.value if row is not None else None,
    }


def decision_report(decision: RetentionDecision | None) -> dict[str, Any] | None:
    """The last retention pass (``None`` without a readable decision record):
    ``saved_iteration``, ``policy`` and one row per iteration it considered (``iteration``,
    ``action``, ``kept_by``, ``reason``), newest first."""
    if decision is None:
        return None
    return {
        "saved_iteration": decision.saved_iteration,
        "policy": decision.policy,
        "rows": [
            {
                "iteration": r.iteration,
                "action": r.action.value,
                "kept_by": list(r.kept_by),
                "reason": r.reason,
            }
            for r in decision.rows
        ],
    }


def file_note(it: dict[str, Any], name: str, size: int | None) -> str | None:
    """What to say about file ``name`` of iteration report ``it`` because of retention, or
    ``None``: a retention marker, an optimizer entry a weights-only checkpoint lacks, nothing
    (``""``) for what is left of an invalidated one."""
    if name in RETENTION_FILES:
        return "  (retention marker)" if name in MARKERS else archive_note(it, name)
    if size is None and it["state"] == "weights_only" and name in OPTIMIZER_ENTRIES:
        return "  (removed by retention)"
    if it["state"] == "invalidated":
        return ""  # being deleted: what is left is not compared with a manifest
    return None


def marked_refusal(store: Store, entry: CatalogEntry, *, path: str) -> str | None:
    """Why ``resume=<path>`` of the marked ``entry`` would be refused (the refusal resume
    raises, minus its ``resume=<path>:`` prefix), or ``None`` for an unmarked entry."""
    mark = entry.mark
    if mark is None:
        return None
    newest = newest_resumable(store)
    if mark.kind is MarkKind.INVALIDATED:
        return str(invalidated_refusal(store, mark, source=path, newest=newest))
    refusal = weights_only_refusal(store, mark, source=path, newest=newest)
    return str(refusal).removeprefix(f"resume={path}: ")
