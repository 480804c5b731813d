"""The one result envelope every ``statecraft`` command prints.

``--json`` prints ``{"result_version", "command", "status", "exit_code", "data",
"errors": [{"code", "message"}]}``; failures use the same shape. Without ``--json`` the human
text goes to stdout and each error to stderr as ``error: <message>``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["RESULT_VERSION", "emit"]

RESULT_VERSION = 1


def emit(
    command: str,
    *,
    as_json: bool,
    data: Any = None,
    errors: Sequence[tuple[str, str]] = (),
    exit_code: int = 0,
    text: str = "",
) -> int:
    """Print the result (human text or the JSON envelope) and return the exit code."""
    if as_json:
        envelope = {
            "result_version": RESULT_VERSION,
            "command": command,
            "status": "ok" if exit_code == 0 else "error",
            "exit_code": exit_code,
            "data": data,
            "errors": [{"code": c, "message": m} for c, m in errors],
        }
        print(json.dumps(envelope, indent=1, default=str))
    else:
        if text:
            print(text.rstrip("\n"))
        for _, message in errors:
            print(f"error: {message}", file=sys.stderr)
    return exit_code
