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

import json
from typing import Any, TypeVar

import attrs
import cattrs

from statecraft.checkpoint.kernel.schemas import (
    MANIFEST_SCHEMA_FILE,
    encode_conforming,
    json_text_violations,
)
from statecraft.errors import CheckpointCorruptError
from statecraft.storage.digest import ALGORITHMS, Digest

__all__ = [
    "MANIFEST_SCHEMA",
    "MANIFEST_SCHEMA_V1",
    "READABLE_SCHEMAS",
    "FileEntry",
    "Manifest",
    "SavePlan",
    "decode_manifest",
    "strict_converter",
    "structure_record",
]

MANIFEST_SCHEMA = "statecraft.checkpoint-manifest.v2"
MANIFEST_SCHEMA_V1 = "statecraft.checkpoint-manifest.v1"  # sha256 per file; read, never written
READABLE_SCHEMAS = (MANIFEST_SCHEMA, MANIFEST_SCHEMA_V1)


def _strict(kind: type) -> Any:
    def structure(value: Any, _: type) -> Any:
        if type(value) is not kind:
            raise TypeError(f"expected {kind.__name__}, got {value!r}")
        return value

    return structure


def strict_converter() -> cattrs.Converter:
    """A converter for the JSON records statecraft writes: unknown keys are refused, and an
    ``int``, ``bool`` or ``str`` field takes exactly that type (no ``"3"`` for 3, no ``true``
    for 1, no ``1`` for true)."""
    converter = cattrs.Converter(forbid_extra_keys=True)
    for kind in (int, bool, str):  # bool after int: a bool field is not the int hook's
        converter.register_structure_hook(kind, _strict(kind))
    return converter


T = TypeVar("T")
_converter = strict_converter()


def structure_record(
    converter: cattrs.Converter, raw: Any, kind: type[T], *, source: str, what: str, fix: str
) -> T:
    """``raw`` (parsed JSON) structured as ``kind``.

    Raises:
        CheckpointCorruptError: a field is missing, unknown or of the wrong type; the message
            names ``source``, ``what`` the record is and every malformed field (cattrs'
            paths), and ends with ``fix``.
    """
    try:
        return converter.structure(raw, kind)
    except Exception as exc:
        detail = (
            "; ".join(cattrs.transform_error(exc))
            if isinstance(exc, cattrs.BaseValidationError)
            else str(exc)
        )
        raise CheckpointCorruptError(
            source, f"{what} fields are malformed: {detail}", fix
        ) from None


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


def _v1_files_to_v2(files: Any) -> Any:
    """A v1 ``files`` mapping in the v2 shape (``sha256`` -> ``digest``); other shapes are left
    for the structuring step to report."""
    if not isinstance(files, dict):
        return files
    out = {}
    for name, entry in files.items():
        if isinstance(entry, dict) and "sha256" in entry and "digest" not in entry:
            entry = {k: v for k, v in entry.items() if k != "sha256"}
            entry["digest"] = {"algorithm": "sha256", "value": files[name]["sha256"]}
        out[name] = entry
    return out


def _unknown_algorithms(files: Any) -> list[str]:
    """``name: digest algorithm 'x'`` for every entry whose algorithm this release lacks."""
    if not isinstance(files, dict):
        return []
    return [
        f"{name}: digest algorithm {entry['digest']['algorithm']!r} (known: {sorted(ALGORITHMS)})"
        for name, entry in files.items()
        if isinstance(entry, dict)
        and isinstance(entry.get("digest"), dict)
        and isinstance(entry["digest"].get("algorithm"), str)
        and entry["digest"]["algorithm"] not in ALGORITHMS
    ]


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
        data = _converter.unstructure(self)
        if self.schema == MANIFEST_SCHEMA_V1:  # a v1 manifest keeps its v1 shape
            data["files"] = {
                n: {"size": e["size"], "sha256": e["digest"]["value"]}
                for n, e in data["files"].items()
            }
        return encode_conforming(
            data, MANIFEST_SCHEMA_FILE, what=f"the manifest of iteration {self.iteration}"
        )


def decode_manifest(data: bytes, *, source: str) -> Manifest:
    """Parse and validate manifest bytes.

    Raises:
        CheckpointCorruptError: not JSON, nested too deeply to parse (``RecursionError``),
            wrong schema name, wrong field types, malformed digests or negative sizes, or
            anything else ``specs/save.manifest.schema.json`` refuses (checked last); the
            message names ``source`` and the problem.
    """
    try:
        return _decode_manifest(data, source=source)
    except RecursionError:
        raise CheckpointCorruptError(
            source,
            "manifest is nested too deeply to parse (RecursionError); a statecraft manifest "
            "is a few levels deep",
            "The checkpoint is not usable; resume from another one or move it aside.",
        ) from None


def _decode_manifest(data: bytes, *, source: str) -> Manifest:
    fix = "The checkpoint is not usable; resume from another one or move it aside."
    try:
        raw: Any = json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise CheckpointCorruptError(source, f"manifest is not valid JSON ({exc})", fix) from None
    if not isinstance(raw, dict) or raw.get("schema") not in READABLE_SCHEMAS:
        found = raw.get("schema") if isinstance(raw, dict) else type(raw).__name__
        raise CheckpointCorruptError(
            source, f"manifest schema is {found!r}, expected {MANIFEST_SCHEMA!r}", fix
        )
    # validated (last) against the JSON schema as written: the v1 or v2 shape of ``data``
    if raw["schema"] == MANIFEST_SCHEMA_V1:
        raw = {**raw, "files": _v1_files_to_v2(raw.get("files"))}
    unknown = _unknown_algorithms(raw.get("files"))
    if unknown:
        raise CheckpointCorruptError(
            source,
            "manifest values are invalid: " + ", ".join(unknown),
            fix[:-1] + ", or upgrade statecraft if a newer release wrote it.",
        )
    manifest = structure_record(_converter, raw, Manifest, source=source, what="manifest", fix=fix)
    problems = [
        f"{name}: size {entry.size}" for name, entry in manifest.files.items() if entry.size < 0
    ] + [
        f"{name}: digest {entry.digest.value!r}"
        for name, entry in manifest.files.items()
        if not entry.digest.well_formed()
        or (manifest.schema == MANIFEST_SCHEMA_V1 and entry.digest.algorithm != "sha256")
    ]
    if manifest.iteration < 0 or not manifest.files:
        problems.append(f"iteration {manifest.iteration}, {len(manifest.files)} files")
    if problems:
        raise CheckpointCorruptError(
            source, "manifest values are invalid: " + ", ".join(problems), fix
        )
    violations = json_text_violations(MANIFEST_SCHEMA_FILE, bytes(data))  # the raw document
    if violations:
        raise CheckpointCorruptError(
            source, f"manifest violates specs/{MANIFEST_SCHEMA_FILE}: {'; '.join(violations)}", fix
        )
    return manifest
