"""The secret guard of the S3 tests (tests/secret_guard.py) can fail: planted leaks are found
in log records, captured text and files, across a read-chunk boundary, and credentials files
written on purpose are the only exception."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import secret_guard
from secret_guard import RecordCollector, files_with_secret, is_credentials_file, leaks

SECRET = "sc-secret-0123456789abcdef"


def test_leaks_names_every_text_holding_the_secret() -> None:
    texts = [("a", "nothing here"), ("b", f"key={SECRET}"), ("c", SECRET[:-1])]
    assert leaks(SECRET, texts) == ["b"]
    with pytest.raises(ValueError):
        leaks("", texts)


def test_record_collector_formats_exceptions_too() -> None:
    collector = RecordCollector()
    log = logging.getLogger("statecraft.test_secret_guard")
    log.addHandler(collector)
    log.setLevel(logging.DEBUG)
    try:
        try:
            raise RuntimeError(f"boom {SECRET}")
        except RuntimeError:
            log.debug("failed", exc_info=True)
    finally:
        log.removeHandler(collector)
    assert leaks(SECRET, (("log", t) for t in collector.texts)) == ["log"]


def test_files_with_secret_finds_planted_files_and_skips_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "clean.json").write_text('{"a": 1}')
    (tmp_path / "sub" / ".uploaded").write_text(f'{{"secret": "{SECRET}"}}')
    creds = tmp_path / "credentials.json"
    creds.write_text(json.dumps({"aws_secret_access_key": SECRET}))
    monkeypatch.setattr(secret_guard, "_CHUNK", 16)  # the secret straddles a chunk boundary
    (tmp_path / "big.bin").write_bytes(b"x" * 10 + SECRET.encode() + b"y" * 40)
    assert is_credentials_file(creds)
    assert sorted(files_with_secret(SECRET, tmp_path)) == [
        tmp_path / "big.bin",
        tmp_path / "sub" / ".uploaded",
    ]
