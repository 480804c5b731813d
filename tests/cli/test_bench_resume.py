"""``statecraft bench save --resume-sizes``: the shape of the resume figure at a tiny size (no
speed is asserted), its table, and that it cleans up after itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from bench_runs import ENVELOPE_KEYS, bench_json, positive

from statecraft.cli.bench.resume import format_resume_sizes


@pytest.fixture(scope="module")
def resume_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], Path]:
    """One ``bench save --resume-sizes 1MiB --repeat 2 --json`` run shared by the tests."""
    return bench_json(
        tmp_path_factory.mktemp("bench-resume"), "save", "--resume-sizes", "1MiB", "--repeat", "2"
    )


@pytest.mark.slow
class TestBenchResumeSizes:
    def test_envelope_and_rows(self, resume_run: tuple[int, dict[str, Any], Path]) -> None:
        """One row per size with the checkpoint's three files, and for each cache state that
        ran: every contender's median and range, the Checkpointer's construction and close,
        and the paired ratio's median and range (positive, min <= median <= max)."""
        code, out, _ = resume_run
        assert code == 0
        assert set(out) == ENVELOPE_KEYS
        assert (out["command"], out["status"]) == ("bench save", "ok")
        data = out["data"]
        assert (data["repeat"], data["target"]) == (2, 0.9)
        (row,) = data["sizes"]
        assert row["size_mib"] == 1
        assert sorted(row["files"]) == ["model.pt", "optim.pt", "trainer.pt"]
        assert row["warm"] is not None
        for cache in ("warm", "cold"):
            if row[cache] is None:
                continue
            for name in ("statecraft", "torch_load", "torch_load_apply", "construct", "close"):
                figure = row[cache][name]
                assert all(positive(figure[k]) for k in ("median_s", "min_s", "max_s"))
                assert figure["min_s"] <= figure["median_s"] <= figure["max_s"]
            ratio = row[cache]["ratio"]
            assert all(positive(ratio[k]) for k in ("median", "min", "max"))
            assert ratio["min"] <= ratio["median"] <= ratio["max"]

    def test_table_names_the_target(self, resume_run: tuple[int, dict[str, Any], Path]) -> None:
        """The human table has a line per size and cache state with the ratio's verdict."""
        text = format_resume_sizes(resume_run[1]["data"])
        assert "ratio (target >= 0.9)" in text
        assert any(line.split()[:2] == ["1Mi", "warm"] for line in text.splitlines())

    def test_leaves_nothing_behind(self, resume_run: tuple[int, dict[str, Any], Path]) -> None:
        """The scratch directory is empty afterwards."""
        assert list(resume_run[2].iterdir()) == []
