"""The statecraft command: machines check / draw, crashcheck, the --json envelope contract,
the public API, and a non-editable install that finds its tables from another directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import statecraft
from statecraft.cli import main
from statecraft.engine import load_table, render_mermaid
from statecraft.resources import machines_dir, spec_path

REPO = Path(__file__).resolve().parents[2]
ENVELOPE_KEYS = {"result_version", "command", "status", "exit_code", "data", "errors"}


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


class TestPublicApi:
    def test_all_is_sorted_and_pinned(self) -> None:
        """The top-level API is exactly these names, sorted; changing it is a deliberate act."""
        assert statecraft.__all__ == sorted(statecraft.__all__)
        assert statecraft.__all__ == [
            "AnyOf",
            "ArtifactReport",
            "BestN",
            "CheckpointConfig",
            "CheckpointInfo",
            "CheckpointList",
            "Checkpointer",
            "EveryNEpochs",
            "EveryNSeconds",
            "EveryNSteps",
            "InitReport",
            "KeepFn",
            "LatestN",
            "LoadedCheckpoint",
            "Outcome",
            "PendingSave",
            "ResumeResult",
            "RetentionPlan",
            "RetentionReport",
            "RunIdentity",
            "SaveFn",
            "SaveReport",
            "SchedulerIdentity",
            "StepEnd",
            "UpdateClocks",
            "ValidationReport",
            "ValidationStage",
            "__version__",
            "checkpoints",
            "init_from",
            "load_weights",
            "read_loop_state",
        ]
        for name in statecraft.__all__:
            assert hasattr(statecraft, name)


class TestMachinesCommand:
    def test_check_passes_for_the_shipped_tables(self, capsys) -> None:
        """Every shipped table passes the static checks with its bindings."""
        code, out = run_json(capsys, "machines", "check")
        assert code == 0
        assert set(out) == ENVELOPE_KEYS
        assert out["result_version"] == 1
        assert out["status"] == "ok"
        assert out["errors"] == []
        # Every table found in machines/ is checked; no list of machine names to keep in step.
        assert set(out["data"]) == {p.stem for p in machines_dir().glob("*.toml")}
        assert {"save", "resume"} <= set(out["data"])
        assert all(m["problems"] == [] for m in out["data"].values())
        assert all(m["spec"] == str(spec_path(name)) for name, m in out["data"].items())

    def test_check_reports_a_broken_table(self, capsys, tmp_path) -> None:
        """A malformed shipped table makes the check exit 1 and name the file and the problem."""
        for table in machines_dir().glob("*.toml"):  # every shipped spec needs its table
            (tmp_path / table.name).write_text(table.read_text())
        broken = (tmp_path / "save.toml").read_text().replace('to = "committed"', 'to = "comitted"')
        (tmp_path / "save.toml").write_text(broken)
        code, out = run_json(capsys, "machines", "check", "--machines-dir", str(tmp_path))
        assert code == 1
        assert out["status"] == "error"
        assert out["exit_code"] == 1
        messages = [e["message"] for e in out["errors"]]
        assert any("save.toml" in m and "'comitted' is not declared" in m for m in messages)
        assert all(e["code"] == "machine_definition" for e in out["errors"])

    def test_draw_prints_mermaid(self, capsys) -> None:
        """draw prints the table's mermaid diagram."""
        assert main(["machines", "draw", "save"]) == 0
        text = capsys.readouterr().out
        assert text.startswith("---\ntitle: save (save.toml)")
        assert "manifest_committed --> committed: advance_latest" in text

    def test_draw_unknown_machine(self, capsys) -> None:
        """An unknown machine name exits 2 listing the shipped ones."""
        code, out = run_json(capsys, "machines", "draw", "nope")
        assert code == 2
        shipped = ", ".join(sorted(p.stem for p in machines_dir().glob("*.toml")))
        assert f"no machine 'nope'; shipped: {shipped}" in out["errors"][0]["message"]

    def test_docs_diagrams_are_in_step_with_the_tables(self) -> None:
        """docs/diagrams/*.mmd are exactly what `statecraft machines draw` prints now."""
        for table in sorted(machines_dir().glob("*.toml")):
            diagram = REPO / "docs" / "diagrams" / f"{table.stem}.mmd"
            assert diagram.read_text() == render_mermaid(load_table(table)), (
                f"regenerate: statecraft machines draw {table.stem} > "
                f"docs/diagrams/{table.stem}.mmd"
            )

    def test_table_lists_every_table(self, capsys) -> None:
        """table --json lists every table of machines/ with its files, and the markdown."""
        code, out = run_json(capsys, "machines", "table")
        assert code == 0
        assert set(out) == ENVELOPE_KEYS
        assert out["command"] == "machines table"
        assert out["status"] == "ok"
        rows = out["data"]["machines"]
        assert [r["machine"] for r in rows] == sorted(p.stem for p in machines_dir().glob("*.toml"))
        save = next(r for r in rows if r["machine"] == "save")
        assert save == {
            "machine": "save",
            "table": "machines/save.toml",
            "bindings": "statecraft/checkpoint/save/bindings.py",
            "contract": "specs/save.toml",
            "diagram": "diagrams/save.mmd",
        }
        for row in rows:  # every path it names exists in the repository
            for key in ("table", "bindings", "contract"):
                assert (REPO / row[key]).is_file(), row
            assert (REPO / "docs" / row["diagram"]).is_file(), row
        assert out["data"]["markdown"].splitlines()[0] == (
            "| machine | table | bindings | contract | diagram |"
        )

    def test_table_reports_a_broken_table(self, capsys, tmp_path) -> None:
        """A table that does not load is left out of the table and named; the exit code is 1."""
        (tmp_path / "save.toml").write_text((machines_dir() / "save.toml").read_text())
        (tmp_path / "broken.toml").write_text("name = [")
        code, out = run_json(capsys, "machines", "table", "--machines-dir", str(tmp_path))
        assert code == 1
        assert out["status"] == "error"
        assert [r["machine"] for r in out["data"]["machines"]] == ["save"]
        assert [e["code"] for e in out["errors"]] == ["machine_definition"]
        assert "broken.toml" in out["errors"][0]["message"]

    def test_docs_machines_table_is_in_step_with_the_tables(self, capsys) -> None:
        """The table of docs/machines.md between its markers is exactly what
        `statecraft machines table` prints now."""
        from statecraft.cli.machines import TABLE_BEGIN, TABLE_END

        assert main(["machines", "table"]) == 0
        printed = capsys.readouterr().out
        doc = (REPO / "docs" / "machines.md").read_text()
        for marker in (TABLE_BEGIN, TABLE_END):
            assert doc.count(marker) == 1, f"docs/machines.md must hold {marker} once"
        region = doc.split(TABLE_BEGIN + "\n", 1)[1].split(TABLE_END, 1)[0]
        assert region == printed, (
            "docs/machines.md's machine table differs from the tables in machines/: regenerate "
            f"it with `statecraft machines table` and paste the output between {TABLE_BEGIN} "
            f"and {TABLE_END}"
        )


class TestCrashcheckCommand:
    def test_unknown_machine_exits_2(self, capsys) -> None:
        """crashcheck refuses a machine without scenarios, naming the known ones."""
        code, out = run_json(capsys, "crashcheck", "--machine", "nope")
        assert code == 2
        assert out["errors"][0]["code"] == "unknown_machine"

    def test_one_machine_report(self, capsys) -> None:
        """crashcheck --machine retention reports points, states, checks and no violations
        (retention: the cheapest machine with hundreds of crash points; save and resume are
        explored by test_crash_save)."""
        code, out = run_json(capsys, "crashcheck", "--machine", "retention", "--extra-subsets", "0")
        assert code == 0
        assert out["status"] == "ok"
        (machine,) = out["data"]["machines"]
        assert machine["machine"] == "retention"
        assert machine["crash_points"] > 100
        assert machine["crash_states"] > 300
        assert machine["checks_run"] > 0
        assert machine["violations"] == []
        assert out["data"]["wall_seconds"] > 0  # the run says how long it took
        assert out["data"]["jobs"] >= 1


@pytest.mark.slow
class TestNonEditableInstall:
    def test_wheel_ships_machines_and_specs(self, tmp_path: Path) -> None:
        """A non-editable install carries machines/ and specs/; `statecraft machines check`
        works from another directory."""
        wheel_dir = tmp_path / "wheel"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "-q",
                "-w",
                str(wheel_dir),
                str(REPO),
            ],
            check=True,
        )
        (wheel,) = wheel_dir.glob("statecraft-*.whl")
        target = tmp_path / "site"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--no-deps",
                "-q",
                "--target",
                str(target),
                str(wheel),
            ],
            check=True,
        )
        assert (target / "statecraft" / "_machines" / "save.toml").is_file()
        assert (target / "statecraft" / "_specs" / "save.manifest.schema.json").is_file()
        env = {**os.environ, "PYTHONPATH": str(target)}
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "import statecraft.resources as r, statecraft.cli as c;"
                "print(r.machines_dir()); raise SystemExit(c.main(['machines', 'check']))",
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        assert str(target / "statecraft" / "_machines") in done.stdout
        assert "ok   save" in done.stdout
