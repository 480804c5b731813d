"""Tests of ``statecraft bench async``: the shape of its output at a tiny size. No speed is
asserted; only that every figure is there, positive where it is a time, the ratios are the
medians' ratios, and the scratch directory is left empty."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_runs import ENVELOPE_KEYS, bench_json, positive

from statecraft.cli import main
from statecraft.cli.bench.report import format_async


@pytest.fixture(scope="module")
def async_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict, Path]:
    """One tiny ``bench async --json`` run shared by the tests."""
    return bench_json(
        tmp_path_factory.mktemp("bench-async"), "async", "--size-mib", "1", "--repeats", "2"
    )


class TestBenchAsync:
    @pytest.mark.slow  # importing torch.distributed.checkpoint alone takes seconds
    def test_json_envelope_and_figures(self, async_run: tuple[int, dict, Path]) -> None:
        """The JSON envelope holds every contender's blocking time and time to durable, the
        step times with and without a write in flight, and their ratios; nothing is left on
        disk."""
        code, out, where = async_run
        assert code == 0, out["errors"]
        assert set(out) == ENVELOPE_KEYS
        assert out["command"] == "bench async"
        data = out["data"]
        assert data["size_mib"] == 1
        assert data["repeat"] == 2
        assert data["writer"] == "thread"
        assert positive(data["state_bytes"])
        assert set(data["blocking"]) == {"copy_floor", "clone", "statecraft", "dcp"}
        assert set(data["durable"]) == {"statecraft", "sync", "dcp"}
        for row in (*data["blocking"].values(), *data["durable"].values()):
            assert len(row["samples_s"]) == 2
            assert all(positive(v) for v in row["samples_s"])
            assert row["min_s"] <= row["median_s"] <= row["max_s"]
        steps = data["step"]
        assert positive(steps["matmuls"])
        assert steps["baseline"]["samples_s"]
        assert steps["thread"]["samples_s"]
        assert steps["process"]["samples_s"]
        assert positive(data["first_save"]["blocking_s"])
        b, d, r = data["blocking"], data["durable"], data["ratios"]
        assert r["blocking_vs_copy_floor"] == pytest.approx(
            b["statecraft"]["median_s"] / b["copy_floor"]["median_s"]
        )
        assert r["durable_vs_sync"] == pytest.approx(
            d["statecraft"]["median_s"] / d["sync"]["median_s"]
        )
        assert r["step_slowdown_thread"] == pytest.approx(
            steps["thread"]["median_s"] / steps["baseline"]["median_s"] - 1
        )
        assert positive(r["clone_vs_copy_floor"])
        assert positive(r["dcp_blocking_vs_copy_floor"])
        assert positive(r["dcp_durable_vs_sync"])
        assert r["step_slowdown_process"] == pytest.approx(
            steps["process"]["median_s"] / steps["baseline"]["median_s"] - 1
        )
        assert data["targets"] == {
            "blocking_vs_copy_floor_max": 1.1,
            "step_slowdown_max": 0.1,
            "durable_vs_sync_max": 1.1,
        }
        assert [p for p in where.rglob("*") if p.is_file()] == []

    @pytest.mark.slow
    def test_text_names_each_row(self, async_run: tuple[int, dict, Path]) -> None:
        """The human table names every contender, the step slowdown and the three targets."""
        text = format_async(async_run[1]["data"])
        for row in (
            "copy_ into preallocated buffers (floor)",
            "clone()",
            "statecraft async save (2nd save on)",
            "torch.distributed.checkpoint.async_save",
            "synchronous save",
            "slowdown: thread",
            "blocking / copy_ floor",
            "step slowdown (thread)",
            "durable / sync save",
        ):
            assert row in text

    def test_a_zero_repeat_is_refused(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--repeats 0 is refused naming the option, before anything runs."""
        code = main(["bench", "async", "--repeats", "0", "--json"])
        out = json.loads(capsys.readouterr().out)
        assert code != 0
        assert "--repeat" in out["errors"][0]["message"]
