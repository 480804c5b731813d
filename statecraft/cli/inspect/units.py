"""``statecraft inspect`` on the checkpoints of the framework integrations: a Lightning
``ModelCheckpoint.dirpath`` (each ``*.ckpt`` with its slot in ``.statecraft/``, or an
old-layout slot directory), a Hugging Face ``output_dir`` (``checkpoint-N`` folders), one such
checkpoint (a ``*.ckpt`` link or slot, a ``checkpoint-N`` folder) or any single committed unit
(a directory holding ``.statecraft-commit.json``). Reads only, through the read-only
filesystem: each unit is verified as the integration's loader does (sizes; digests with
``--verify``) and never settled. The slots and folders are found by the catalog's one listing
of these layouts (:mod:`statecraft.checkpoint.catalog_api.unit_layouts`), the one
``statecraft.checkpoints`` and the integrations read.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from statecraft.checkpoint.catalog_api.unit_layouts import (
    LIGHTNING_SLOTS_DIR,
    hf_folders,
    lightning_slots,
)
from statecraft.checkpoint.units import (
    UNIT_MANIFEST_NAME,
    UnitVerdict,
    generation_units,
    newest_committed,
    unit_files,
    verify_unit,
)
from statecraft.cli.inspect.disk import FS, is_dir
from statecraft.integrations.lightning_slots import published_unit
from statecraft.storage.local import LocalStore

__all__ = ["units_lines", "units_report"]

SLOTS_DIR = LIGHTNING_SLOTS_DIR


def _store(root: Path) -> LocalStore:
    return LocalStore(str(root), fs=FS)


def _generations(slot: Path) -> list[str]:
    return generation_units(_store(slot.parent), slot.name) if is_dir(slot.parent) else []


def _entry(name: str, path: str, verdict: UnitVerdict | None, store: LocalStore) -> dict:
    manifest = verdict.manifest if verdict is not None else None
    files = []
    if verdict is not None and verdict.state != "absent":
        for file in unit_files(store, verdict.unit):
            stat = store.stat(f"{verdict.unit}/{file}")
            recorded = manifest.files[file].size if manifest and file in manifest.files else None
            files.append({"name": file, "size": stat.size if stat else None,
                          "recorded_size": recorded})  # fmt: skip
    return {
        "name": name,
        "path": path,
        "state": verdict.state if verdict is not None else "uncommitted",
        "reason": "" if verdict is None or verdict.committed else verdict.reason,
        "unit": verdict.unit if verdict is not None else None,
        "step": manifest.step if manifest is not None else None,
        "total_bytes": manifest.size if manifest is not None else None,
        "files": files,
        "passed_over": [],
        "link": None,
    }


def _slot_entry(
    directory: Path,
    name: str,
    slot_root: Path,
    found: tuple[UnitVerdict | None, Sequence[UnitVerdict]] | None = None,
    deep: bool = False,
) -> dict:
    """One Lightning checkpoint: the newest generation of its slot that verifies (``found``,
    as the listing gave it, or verified here), the newer ones passed over, and the
    generation the link at the familiar path names."""
    store = _store(slot_root)
    if found is None:
        found = newest_committed(store, generation_units(store, name), deep=deep, settle=False)
    chosen, over = found
    passed = [
        {"name": posixpath.basename(v.unit), "state": v.state, "reason": v.reason} for v in over
    ]
    entry = _entry(name, str(directory / name), chosen, store)
    if chosen is None:
        entry["reason"] = "no generation verifies" if passed else "no generation directories"
    entry["passed_over"] = passed
    familiar = str(directory / name)
    entry["link"] = published_unit(familiar) if slot_root.name == SLOTS_DIR else None
    return entry


def _lightning(directory: Path, deep: bool) -> list[dict]:
    slots = sorted(lightning_slots(directory, deep=deep, fs=FS), key=lambda s: (s.legacy, s.name))
    return [
        _slot_entry(directory, slot.name, Path(slot.root), (slot.verdict, slot.passed))
        for slot in slots
    ]


def _hf(directory: Path, deep: bool) -> list[dict]:
    store = _store(directory)
    return [
        _entry(name, str(directory / name), verify_unit(store, name, deep=deep), store)
        for _, name in hf_folders(store)
    ]


def _pick(entries: list[dict]) -> dict | None:
    committed = [e for e in entries if e["state"] == "committed"]
    return max(committed, key=lambda e: -1 if e["step"] is None else e["step"], default=None)


def units_report(target: Path, *, verify: bool) -> dict[str, Any] | None:
    """The framework checkpoints at ``target`` (see the module doc), or ``None`` when it
    holds none. ``framework`` is ``lightning``, ``hf`` or ``unit``; ``units`` lists each
    checkpoint (``name``, ``path``, ``state``, ``reason``, ``unit``, ``step``,
    ``total_bytes``, ``files``, ``passed_over``, ``link``: the generation a Lightning link
    names); ``newest_committed`` is what the integration's ``last_committed_checkpoint``
    would return (at this verification level)."""
    deep = verify
    if not is_dir(target):  # a Lightning familiar path (a link) or nothing
        slots = target.parent / SLOTS_DIR
        if not is_dir(slots / target.name):
            return None
        framework = "lightning"
        entries = [_slot_entry(target.parent, target.name, slots, deep=deep)]
    elif FS.stat(str(target / UNIT_MANIFEST_NAME)) is not None:
        store = _store(target.parent)
        framework = "unit"
        entries = [_entry(target.name, str(target), verify_unit(store, target.name, deep=deep),
                          store)]  # fmt: skip
    elif _generations(target):  # one slot (old layout, or .statecraft/<name>)
        directory = target.parent.parent if target.parent.name == SLOTS_DIR else target.parent
        framework = "lightning"
        entries = [_slot_entry(directory, target.name, target.parent, deep=deep)]
    else:
        framework, entries = "lightning", _lightning(target, deep)
        if not entries:
            framework, entries = "hf", _hf(target, deep)
        if not entries:
            return None
    pick = _pick(entries)
    return {
        "framework": framework,
        "units": entries,
        "newest_committed": pick["path"] if pick is not None else None,
    }


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def units_lines(report: dict[str, Any], *, files: bool) -> list[str]:
    """The text of :func:`units_report`: one line per checkpoint (``files``: every file)."""
    lines = [f"{report['framework']} checkpoints ({len(report['units'])}):"]
    width = max((len(e["name"]) for e in report["units"]), default=0)
    for e in report["units"]:
        step = f"step {e['step']}" if e["step"] is not None else "step -"
        slot = e["unit"] is not None and "/" in e["unit"]
        generation = f"  {posixpath.basename(e['unit'])}" if slot else ""
        link = ""
        if e["link"] is not None:
            link = f"  link -> {posixpath.basename(e['link'])}"
        elif report["framework"] == "lightning" and e["state"] == "committed":
            link = "  (no link at the path: an interrupted save or removal)"
        lines.append(
            f"  {e['name']:<{width}}  {e['state']:<11}{generation}  {step:<10}  "
            f"{_size(e['total_bytes'])}{link}"
        )
        if e["reason"]:
            lines.append(f"    why: {e['reason']}")
        for p in e["passed_over"]:
            lines.append(f"    passed over {p['name']}: {p['state']} ({p['reason']})")
        if files:
            for f in e["files"]:
                lines.append(f"      {f['name']}  {_size(f['size'])}")
    newest = report["newest_committed"]
    lines.append(
        f"newest committed (what last_committed_checkpoint picks): {newest}"
        if newest
        else "no committed checkpoint: a resume would start fresh"
    )
    return lines
