"""Acceptance: a new transaction is four files (table, spec, bindings, scenarios) in any
directory, and ``machines check`` and ``crashcheck`` take it with no edit to the library."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from transaction_unit_files import NO_FSYNC_WRITE, Unit, unit_factory

from statecraft.cli import main
from statecraft.cli.crashcheck import crashcheck, vacuous_errors
from statecraft.proofs import ExploreOptions
from statecraft.storage import CrashKind


@pytest.fixture
def make_unit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Unit]]:
    """Writes swap units into ``tmp_path``."""
    yield from unit_factory(tmp_path, monkeypatch)


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


class TestNewTransactionUnit:
    def test_machines_check_accepts_it(self, make_unit, capsys) -> None:
        """The unit's table, bindings and contract pass every check, found from the dirs."""
        unit = make_unit()
        code, out = run_json(capsys, "machines", "check", *unit.dirs)
        assert out["errors"] == []
        assert code == 0
        assert set(out["data"]) == {"swap"}
        assert out["data"]["swap"]["problems"] == []
        assert out["data"]["swap"]["states"] == 3

    def test_its_broken_variants_are_caught(self, make_unit, capsys) -> None:
        """crashcheck --broken explores the unit's two declared variants and catches each on
        the guarantee it names; dropping one fails machines check, naming the guarantee."""
        unit = make_unit()
        code, out = run_json(capsys, "crashcheck", "--broken", "--jobs", "1", *unit.dirs)
        assert out["errors"] == []
        assert code == 0
        caught = {tuple(r["caught"]) for r in out["data"]["broken"]}
        assert caught == {("SWAP-COMPLETE",), ("SWAP-RECOVERS",)}
        unit.edit("specs/swap.toml", '"SWAP-RECOVERS"]', '"SWAP-COMPLETE"]')
        code, out = run_json(capsys, "machines", "check", *unit.dirs)
        assert code == 1
        assert any("no [[broken]] variant catches SWAP-RECOVERS" in e["message"]
                   for e in out["errors"])  # fmt: skip

    def test_draw_takes_the_directory(self, make_unit, capsys) -> None:
        """draw renders a table of another machines directory."""
        unit = make_unit()
        assert main(["machines", "draw", "swap", "--machines-dir", str(unit.machines_dir)]) == 0
        assert "data_durable --> committed: switch_pointer" in capsys.readouterr().out

    def test_crashcheck_explores_it(self, make_unit, capsys) -> None:
        """crashcheck crashes the unit at every point: states and checks > 0, no violation."""
        unit = make_unit()
        code, out = run_json(capsys, "crashcheck", *unit.dirs, "--extra-subsets", "0")
        assert out["errors"] == []
        assert code == 0
        (machine,) = out["data"]["machines"]
        assert machine["machine"] == "swap"
        assert machine["scenarios"] == ["swap-v1-to-v2"]
        assert machine["crash_states"] > machine["crash_points"] > 10
        assert machine["checks_run"] > 0
        assert set(machine["checks_by_guarantee"]) == {"SWAP-COMPLETE", "SWAP-RECOVERS"}
        assert all(n > 0 for n in machine["checks_by_guarantee"].values())
        assert machine["vacuous"] == []
        assert machine["violations"] == []

    def test_crashcheck_machine_option(self, make_unit, capsys) -> None:
        """--machine selects a table of the given directory; an unknown one exits 2."""
        unit = make_unit()
        code, out = run_json(capsys, "crashcheck", *unit.dirs, "--machine", "swap")
        assert code == 0
        assert [m["machine"] for m in out["data"]["machines"]] == ["swap"]
        code, out = run_json(capsys, "crashcheck", *unit.dirs, "--machine", "save")
        assert code == 2
        assert out["errors"][0]["code"] == "unknown_machine"
        assert "no machine 'save' in " in out["errors"][0]["message"]
        assert "known: swap" in out["errors"][0]["message"]

    def test_crashcheck_catches_a_missing_fsync(self, make_unit, capsys) -> None:
        """The broken variant (data renamed into place unsynced) is flagged by crashcheck."""
        unit = make_unit(write_data=NO_FSYNC_WRITE)
        code, out = run_json(capsys, "machines", "check", *unit.dirs)
        assert code == 0, "the broken variant is well-formed: only crashing finds the bug"
        code, out = run_json(capsys, "crashcheck", *unit.dirs, "--extra-subsets", "0")
        assert code == 1
        (machine,) = out["data"]["machines"]
        violated = {v["guarantee"] for v in machine["violations"]}
        assert "SWAP-COMPLETE" in violated
        messages = [e["message"] for e in out["errors"] if e["code"] == "guarantee_violation"]
        assert any("power_loss" in m and "`current` names data.v2" in m for m in messages)

    def test_a_directory_that_does_not_exist(self, capsys, tmp_path) -> None:
        """A --machines-dir that is not a directory is refused, naming it."""
        code, out = run_json(capsys, "machines", "check", "--machines-dir", str(tmp_path / "x"))
        assert code == 1
        assert f"--machines-dir {tmp_path / 'x'} is not a directory" in out["errors"][0]["message"]


class TestVacuousGuarantees:
    def test_a_guarantee_that_ran_no_check_fails(self, make_unit) -> None:
        """A guarantee that no crash state reached is reported vacuous, naming spec and fix."""
        unit = make_unit()
        unit.edit(
            "specs/swap.toml",
            'kinds = ["process_kill", "power_loss"]',
            'kinds = ["power_loss"]',
        )
        options = ExploreOptions(kinds=(CrashKind.PROCESS_KILL,), extra_subsets=0)
        reports, _ = crashcheck(["swap"], options, specs_dir=unit.specs_dir)
        (report,) = reports
        assert report.vacuous == ("SWAP-RECOVERS",)
        assert report.checks_by_guarantee["SWAP-COMPLETE"] > 0
        ((code, message),) = vacuous_errors(reports)
        assert code == "vacuous_guarantee"
        assert str(unit.specs_dir / "swap.toml") in message
        assert "guarantee SWAP-RECOVERS ran 0 checks" in message
        assert "widen its at/kinds or add a scenario" in message


class TestSharedScenarios:
    def test_two_machines_naming_one_factory_are_explored_once(self, make_unit) -> None:
        """Specs that name the same scenarios factory share one exploration, and each machine
        is credited with its own guarantees' checks (as save and resume are)."""
        unit = make_unit()
        table = (unit.machines_dir / "swap.toml").read_text()
        (unit.machines_dir / "twin.toml").write_text(
            table.replace('name = "swap"', 'name = "twin"')
        )
        spec = (unit.specs_dir / "swap.toml").read_text()
        (unit.specs_dir / "twin.toml").write_text(
            spec.replace('machine = "swap"', 'machine = "twin"').replace("SWAP-", "TWIN-")
        )
        reports, scenario_reports = crashcheck(
            ["swap", "twin"], ExploreOptions(extra_subsets=0), specs_dir=unit.specs_dir
        )
        assert [s.scenario for s in scenario_reports] == ["swap-v1-to-v2"]
        swap, twin = reports
        assert swap.crash_states == twin.crash_states == scenario_reports[0].crash_states
        assert set(swap.checks_by_guarantee) == {"SWAP-COMPLETE", "SWAP-RECOVERS"}
        assert set(twin.checks_by_guarantee) == {"TWIN-COMPLETE", "TWIN-RECOVERS"}
        assert (
            swap.checks_by_guarantee["SWAP-COMPLETE"] == twin.checks_by_guarantee["TWIN-COMPLETE"]
        )
        assert swap.checks_run > 0
