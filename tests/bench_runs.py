"""What the ``statecraft bench`` tests share: the JSON envelope's keys, the "a measured
time" predicate, and one ``--json`` run of a bench command into a scratch directory."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path
from typing import Any

from statecraft.cli import main

ENVELOPE_KEYS = {"result_version", "command", "status", "exit_code", "data", "errors"}


def positive(value: Any) -> bool:
    """A finite, positive number (not a bool): what every measured time must be."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and value > 0
        and math.isfinite(value)
    )


def bench_json(where: Path, *argv: str) -> tuple[int, dict[str, Any], Path]:
    """Run ``statecraft bench <argv> --dir <where> --json``; its exit code, envelope, and
    ``where``."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["bench", *argv, "--dir", str(where), "--json"])
    return code, json.loads(out.getvalue()), where
