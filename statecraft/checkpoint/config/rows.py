"""The knob table: every leaf knob of :class:`CheckpointConfig`, dotted, with its default.

Read from the attrs fields of the config records (a field with a checker is a knob, any other
field is a section whose knobs are prefixed with its name), so it cannot drift from the schema;
``docs/checkpointing.md`` lists the same rows and ``tests/test_logs.py`` checks that it does.

Example:
    >>> [row.knob for row in knob_rows()][:3]
    ['save_every', 'resume', 'run_ts']
    >>> next(r for r in knob_rows() if r.knob == "keep_optim_last").default_text
    'null'
"""

from __future__ import annotations

from typing import Any

import attrs

from statecraft.checkpoint.config.knobs import _CHECK
from statecraft.checkpoint.config.schema import CheckpointConfig

__all__ = ["KnobRow", "knob_rows"]


@attrs.frozen
class KnobRow:
    """One knob: its dotted name and its default value (as the config record holds it)."""

    knob: str
    default: Any

    @property
    def default_text(self) -> str:
        """The default as it is written in a YAML knob file: ``0``, ``auto``, ``""``,
        ``null``, ``true``, ``[model, optimizer, training_state]``."""
        return _yaml_text(self.default)


def _yaml_text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value if value else '""'
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_yaml_text(v) for v in value) + "]"
    return str(value)


def knob_rows(cls: type = CheckpointConfig, prefix: str = "") -> tuple[KnobRow, ...]:
    """Every leaf knob under ``cls`` in declaration order, with its default.

    Args:
        cls: a config record (default: the whole :class:`CheckpointConfig`).
        prefix: prepended to each knob name (``"upload."`` for a section).
    """
    rows: list[KnobRow] = []
    for field in attrs.fields(cls):
        if _CHECK in field.metadata:
            default = field.default
            if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                default = default.factory()
            rows.append(KnobRow(prefix + field.name, default))
        else:
            rows.extend(knob_rows(field.type, prefix + field.name + "."))
    return tuple(rows)
