"""Tests of the statecraft.cli.bench package through the ``statecraft bench`` command: the shape
of the output at a tiny size. No speed is ever asserted (machines here are noisy); only that
every number is there and positive, and that the benchmark cleans up after itself."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import pytest
from bench_runs import ENVELOPE_KEYS, positive

from statecraft.cli import main
from statecraft.cli.bench import format_save
from statecraft.cli.bench.report import format_sweep
from statecraft.cli.bench.sweep import parse_sizes


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


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
            "require_admissible",
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


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict, Path]:
    """One tiny ``bench save --sizes ... --json`` run shared by the sweep tests."""
    directory = tmp_path_factory.mktemp("sweep")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(
            [
                "bench",
                "save",
                "--sizes",
                "64KiB,256KiB",
                "--repeat",
                "2",
                "--dir",
                str(directory),
                "--json",
            ]
        )
    return code, json.loads(out.getvalue()), directory


class TestBenchSaveSizes:
    def test_envelope_and_rows(self, sweep_run) -> None:
        """``--sizes`` prints the bench save envelope with one row per size, in order, each
        with the medians of statecraft, the fair baseline and raw write."""
        code, out, _ = sweep_run
        assert code == 0
        assert (out["command"], out["status"], out["errors"]) == ("bench save", "ok", [])
        data = out["data"]
        assert data["repeat"] == 2
        assert [r["size"] for r in data["sizes"]] == ["64KiB", "256KiB"]
        assert [r["requested_bytes"] for r in data["sizes"]] == [64 << 10, 256 << 10]
        for row in data["sizes"]:
            assert row["files"] == ["data.pt", "model.pt", "optim.pt", "trainer.pt"]
            for name in ("statecraft", "baseline", "raw_write"):
                assert positive(row[name]["median_s"]), (row["size"], name)
                assert len(row[name]["samples_s"]) == 2
                assert row[name]["min_s"] <= row[name]["median_s"] <= row[name]["max_s"]
            assert positive(row["ratio_vs_baseline"])
            assert positive(row["raw_vs_save"])
            assert row["raw_write"]["bytes"] == row["baseline"]["bytes"]

    def test_the_baseline_writes_the_same_files(self, sweep_run) -> None:
        """The baseline writes the checkpoint's own payloads: its byte count is within a few
        percent of the save's (torch.save framing differs only by the zip CRC setting)."""
        for row in sweep_run[1]["data"]["sizes"]:
            ours, base = row["statecraft"]["bytes"], row["baseline"]["bytes"]
            assert abs(ours - base) <= 0.05 * base, row["size"]
            assert row["state_bytes"] <= base

    def test_effects_and_fixed_cost(self, sweep_run) -> None:
        """Each row lists the save effects' median times; the fixed cost has both intercepts
        and the excess at the smallest size; the targets are the issue's."""
        data = sweep_run[1]["data"]
        for row in data["sizes"]:
            assert [e["effect"] for e in row["statecraft"]["effects"]] == [
                "stage_payloads",
                "prepare_iteration",
                "write_components",
                "write_control",
                "commit_manifest",
                "advance_latest",
            ]
        fixed = data["fixed_cost"]
        assert set(fixed) == {
            "statecraft_intercept_s",
            "baseline_intercept_s",
            "smallest_size",
            "smallest_excess_s",
        }
        assert fixed["smallest_size"] == "64KiB"
        assert isinstance(fixed["statecraft_intercept_s"], float)
        assert fixed["smallest_excess_s"] == data["sizes"][0]["excess_s"]
        assert data["targets"] == {"ratio_vs_baseline_max": 1.15, "raw_vs_save_min_at_1GiB": 0.95}

    def test_text_table(self, sweep_run) -> None:
        """The human table names the baseline, each size, the fixed cost and the targets."""
        text = format_sweep(sweep_run[1]["data"])
        assert "baseline = the same files, each torch.save to a temporary + fsync + rename" in text
        assert "\n64KiB " in text
        assert "\n256KiB " in text
        assert "fixed per-save cost: statecraft intercept " in text
        assert "(target <= 1.15: " in text
        assert "not measured (add 1GiB to --sizes)" in text
        assert "  write_components" in text

    def test_files_are_removed(self, sweep_run) -> None:
        """Nothing is left under ``--dir`` after the sweep."""
        assert list(sweep_run[2].iterdir()) == []

    @pytest.mark.parametrize(
        ("sizes", "expected"),
        [("1MiB,12XB", "'12XB'"), ("1KiB", "at least 64KiB"), ("", "a size like 1MiB")],
    )
    def test_rejects_a_bad_size(self, capsys, sizes: str, expected: str) -> None:
        """A size that does not parse or is below 64 KiB is a config error naming
        ``--sizes``, before anything is measured."""
        code, out = run_json(capsys, "bench", "save", "--sizes", sizes or ",")
        assert code == 1
        assert out["errors"][0]["code"] == "config_invalid"
        assert "--sizes" in out["errors"][0]["message"]
        assert expected in out["errors"][0]["message"]

    def test_parse_sizes_units(self) -> None:
        """Units B, KiB, MiB and GiB are accepted in any case; a bare number is MiB."""
        assert parse_sizes("1MiB,16mib, 2GiB,512kib,3,65536B") == [
            1 << 20,
            16 << 20,
            2 << 30,
            512 << 10,
            3 << 20,
            65536,
        ]


class TestBenchValidation:
    def test_json_reports_each_boundary_and_its_ratio_to_the_save(self, capsys, tmp_path) -> None:
        """bench validation times a full save, a durable validation and a model-only artifact
        of one step, and reports medians, ratios to the save and the validation's extra ms;
        the scratch directory is left empty."""
        code, out = run_json(
            capsys,
            "bench",
            "validation",
            "--size-mib",
            "1",
            "--repeat",
            "1",
            "--dir",
            str(tmp_path),
        )
        assert code == 0, out["errors"]
        data = out["data"]
        assert set(data["seconds"]) == {"save", "durable_validation", "artifact_model"}
        assert all(positive(v) for v in data["seconds"].values())
        assert all(len(v) == 1 for v in data["samples"].values())
        ratios = data["ratios"]
        assert ratios["durable_validation/save"] == pytest.approx(
            data["seconds"]["durable_validation"] / data["seconds"]["save"]
        )
        assert positive(ratios["artifact_model/save"])
        assert math.isfinite(data["durable_validation_extra_ms"])
        assert [p for p in tmp_path.rglob("*") if p.is_file()] == []

    def test_text_names_each_row(self, capsys, tmp_path) -> None:
        """The human table has one row per boundary kind and the extra milliseconds."""
        code = main(
            ["bench", "validation", "--size-mib", "1", "--repeat", "1", "--dir", str(tmp_path)]
        )
        text = capsys.readouterr().out
        assert code == 0
        for row in ("full checkpoint", "durable validation", "model-only artifact", "adds"):
            assert row in text

    def test_a_zero_repeat_is_refused(self, capsys) -> None:
        """--repeat 0 is refused naming the option, before anything runs."""
        code, out = run_json(capsys, "bench", "validation", "--repeat", "0")
        assert code != 0
        assert "repeat" in out["errors"][0]["message"]
