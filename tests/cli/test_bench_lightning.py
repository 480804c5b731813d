"""Tests of ``statecraft bench lightning``: the shape of its output at a tiny size (no speed
is asserted): every plugin's per-save samples, the ratios of the medians, an empty scratch
directory."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

pytest.importorskip("pytorch_lightning")

from statecraft.cli.bench.lightning import CONFIGS, format_lightning, run_bench_lightning
from statecraft.errors import ConfigError


def _args(where: Path, **overrides: object) -> argparse.Namespace:
    values: dict[str, object] = {
        "size_mib": 1, "saves": 2, "every": 1, "repeat": 1, "dir": str(where), "json": True,
    }  # fmt: skip
    values.update(overrides)
    return argparse.Namespace(**values)


@pytest.mark.slow  # three tiny Trainer.fit runs
def test_json_figures_and_ratios(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The JSON envelope holds per-save training-thread and write times of the three
    plugins (two saves each), fit wall times and the ratios of the medians; the scratch
    directory is left empty."""
    assert run_bench_lightning(_args(tmp_path)) == 0
    text = capsys.readouterr().out
    out = json.loads(text[text.index('{\n "result_version"') :])
    assert out["command"] == "bench lightning"
    data = out["data"]
    assert set(data["configs"]) == set(CONFIGS)
    assert data["checkpoint_bytes"] > 3 * (1 << 20)  # parameters and both AdamW moments
    for row in data["configs"].values():
        assert len(row["save"]["samples_s"]) == 2
        assert len(row["write"]["samples_s"]) == 2
        assert len(row["join"]["samples_s"]) == (0 if row is data["configs"]["torch"] else 2)
        assert all(v > 0 for v in row["save"]["samples_s"] + row["write"]["samples_s"])
        assert row["fit_s"] > 0
    c, r = data["configs"], data["ratios"]
    assert r["statecraft_sync_save_vs_torch"] == pytest.approx(
        c["statecraft_sync"]["save"]["median_s"] / c["torch"]["save"]["median_s"]
    )
    assert r["statecraft_async_blocking_vs_torch"] == pytest.approx(
        c["statecraft_async"]["save"]["median_s"] / c["torch"]["save"]["median_s"]
    )
    assert "statecraft_async" in format_lightning(data)
    assert list(tmp_path.iterdir()) == []


def test_bad_arguments_are_a_config_error(tmp_path: Path) -> None:
    """A non-positive --saves is refused before anything runs."""
    with pytest.raises(ConfigError, match="saves"):
        run_bench_lightning(_args(tmp_path, saves=0))
