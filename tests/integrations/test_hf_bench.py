"""``statecraft bench hf`` smoke test: the shape of the figures, not the speed."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

import hf_runs

from statecraft.cli.bench.hf import format_hf, measure_hf, model_shape, run_bench_hf
from statecraft.errors import ConfigError


def test_model_shape_tracks_the_size() -> None:
    """The benchmark model grows with ``--size-mib`` (layers) and stays near the target."""
    hidden, vocab, layers = model_shape(32)
    params = (vocab + 32) * hidden + layers * (12 * hidden * hidden + 13 * hidden)
    assert 28 <= params * 4 / (1 << 20) <= 36
    assert model_shape(1)[0] == 64


def test_bench_reports_both_variants_and_the_ratios(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One tiny run of each variant through the command's entry point: a JSON envelope on
    stdout with per-save samples, medians and ratios; the scratch directory removed."""
    ns = argparse.Namespace(size_mib=1, saves=2, repeat=1, dir=str(tmp_path), json=True)
    with hf_runs.one_thread():
        assert run_bench_hf(ns) == 0
    envelope = json.loads(capsys.readouterr().out)
    assert envelope["command"] == "bench hf"
    assert envelope["status"] == "ok"
    data = envelope["data"]
    assert data["saves"] == 2
    assert len(data["samples_s"]["plain"]["save_s"]) == 2
    assert len(data["samples_s"]["statecraft"]["save_s"]) == 2
    assert len(data["samples_s"]["statecraft"]["seal_s"]) == 2
    assert set(data["ratios"]) == {
        "seal_over_plain_save",
        "save_and_seal_over_plain_save",
        "train_over_plain_train",
    }
    assert all(v > 0 for v in data["ratios"].values())
    assert "seal / plain save" in format_hf(data)
    assert list(tmp_path.iterdir()) == []


def test_bad_arguments_are_config_errors() -> None:
    """A non-positive count is refused before anything runs."""
    with pytest.raises(ConfigError, match="--saves"):
        measure_hf(saves=0)
