"""The suite-wide guard that an object-store secret never leaks.

For every test that uses the session S3 server (the ``s3_server`` fixture), conftest.py
collects what the test produced and :func:`leaks` greps it for the server's secret key:

- every log record (``statecraft`` at DEBUG, every other logger at INFO), formatted with its
  exception and traceback;
- the test's captured stdout and stderr, and the failure report when it failed;
- every file under its ``tmp_path`` (markers, DONE records, manifests, logs a subprocess
  wrote, ``--json`` files), except the credentials files the tests wrote on purpose.

A finding fails the test that produced it, naming where the secret appeared.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["RecordCollector", "files_with_secret", "is_credentials_file", "leaks"]

#: files larger than this are read in chunks of it (overlapping by the secret's length)
_CHUNK = 8 << 20


class RecordCollector(logging.Handler):
    """Keeps every record's formatted text (message, exception, stack)."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.texts: list[str] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.texts.append(self.format(record))
        except Exception:  # a record that cannot be formatted still counts as seen
            self.texts.append(f"{record.name} <unformattable {record.msg!r}>")


def leaks(secret: str, texts: Iterable[tuple[str, str]]) -> list[str]:
    """The ``where`` of every ``(where, text)`` whose text holds ``secret``."""
    if not secret:
        raise ValueError("leaks() needs the secret to look for")
    return [where for where, text in texts if secret in text]


def is_credentials_file(path: Path) -> bool:
    """A JSON credentials file a test wrote on purpose (it holds the secret by design)."""
    if path.suffix != ".json" or path.stat().st_size > 1 << 16:
        return False
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(raw, dict) and "aws_secret_access_key" in raw


def files_with_secret(secret: str, root: Path) -> list[Path]:
    """Every regular file under ``root`` whose bytes hold ``secret`` (credentials files and
    the S3 server's own data directory excepted)."""
    needle = secret.encode()
    found: list[Path] = []
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory) / name
            if not path.is_file() or path.is_symlink() or is_credentials_file(path):
                continue
            if _holds(path, needle):
                found.append(path)
    return found


def _holds(path: Path, needle: bytes) -> bool:
    try:
        with open(path, "rb") as handle:
            tail = b""
            while block := handle.read(_CHUNK):
                window = tail + block
                if needle in window:
                    return True
                tail = window[-(len(needle) - 1) :] if len(needle) > 1 else b""
    except OSError:
        return False
    return False
