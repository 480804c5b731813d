"""The unit commit manifest: what makes a framework-written checkpoint directory committed.

A **unit** is a directory whose files a framework wrote (Lightning's ``checkpoint.pt`` of one
generation, a Hugging Face ``checkpoint-N`` folder). ``<unit>/.statecraft-commit.json`` is
written last, by exclusive create, after every file and directory it names is durable; it
records every other file under the unit with its size and digest. A unit without it is
uncommitted (a save that did not finish); a unit whose files differ from it is damaged.

Schema ``statecraft.unit-commit.v1`` (``specs/unit-commit.schema.json``)::

    {"schema": "statecraft.unit-commit.v1", "framework": "hf-trainer", "step": 40,
     "files": {"model.safetensors": {"size": 123,
                                     "digest": {"algorithm": "xxh3_128", "value": "..."}}},
     "meta": {"epoch": 1.0}, "writer": {"statecraft": "0.1.0"}}
"""

from __future__ import annotations

from typing import Any

import attrs

from statecraft.checkpoint.kernel.manifest import FileEntry
from statecraft.checkpoint.kernel.records import record_codec
from statecraft.errors import UnitDamagedError

__all__ = [
    "UNIT_MANIFEST_NAME",
    "UNIT_MANIFEST_SCHEMA",
    "UNIT_MANIFEST_SCHEMA_FILE",
    "MetaValue",
    "UnitManifest",
    "decode_unit_manifest",
]

UNIT_MANIFEST_NAME = ".statecraft-commit.json"
UNIT_MANIFEST_SCHEMA = "statecraft.unit-commit.v1"
#: its JSON schema (named by ``specs/unit_seal.toml``), enforced on encode and decode.
UNIT_MANIFEST_SCHEMA_FILE = "unit-commit.schema.json"
MetaValue = str | int | float | bool | None
_FIX = (
    "The unit is never loaded; move it aside or remove it (statecraft never adopts it) and "
    "resume from an older committed one"
)


@attrs.frozen
class UnitManifest:
    """The commit record of one unit (see the module docstring).

    Attributes:
        framework: who wrote the files (``lightning``, ``hf-trainer``).
        step: the framework's global step, when it has one.
        files: path relative to the unit -> size and digest, every file but the manifest.
        meta: framework facts for people (never used to decide what is committed).
        writer: the statecraft version that sealed it.
    """

    schema: str
    framework: str
    step: int | None
    files: dict[str, FileEntry]
    meta: dict[str, Any] = attrs.field(factory=dict)  # MetaValue each (the schema's rule)
    writer: dict[str, str] = attrs.field(factory=dict)

    @property
    def size(self) -> int:
        """Bytes of every file it names."""
        return sum(entry.size for entry in self.files.values())

    def problems(self) -> list[str]:
        """What makes this record not a unit manifest (empty when it is one)."""
        out: list[str] = []
        if self.schema != UNIT_MANIFEST_SCHEMA:
            out.append(f"schema {self.schema!r}, expected {UNIT_MANIFEST_SCHEMA!r}")
        if not self.framework:
            out.append("framework is empty")
        if self.step is not None and self.step < 0:
            out.append(f"step {self.step} is negative")
        if not self.files:
            out.append("it names no file")
        for name, entry in self.files.items():
            parts = name.split("/")
            if name == UNIT_MANIFEST_NAME or any(p in ("", ".", "..") for p in parts):
                out.append(f"file name {name!r} is not a clean relative name inside the unit")
            if entry.size < 0 or not entry.digest.well_formed():
                out.append(f"{name}: size {entry.size}, digest {entry.digest.value!r}")
        return out

    def encode(self) -> bytes:
        """Canonical JSON bytes (sorted keys).

        Raises:
            CheckpointError: the record is not a valid unit manifest or breaks
                ``specs/unit-commit.schema.json`` (a bug in the code that built it); nothing
                is written.
        """
        return _CODEC.encode(self, what="a unit manifest")


def _damaged(source: str, problem: str, fix: str) -> UnitDamagedError:
    return UnitDamagedError(f"{source}: {problem}. {fix}", path=source, reason=problem)


_CODEC = record_codec(
    UnitManifest,
    schema=UNIT_MANIFEST_SCHEMA,
    what="commit manifest",
    fix=_FIX,
    schema_file=UNIT_MANIFEST_SCHEMA_FILE,
    error=_damaged,
    problems=UnitManifest.problems,
)


def decode_unit_manifest(data: bytes, *, source: str) -> UnitManifest:
    """Parse and validate unit manifest bytes.

    Raises:
        UnitDamagedError: not JSON, another schema, malformed fields, refused values, or
            anything ``specs/unit-commit.schema.json`` refuses; the message names ``source``
            and the problem.
    """
    return _CODEC.decode(data, source=source)
