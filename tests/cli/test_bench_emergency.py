"""Tests of ``statecraft bench emergency``: the shape of its output at a tiny size. No speed is
asserted; only that every figure is there, positive where it is a time, the ratios and the
overhead are the medians', and the scratch directory is left empty."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_runs import ENVELOPE_KEYS, bench_json, positive

from statecraft.cli import main
from statecraft.cli.bench.emergency import format_emergency


@pytest.fixture(scope="module")
def emergency_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict, Path]:
    """One tiny ``bench emergency --json`` run shared by the tests."""
    return bench_json(
        tmp_path_factory.mktemp("bench-emergency"), "emergency", "--size-mib", "1", "--repeats", "2"
    )


class TestBenchEmergency:
    @pytest.mark.slow  # four real saves and four Checkpointers: a few seconds
    def test_json_envelope_and_figures(self, emergency_run: tuple[int, dict, Path]) -> None:
        """The envelope holds the decision-to-durable time, the step_end() wall time and the
        plain save, their ratios and overheads against the save; nothing is left on disk."""
        code, out, where = emergency_run
        assert code == 0, out["errors"]
        assert set(out) == ENVELOPE_KEYS
        assert out["command"] == "bench emergency"
        data = out["data"]
        assert (data["size_mib"], data["repeat"]) == (1, 2)
        assert positive(data["state_bytes"])
        assert data["path"] == "checkpoints/iter_000000001"
        for key in ("decision_to_durable", "step_end", "sync_save"):
            row = data[key]
            assert len(row["samples_s"]) == 2
            assert all(positive(v) for v in row["samples_s"])
            assert row["min_s"] <= row["median_s"] <= row["max_s"]
        # the decision is taken inside step_end(): the call spans the interval
        for to_durable, wall in zip(
            data["decision_to_durable"]["samples_s"], data["step_end"]["samples_s"], strict=True
        ):
            assert to_durable <= wall
        sync = data["sync_save"]["median_s"]
        assert data["ratios"]["step_end_vs_sync"] == pytest.approx(
            data["step_end"]["median_s"] / sync
        )
        assert data["ratios"]["durable_vs_sync"] == pytest.approx(
            data["decision_to_durable"]["median_s"] / sync
        )
        assert data["overhead_s"]["step_end"] == pytest.approx(data["step_end"]["median_s"] - sync)
        assert data["targets"] == {"overhead_max_s": 1.0}
        assert [p for p in where.rglob("*") if p.is_file()] == []

    @pytest.mark.slow
    def test_text_names_each_row_and_the_target(
        self, emergency_run: tuple[int, dict, Path]
    ) -> None:
        """The human table names the three timings and the one-save-plus-1-s target."""
        text = format_emergency(emergency_run[1]["data"])
        for row in (
            "plain synchronous save",
            "stop decision -> durable checkpoint",
            "step_end() with the sentinel (wall)",
            "target: step_end() <= one save + 1 s",
        ):
            assert row in text

    def test_a_zero_size_is_refused(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--size-mib 0 is refused naming the option, before anything runs."""
        code = main(["bench", "emergency", "--size-mib", "0", "--json"])
        out = json.loads(capsys.readouterr().out)
        assert code != 0
        assert "--size-mib" in out["errors"][0]["message"]
