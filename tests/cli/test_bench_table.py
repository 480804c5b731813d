"""Tests of ``statecraft bench`` with no subcommand: the one table of every figure, at a tiny
size. No speed is asserted; only the table's shape: every declared figure has a row, every row
has its figure, baseline, ratio, range, target and met, every measured row has at least five
interleaved repetitions whose median and range are what the row says, and the human table
names every figure."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from bench_runs import ENVELOPE_KEYS, bench_json, positive

from statecraft.cli import main
from statecraft.cli.bench.figures import Figure, FigureRun, Measured
from statecraft.cli.bench.table import MIN_REPEAT, all_figures, format_table, measure_table
from statecraft.errors import ConfigError

ROW_KEYS = {"figure", "baseline", "ratio", "range", "target", "met"}


@pytest.fixture(scope="module")
def table_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict, Path]:
    """One tiny ``bench --quick --json`` run shared by the tests."""
    where = tmp_path_factory.mktemp("bench-table")
    return bench_json(where, "--quick", "--max-mib", "1")


@pytest.mark.slow  # every quick figure, at 1 MiB: about a minute on a loaded machine
class TestBenchTable:
    def test_every_row_has_the_columns(self, table_run: tuple[int, dict, Path]) -> None:
        """The envelope's rows are the declared figures, in order, each with the columns."""
        code, out, where = table_run
        assert code == 0, out["errors"]
        assert set(out) == ENVELOPE_KEYS
        assert out["command"] == "bench"
        data = out["data"]
        assert data["quick"] is True
        assert data["slow"] is False
        assert data["repeat"] == MIN_REPEAT
        rows = data["rows"]
        assert [r["figure"] for r in rows] == [f.name for f in all_figures()]
        for row in rows:
            assert set(row) >= ROW_KEYS, row
        assert list(where.iterdir()) == []  # the scratch space is gone

    def test_measured_rows(self, table_run: tuple[int, dict, Path]) -> None:
        """Every figure that is neither slow nor --full only was measured: at least five
        repetitions, the ratio their median, the range their extremes, met judged against
        the target (none where no target is declared)."""
        rows = table_run[1]["data"]["rows"]
        measured = [r for r in rows if not r.get("skipped")]
        assert len(measured) >= 10
        for row, figure in zip(rows, all_figures(), strict=True):
            assert bool(row.get("skipped")) == (figure.slow or figure.full_only), row
        for row in measured:
            values = row["values"]
            assert len(values) >= MIN_REPEAT
            assert row["ratio"] == pytest.approx(statistics.median(values))
            assert row["range"] == [min(values), max(values)]
            if row["unit"] == "x":
                assert all(positive(v) for v in values), row
            assert row["size"]
            if row["target"] is None:
                assert row["met"] is None
            else:
                ok = row["ratio"] <= row["target"] if row["better"] == "lower" else (
                    row["ratio"] >= row["target"]
                )
                assert row["met"] is ok

    def test_human_table(self, table_run: tuple[int, dict, Path]) -> None:
        """The text table has the header and a line per figure, skipped ones explained."""
        text = format_table(table_run[1]["data"])
        lines = text.splitlines()
        assert lines[2].split() == ["figure", "size", "baseline", "ratio", "range", "target",
                                    "met"]  # fmt: skip
        for row in table_run[1]["data"]["rows"]:
            assert row["figure"] in text
        assert "skipped:" in text
        assert "--all only" in text
        assert "--full only" in text


def test_one_run_serves_the_figures_that_share_it(tmp_path: Path) -> None:
    """A figure registered in a module's FIGURES is a row; ``once`` runs a measurement once
    for every figure taken from it, and a figure's values give its median and range."""
    calls: list[int] = []

    def measure(ctx: FigureRun) -> Measured:
        ctx.once("shared", lambda: calls.append(1))
        return Measured((3.0, 1.0, 2.0, 5.0, 4.0), "1 MiB")

    figure = Figure("toy", "nothing", 2.5, "lower", measure)
    ctx = FigureRun(root=str(tmp_path), repeat=5)
    assert figure.run(ctx).median == 3.0
    assert figure.run(ctx).median == 3.0
    assert calls == [1]
    assert figure.met(3.0) is False
    assert figure.met(2.0) is True
    assert Figure("toy", "nothing", None, "higher", measure).met(1.0) is None


def test_fewer_than_five_repetitions_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """``--repeat 4`` is refused before anything runs, naming the flag and the bound."""
    with pytest.raises(ConfigError, match="--repeat"):
        measure_table(repeat=4)
    code = main(["bench", "--repeat", "2", "--only", "save"])
    assert code == 1
    assert "--repeat" in capsys.readouterr().err


def test_only_that_matches_nothing_is_refused() -> None:
    with pytest.raises(ConfigError, match="--only"):
        measure_table(only="no-such-figure")
