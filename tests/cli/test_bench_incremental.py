"""statecraft bench incremental: both formats on a frozen base + adapter and on a full
fine-tune, reported as per-repetition ratios; the byte counts are exact, not timed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statecraft.cli import main


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_reports_every_ratio_and_leaves_the_scratch_empty(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["bench", "incremental", "--base-mib", "1", "--adapter-mib", "0.1"]
    argv += ["--full-mib", "1", "--saves", "3", "--repeat", "1", "--dir", str(tmp_path)]
    code, out = _json(capsys, *argv)
    assert code == 0, out["errors"]
    data = out["data"]
    assert set(data["ratios"]) == {
        "bytes_per_save",
        "save_time",
        "resume_time",
        "disk_retained",
        "full_save_time",
        "full_bytes_per_save",
    }
    assert all(len(v) == 1 and v[0] > 0 for v in data["ratios"].values())
    # the frozen base is written once: a later save writes a small part of a full one
    assert data["ratios"]["bytes_per_save"][0] < 0.5
    # everything changes in a full fine-tune: every byte is written again
    assert data["ratios"]["full_bytes_per_save"][0] >= 0.99
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_a_zero_save_count_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _json(capsys, "bench", "incremental", "--saves", "0")
    assert code != 0
    assert "saves" in out["errors"][0]["message"]
