"""The checkpoint manifest: the commit record of one full checkpoint.

``iter_<9 digits>/.posttrain-manifest.json`` is written last (by exclusive create) and makes the
iteration an immutable commit. It records the plan (format, logical components) and every file
with its size and the SHA-256 digest computed from the bytes as they were written. Its JSON
schema is ``specs/save.manifest.schema.json``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import attrs
import cattrs

from statecraft.checkpoint.schemas import MANIFEST_SCHEMA_FILE, schema_violations
from statecraft.errors import CheckpointCorruptError, CheckpointError

__all__ = ["MANIFEST_SCHEMA", "FileEntry", "Manifest", "SavePlan", "decode_manifest"]

MANIFEST_SCHEMA = "statecraft.checkpoint-manifest.v1"
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_converter = cattrs.Converter(forbid_extra_keys=True)


def _strict(kind: type) -> Any:
    def structure(value: Any, _: type) -> Any:
        if type(value) is not kind:
            raise TypeError(f"expected {kind.__name__}, got {value!r}")
        return value

    return structure


for _kind in (int, str):
    _converter.register_structure_hook(_kind, _strict(_kind))


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
    size: int
    sha256: str


@attrs.frozen
class Manifest:
    """The commit record of a full checkpoint (schema ``statecraft.checkpoint-manifest.v1``)."""

    schema: str
    iteration: int
    format: str
    components: tuple[str, ...]
    files: dict[str, FileEntry]
    writer: dict[str, str] = attrs.field(factory=dict)

    @property
    def plan(self) -> SavePlan:
        return SavePlan(self.iteration, self.format, self.components, tuple(sorted(self.files)))

    def encode(self) -> bytes:
        """Canonical JSON bytes (sorted keys, so equal manifests are equal bytes).

        Raises:
            CheckpointError: the manifest breaks ``specs/save.manifest.schema.json`` (a bug in
                the code that built it); nothing is written.
        """
        data = _converter.unstructure(self)
        text = json.dumps(data, sort_keys=True, indent=1) + "\n"
        violations = schema_violations(MANIFEST_SCHEMA_FILE, json.loads(text))
        if violations:
            raise CheckpointError(
                f"refusing to write a manifest of iteration {self.iteration} that violates "
                f"specs/{MANIFEST_SCHEMA_FILE}: {'; '.join(violations)}; this is a bug in the "
                "code that built it (or the schema is behind the manifest)"
            )
        return text.encode()


def decode_manifest(data: bytes, *, source: str) -> Manifest:
    """Parse and validate manifest bytes.

    Raises:
        CheckpointCorruptError: not JSON, wrong schema name, wrong field types, malformed
            digests or negative sizes, or anything else ``specs/save.manifest.schema.json``
            refuses (checked last); the message names ``source`` and the problem.
    """
    fix = "The checkpoint is not usable; resume from another one or move it aside."
    try:
        raw: Any = json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise CheckpointCorruptError(source, f"manifest is not valid JSON ({exc})", fix) from None
    if not isinstance(raw, dict) or raw.get("schema") != MANIFEST_SCHEMA:
        found = raw.get("schema") if isinstance(raw, dict) else type(raw).__name__
        raise CheckpointCorruptError(
            source, f"manifest schema is {found!r}, expected {MANIFEST_SCHEMA!r}", fix
        )
    try:
        manifest = _converter.structure(raw, Manifest)
    except Exception as exc:
        detail = (
            "; ".join(cattrs.transform_error(exc))
            if isinstance(exc, cattrs.BaseValidationError)
            else str(exc)
        )
        raise CheckpointCorruptError(
            source, f"manifest fields are malformed: {detail}", fix
        ) from None
    problems = [
        f"{name}: size {entry.size}" for name, entry in manifest.files.items() if entry.size < 0
    ] + [
        f"{name}: digest {entry.sha256!r}"
        for name, entry in manifest.files.items()
        if not _SHA256_RE.match(entry.sha256)
    ]
    if manifest.iteration < 0 or not manifest.files:
        problems.append(f"iteration {manifest.iteration}, {len(manifest.files)} files")
    if problems:
        raise CheckpointCorruptError(
            source, "manifest values are invalid: " + ", ".join(problems), fix
        )
    violations = schema_violations(MANIFEST_SCHEMA_FILE, raw)
    if violations:
        raise CheckpointCorruptError(
            source, f"manifest violates specs/{MANIFEST_SCHEMA_FILE}: {'; '.join(violations)}", fix
        )
    return manifest
