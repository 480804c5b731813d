"""The checkpoint manifest: the commit record of one full checkpoint.

``iter_<9 digits>/.posttrain-manifest.json`` is written last (by exclusive create) and makes the
iteration an immutable commit. It records the plan (format, logical components) and every file
with its size and the digest computed from the bytes as they were written. Its JSON schema is
``specs/save.manifest.schema.json``.

Schema versions (both are read; new manifests are written as v2):

- ``statecraft.checkpoint-manifest.v2``: each file is ``{"size": N, "digest": {"algorithm":
  "xxh3_128", "value": "<32 hex>"}}`` (any algorithm of ``storage.digest.ALGORITHMS``).
- ``statecraft.checkpoint-manifest.v1``: each file is ``{"size": N, "sha256": "<64 hex>"}``;
  read as a ``sha256`` :class:`~statecraft.storage.digest.Digest` and verified with it, and
  encoded back in the v1 shape, so checkpoints written before v2 keep resuming.
"""

from __future__ import annotations

from collections.abc import Callable

# Any: a v1 manifest's raw JSON before it is structured and checked (``_upgrade``).
from typing import Any, Protocol, TypeVar

import attrs

from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.checkpoint.kernel.records import (
    RecordProblem,
    record_codec,
    strict_converter,
    structure_record,
)
from statecraft.checkpoint.kernel.schemas import MANIFEST_SCHEMA_FILE
from statecraft.errors import CheckpointCorruptError
from statecraft.storage.base import Store
from statecraft.storage.digest import ALGORITHMS, Digest

__all__ = [
    "MANIFEST_SCHEMA",
    "MANIFEST_SCHEMA_V1",
    "READABLE_SCHEMAS",
    "FileEntry",
    "Manifest",
    "SavePlan",
    "decode_manifest",
    "read_unit_manifest",
    "strict_converter",
    "structure_record",
]

MANIFEST_SCHEMA = "statecraft.checkpoint-manifest.v2"
MANIFEST_SCHEMA_V1 = "statecraft.checkpoint-manifest.v1"  # sha256 per file; read, never written
READABLE_SCHEMAS = (MANIFEST_SCHEMA, MANIFEST_SCHEMA_V1)
_FIX = "The checkpoint is not usable; resume from another one or move it aside."


@attrs.frozen
class SavePlan:
    """What one save writes: the format, the logical components and the physical files.

    A same-iteration retry compares its plan with the committed manifest's; any difference is
    plan drift and fails closed.
    """

    iteration: int
    format: str
    components: tuple[str, ...]
    files: tuple[str, ...]

    def differences(self, other: SavePlan) -> list[str]:
        """Human-readable differences between two plans (empty when equal)."""
        out = []
        for field in ("iteration", "format", "components", "files"):
            mine, theirs = getattr(self, field), getattr(other, field)
            if mine != theirs:
                out.append(f"{field}: committed {theirs!r}, now {mine!r}")
        return out


@attrs.frozen
class FileEntry:
    """One committed file: its size and the digest of its bytes."""

    size: int
    digest: Digest


def _v1_entry(entry: Any) -> Any:
    """A v1 file entry in the v2 shape (``sha256`` -> ``digest``); other shapes are left for
    structuring to report."""
    if not isinstance(entry, dict) or "sha256" not in entry or "digest" in entry:
        return entry
    rest = {k: v for k, v in entry.items() if k != "sha256"}
    return {**rest, "digest": {"algorithm": "sha256", "value": entry["sha256"]}}


def _upgrade(raw: dict[str, Any]) -> dict[str, Any]:
    """A v1 document in the v2 shape, refused when a digest algorithm is unknown to this
    release."""
    files = raw.get("files")
    if raw["schema"] == MANIFEST_SCHEMA_V1 and isinstance(files, dict):
        files = {name: _v1_entry(entry) for name, entry in files.items()}
        raw = {**raw, "files": files}
    unknown = [
        f"{name}: digest algorithm {e['digest']['algorithm']!r} (known: {sorted(ALGORITHMS)})"
        for name, e in (files.items() if isinstance(files, dict) else ())
        if isinstance(e, dict)
        and isinstance(e.get("digest"), dict)
        and isinstance(e["digest"].get("algorithm"), str)
        and e["digest"]["algorithm"] not in ALGORITHMS
    ]
    if unknown:
        raise RecordProblem(
            "values are invalid: " + ", ".join(unknown),
            _FIX[:-1] + ", or upgrade statecraft if a newer release wrote it.",
        )
    return raw


@attrs.frozen
class Manifest:
    """The commit record of a full checkpoint (schema ``statecraft.checkpoint-manifest.v2``,
    or v1 when read from an older checkpoint)."""

    schema: str
    iteration: int
    format: str
    components: tuple[str, ...]
    files: dict[str, FileEntry]
    writer: dict[str, str] = attrs.field(factory=dict)

    @property
    def plan(self) -> SavePlan:
        """The plan this manifest commits; ``files`` are its entries (a DCP directory's
        files ``model/...`` count as the one entry ``model``)."""
        entries = {name.split("/", 1)[0] for name in self.files}
        return SavePlan(self.iteration, self.format, self.components, tuple(sorted(entries)))

    def encode(self) -> bytes:
        """Canonical JSON bytes (sorted keys, so equal manifests are equal bytes).

        Raises:
            CheckpointError: the manifest breaks ``specs/save.manifest.schema.json`` (a bug in
                the code that built it); nothing is written.
        """
        what = f"the manifest of iteration {self.iteration}"
        if self.schema != MANIFEST_SCHEMA_V1:
            return _CODEC.encode(self, what=what)
        data = _CODEC.converter.unstructure(self)  # a v1 manifest keeps its v1 shape
        data["files"] = {
            n: {"size": e["size"], "sha256": e["digest"]["value"]} for n, e in data["files"].items()
        }
        return _CODEC.encode_document(data, what=what)


def _problems(manifest: Manifest) -> list[str]:
    """Negative sizes, malformed digests (a v1 one not sha256), a negative iteration, no file."""
    v1 = manifest.schema == MANIFEST_SCHEMA_V1
    problems = [f"{n}: size {e.size}" for n, e in manifest.files.items() if e.size < 0] + [
        f"{n}: digest {e.digest.value!r}"
        for n, e in manifest.files.items()
        if not e.digest.well_formed() or (v1 and e.digest.algorithm != "sha256")
    ]
    if manifest.iteration < 0 or not manifest.files:
        problems.append(f"iteration {manifest.iteration}, {len(manifest.files)} files")
    return problems


#: the JSON schema is checked last, on the document as written (the v1 or v2 shape)
_CODEC = record_codec(
    Manifest,
    schema=MANIFEST_SCHEMA,
    readable=(MANIFEST_SCHEMA_V1,),
    what="manifest",
    fix=_FIX,
    schema_file=MANIFEST_SCHEMA_FILE,
    schema_first=False,
    upgrade=_upgrade,
    problems=_problems,
)


def decode_manifest(data: bytes, *, source: str) -> Manifest:
    """Parse and validate manifest bytes.

    Raises:
        CheckpointCorruptError: not JSON, nested too deeply to parse (``RecursionError``),
            wrong schema name, wrong field types, malformed digests or negative sizes, or
            anything else ``specs/save.manifest.schema.json`` refuses (checked last); the
            message names ``source`` and the problem.
    """
    return _CODEC.decode(data, source=source)


class _OfIteration(Protocol):
    @property
    def iteration(self) -> int: ...


_Record = TypeVar("_Record", bound=_OfIteration)


def read_unit_manifest(
    store: Store,
    iteration: int,
    file_name: str,
    decode: Callable[[bytes, str], _Record],
    *,
    what: str = "manifest",
) -> _Record:
    """The committed manifest ``file_name`` of ``iteration`` (a checkpoint's or an
    artifact's), decoded by ``decode(data, source)``; ``what`` names it in a refusal.

    Raises:
        FileNotFoundError: the iteration has no such manifest.
        CheckpointCorruptError: the manifest is malformed or names another iteration.
    """
    name = f"{iter_dirname(iteration)}/{file_name}"
    source = f"{store.describe()}/{name}"
    manifest = decode(store.read_bytes(name), source)
    if manifest.iteration != iteration:
        raise CheckpointCorruptError(
            source,
            f"{what} says iteration {manifest.iteration} but lives in {iter_dirname(iteration)}",
            "Move the directory aside; it was copied or renamed by hand.",
        )
    return manifest
