"""JSON Schema checks: is a schema valid, and where does an instance break it.

Generic helpers over ``jsonschema`` (the dialect each schema's ``$schema`` names; 2020-12 when
absent). Callers own their error types: the checkpoint package raises
``CheckpointCorruptError`` for a file read from storage that breaks its schema, and
``statecraft machines check`` reports a schema file that is not a valid JSON Schema.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators
from jsonschema.protocols import Validator

__all__ = ["JsonObject", "compile_schema", "instance_violations", "json_path", "schema_problems"]

#: A parsed JSON object (``json.loads``). ``Any``: its values are JSON values of any shape and
#: depth, checked against a JSON Schema at run time, not by the type checker.
JsonObject = dict[str, Any]


def schema_problems(schema: object) -> list[str]:
    """Why ``schema`` is not a valid JSON Schema of its dialect (empty when it is)."""
    if not isinstance(schema, dict | bool):
        return [f"a JSON Schema is an object or a boolean, got {type(schema).__name__}"]
    validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        validator.check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        return [f"{exc.message} at {json_path(exc.absolute_path)}"]
    return []


def compile_schema(schema: object) -> Validator:
    """A validator for ``schema`` (checked first).

    Raises:
        ValueError: ``schema`` is not a valid JSON Schema; the message says why.
    """
    problems = schema_problems(schema)
    if problems:
        raise ValueError("; ".join(problems))
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def instance_violations(validator: Validator, instance: object) -> list[str]:
    """Every place ``instance`` breaks the validator's schema, as ``$.path: message`` lines,
    ordered by path (empty when it conforms)."""
    errors = sorted(validator.iter_errors(instance), key=lambda e: [str(p) for p in e.path])
    return [f"{json_path(e.absolute_path)}: {e.message}" for e in errors]


def json_path(parts: Iterable[object]) -> str:
    """``$.files['model.pt'].size`` style path of a sequence of keys and indices."""
    out = "$"
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and part.isidentifier():
            out += f".{part}"
        else:
            out += f"[{part!r}]"
    return out
