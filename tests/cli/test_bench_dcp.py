"""``statecraft bench dcp`` at a tiny size on 2 gloo ranks: the envelope's shape, every time
positive, per-rank RSS figures, the S3 part skipped or reported, nothing left in the scratch
directory; bad arguments refused. No speed is asserted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from bench_runs import ENVELOPE_KEYS, bench_json, positive

from statecraft.cli.bench.dcp import format_dcp, measure_dcp
from statecraft.errors import ConfigError

TIMES = ("save", "plain_save", "load", "plain_load")


@pytest.fixture(scope="module")
def dcp_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], Path]:
    """One ``bench dcp --size-mib 2 --ranks 2 --repeat 1 --no-s3 --json`` run."""
    where = tmp_path_factory.mktemp("bench-dcp")
    return bench_json(where, "dcp", "--size-mib", "2", "--ranks", "2", "--repeat", "1", "--no-s3")


@pytest.mark.slow
class TestBenchDcp:
    def test_envelope_and_figures(self, dcp_run: tuple[int, dict[str, Any], Path]) -> None:
        """Exit 0, the envelope's keys, positive medians, ratios, one RSS row per rank with
        its own shard bytes, and the S3 part skipped with a reason."""
        code, envelope, _ = dcp_run
        assert code == 0
        assert set(envelope) == ENVELOPE_KEYS
        data = envelope["data"]
        assert data["ranks"] == 2
        assert all(positive(data["seconds"][k]) for k in TIMES), data["seconds"]
        assert positive(data["save_ratio"])
        assert positive(data["load_ratio"])
        assert data["save_target"] == 1.05
        assert [r["rank"] for r in data["rss"]] == [0, 1]
        assert all(positive(r["shard_bytes"]) for r in data["rss"])
        assert all(r["rss_increase_bytes"] >= 0 for r in data["rss"])
        assert data["s3"] == {"skipped": "--no-s3"}
        blocking = data["blocking"]
        for kind in ("sync", "async", "copy"):
            cell = blocking["seconds"][kind]
            assert cell["n"] >= 5, kind
            assert 0 < cell["min"] <= cell["median"] <= cell["max"], (kind, cell)
        assert positive(blocking["async_over_sync"])
        assert positive(blocking["async_over_copy"])
        assert "async DCP save" in format_dcp(data)
        assert "s3: skipped: --no-s3" in format_dcp(data)

    def test_nothing_left_behind(self, dcp_run: tuple[int, dict[str, Any], Path]) -> None:
        """The scratch directory the bench made under --dir is gone."""
        _, _, where = dcp_run
        assert list(where.iterdir()) == []


def test_bad_arguments_are_refused() -> None:
    """A non-positive --ranks is a ConfigError naming the flag, before any rank starts."""
    with pytest.raises(ConfigError, match="--ranks"):
        measure_dcp(size_mib=1, ranks=0, repeat=1, s3=False)
