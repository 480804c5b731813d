"""Tests of the statecraft.cli.bench package through the ``statecraft bench`` command: the shape
of the output at a tiny size. No speed is ever asserted (machines here are noisy); only that
every number is there and positive, and that the benchmark cleans up after itself."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest

from statecraft.cli import main
from statecraft.cli.bench import format_save

ENVELOPE_KEYS = {"result_version", "command", "status", "exit_code", "data", "errors"}


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def positive(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and value > 0
        and (math.isfinite(value))
    )


@pytest.fixture(scope="module")
def save_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict, Path]:
    """One tiny ``bench save --json`` run shared by the save tests (it spawns a process)."""
    directory = tmp_path_factory.mktemp("bench")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(
            ["bench", "save", "--size-mib", "8", "--repeat", "1", "--dir", str(directory), "--json"]
        )
    return code, json.loads(out.getvalue()), directory


@pytest.mark.slow
class TestBenchSave:
    def test_envelope(self, save_run) -> None:
        """The JSON output is the versioned envelope of a successful ``bench save``."""
        code, out, _ = save_run
        assert code == 0
        assert set(out) == ENVELOPE_KEYS
        assert (out["command"], out["status"], out["exit_code"], out["errors"]) == (
            "bench save",
            "ok",
            0,
            [],
        )

    def test_throughputs_are_positive(self, save_run) -> None:
        """Every baseline and statecraft measurement has positive seconds and GB/s."""
        data = save_run[1]["data"]
        assert data["size_mib"] == 8
        assert data["state_bytes"] == 8 << 20
        assert set(data["load"]) == {"torch_load", "torch_load_mmap", "statecraft_resume"}
        rows = [*data["save"].values()]
        for load in data["load"].values():
            rows += [row for row in (load["warm"], load["cold"]) if row is not None]
        assert len(rows) >= 6
        for row in rows:
            assert positive(row["seconds"]), row
            assert positive(row["gb_per_s"]), row

    def test_effect_splits(self, save_run) -> None:
        """The save and resume report the time of each effect their machines ran."""
        data = save_run[1]["data"]
        save = data["save"]["statecraft"]
        assert save["bytes"] > data["state_bytes"]  # model.pt plus optim.pt and trainer.pt
        assert [e["effect"] for e in save["effects"]] == [
            "stage_payloads",
            "prepare_iteration",
            "write_components",
            "write_control",
            "commit_manifest",
            "advance_latest",
        ]
        resume = data["load"]["statecraft_resume"]["warm"]
        assert [e["effect"] for e in resume["effects"]] == [
            "list_candidates",
            "verify_next_candidate",
            "load_checkpoint",
        ]
        assert 0 < resume["verify_share"] < 1

    def test_resume_rss_and_ratios(self, save_run) -> None:
        """The subprocess reports a peak RSS, and every ratio is a positive number."""
        data = save_run[1]["data"]
        rss = data["resume_rss"]
        assert rss["method"] in ("clear_refs", "ru_maxrss")
        assert rss["state_bytes"] == data["state_bytes"]
        assert positive(rss["baseline_bytes"])
        assert rss["peak_bytes"] >= rss["baseline_bytes"]
        assert rss["increase_ratio"] >= 0
        for name, value in data["ratios"].items():
            if name == "resume_rss_increase" or (name.endswith("_cold") and value is None):
                continue  # the increase may round to 0; cold loads need posix_fadvise
            assert positive(value), name

    def test_targets_and_ratio_spread(self, save_run) -> None:
        """The ratios carry the issue's targets, and each paired-run spread has min <= max."""
        data = save_run[1]["data"]
        assert data["ratios"]["save_vs_raw_target"] == 0.95
        assert data["ratios"]["resume_vs_torch_load_target"] == 0.9
        spread = data["ratio_spread"]
        assert set(spread) == {
            "save_vs_raw",
            "save_vs_raw_writeback",
            "resume_vs_torch_load",
            "resume_vs_torch_load_cold",
        }
        for name, row in spread.items():
            if row is None and name.endswith("_cold"):
                continue  # cold loads need posix_fadvise
            assert positive(row["min"]), name
            assert row["min"] <= row["max"], name

    def test_text_table_names_the_targets(self, save_run) -> None:
        """The human table (what ``bench save`` prints without ``--json``) states each target
        with its verdict, and the ratio spread."""
        text = format_save(save_run[1]["data"])
        assert "save / raw write" in text
        assert "(target >= 0.95: " in text
        assert "(target >= 0.9: " in text
        assert "ratio spread over the 1 paired runs (min .. max):" in text

    def test_files_are_removed(self, save_run) -> None:
        """Nothing is left under ``--dir`` after the benchmark."""
        assert list(save_run[2].iterdir()) == []

    def test_rejects_a_zero_size(self, capsys) -> None:
        """``--size-mib 0`` is a config error in the same envelope, naming the flag."""
        code, out = run_json(capsys, "bench", "save", "--size-mib", "0")
        assert code == 1
        assert out["status"] == "error"
        assert out["errors"][0]["code"] == "config_invalid"
        assert "--size-mib" in out["errors"][0]["message"]


class TestBenchEngine:
    def test_envelope_and_numbers(self, capsys) -> None:
        """``bench engine --json`` reports positive microseconds per transition for every chain,
        the bare-call baseline, and the simulated save run's engine share."""
        code, out = run_json(capsys, "bench", "engine", "--transitions", "128")
        assert code == 0
        assert set(out) == ENVELOPE_KEYS
        assert (out["command"], out["status"]) == ("bench engine", "ok")
        data = out["data"]
        assert positive(data["bare_call_us"])
        assert [c["states"] for c in data["chains"]] == [4, 16, 64]
        for chain in data["chains"]:
            assert chain["transitions"] == chain["runs"] * chain["states"]
            for key in ("us_per_transition", "us_per_run", "vs_bare_call"):
                assert positive(chain[key]), (chain, key)
        sim = data["sim_save"]
        assert sim["transitions_per_run"] == 6
        for key in (
            "observe_us_per_run",
            "us_per_run",
            "effects_us_per_run",
            "engine_us_per_transition",
        ):
            assert positive(sim[key]), key
        assert 0 < sim["engine_share"] < 1

    def test_text_table(self, capsys) -> None:
        """Without ``--json`` the command prints a table naming each chain and the baseline."""
        assert main(["bench", "engine", "--transitions", "64"]) == 0
        text = capsys.readouterr().out
        assert "us/transition" in text
        assert "bare call" in text
        assert "save machine over SimWorld" in text

    def test_rejects_zero_transitions(self, capsys) -> None:
        """``--transitions 0`` is a config error naming the flag."""
        code, out = run_json(capsys, "bench", "engine", "--transitions", "0")
        assert code == 1
        assert out["errors"][0]["code"] == "config_invalid"
        assert "--transitions" in out["errors"][0]["message"]
