"""The JSON schemas of ``specs/``, enforced on the files they describe.

A spec's ``[[format.files]]`` entry may name a JSON schema beside it
(``schema = "save.manifest.schema.json"``). The code that writes such a file validates the
document before the bytes leave the process, and the code that reads it validates after
parsing, so a writer bug fails before the commit and a doctored file is refused on read.

Each schema is read from the shipped specs directory once per process (an ``lru_cache``, no
other module state).

Example:
    >>> schema_violations("save.manifest.schema.json", {"schema": "x"})[0]   # doctest: +SKIP
    "$: 'components' is a required property"
"""

from __future__ import annotations

import functools
import json

# Any: JSON documents (any JSON value) and the compiled jsonschema validator, which is untyped.
from typing import Any

from statecraft.engine.schema import compile_schema, instance_violations
from statecraft.errors import CheckpointError, StatecraftError
from statecraft.resources import specs_dir

__all__ = [
    "MANIFEST_SCHEMA_FILE",
    "encode_conforming",
    "json_text_violations",
    "schema_violations",
]

#: the schema of ``iter_<9 digits>/.posttrain-manifest.json`` (named by ``specs/save.toml``).
MANIFEST_SCHEMA_FILE = "save.manifest.schema.json"


@functools.cache
def _validator(file_name: str) -> Any:
    path = specs_dir() / file_name
    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
        return compile_schema(schema)
    except (OSError, ValueError) as exc:
        raise StatecraftError(
            f"{path}: cannot load the JSON schema {file_name!r} ({exc}); reinstall statecraft "
            "or fix the schema (statecraft machines check reports it)"
        ) from None


def schema_violations(file_name: str, document: Any) -> list[str]:
    """Where ``document`` (parsed JSON: dicts, lists, str, int, float, bool, None) breaks the
    schema ``file_name`` of the shipped specs, as ``$.path: message`` lines; empty when it
    conforms.

    Raises:
        StatecraftError: the schema file is missing or not a valid JSON Schema.
    """
    return instance_violations(_validator(file_name), document)


@functools.lru_cache(maxsize=512)
def json_text_violations(file_name: str, text: str | bytes) -> tuple[str, ...]:
    """:func:`schema_violations` of the JSON document ``text`` (which must parse), memoized by
    its bytes: a process writes and reads the same few records many times (every resume and
    retention scan re-reads the manifests), and the schema walk is most of their cost."""
    return tuple(schema_violations(file_name, json.loads(text)))


def encode_conforming(document: Any, file_name: str, *, what: str) -> bytes:
    """The canonical JSON bytes of ``document`` (sorted keys, one-space indent, a final
    newline), checked against the shipped schema ``file_name`` before they leave the process.

    Raises:
        CheckpointError: the document breaks the schema (a bug in the code that built it, or
            a schema behind the record); ``what`` names the record in the message. Nothing is
            written.
    """
    text = json.dumps(document, sort_keys=True, indent=1) + "\n"
    violations = json_text_violations(file_name, text)
    if violations:
        raise CheckpointError(
            f"refusing to write {what}: it violates specs/{file_name}: {'; '.join(violations)}; "
            "this is a bug in the code that built it (or the schema is behind the record)"
        )
    return text.encode()
