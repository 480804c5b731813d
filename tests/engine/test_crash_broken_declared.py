"""Every guarantee earns its keep: specs declare deliberately wrong variants (``[[broken]]``),
``crashcheck --broken`` fails unless each is caught violating what it declares, and
``machines check`` fails a spec whose declared variants leave a guarantee uncaught."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from statecraft.cli import main
from statecraft.cli.crashcheck_broken import broken_check
from statecraft.engine import contract_problems, load_spec, load_table
from statecraft.errors import SpecError
from statecraft.proofs import ExploreOptions
from statecraft.resources import machine_path, spec_path

FAST = ExploreOptions(extra_subsets=0, faults=False)


def _spec_copy(tmp_path: Path, name: str, edit) -> Path:
    target = tmp_path / f"{name}.toml"
    target.write_text(edit(spec_path(name).read_text()))
    for schema in spec_path(name).parent.glob("*.json"):
        shutil.copy(schema, tmp_path / schema.name)
    return target


class TestDeclarations:
    def test_shipped_specs_declare_a_catcher_for_every_guarantee(self) -> None:
        for name in ("emergency", "publish", "fetch"):
            spec = load_spec(spec_path(name))
            assert spec.broken
            assert spec.uncaught() == (), name

    def test_catches_naming_no_guarantee_is_refused(self, tmp_path) -> None:
        path = _spec_copy(
            tmp_path,
            "fetch",
            lambda text: text.replace('"FET-LOCAL-ONLY-DST"]', '"FET-NO-SUCH"]'),
        )
        with pytest.raises(SpecError, match=r"catches names \['FET-NO-SUCH'\]"):
            load_spec(path)

    def test_a_variant_without_catches_is_refused(self, tmp_path) -> None:
        path = _spec_copy(tmp_path, "fetch", lambda text: text + '\n[[broken]]\nvariant = "m:f"\n')
        with pytest.raises(SpecError, match="catches must list the guarantees"):
            load_spec(path)

    def test_machines_check_fails_a_guarantee_no_variant_catches(self, tmp_path) -> None:
        """Dropping the one variant that catches EMERGENCY-PENDING fails the contract check,
        naming the guarantee."""

        def drop_pending(text: str) -> str:
            return re.sub(
                r'\[\[broken\]\]\nvariant = "[^"]*pending_stop_saved_as_plain_checkpoint"\n'
                r"catches = \[[^]]*\]\ndoc = \"[^\"]*\"\n",
                "",
                text,
            )

        spec = load_spec(_spec_copy(tmp_path, "emergency", drop_pending))
        assert spec.uncaught() == ("EMERGENCY-PENDING",)
        problems = contract_problems(load_table(machine_path("emergency")), spec)
        assert any("no [[broken]] variant catches EMERGENCY-PENDING" in p for p in problems)

    def test_a_variant_that_does_not_import_is_named(self, tmp_path) -> None:
        spec = load_spec(
            _spec_copy(
                tmp_path,
                "fetch",
                lambda text: text.replace("fetch_broken:sha256_check_skipped", "fetch_broken:nope"),
            )
        )
        problems = contract_problems(load_table(machine_path("fetch")), spec)
        assert any("broken variant" in p and "fetch_broken:nope" in p for p in problems)

    def test_machines_check_lists_the_unproven(self, capsys) -> None:
        main(["machines", "check", "--json"])
        data = json.loads(capsys.readouterr().out)["data"]
        assert data["emergency"]["without_broken_variant"] == []
        save = load_spec(spec_path("save"))
        assert data["save"]["without_broken_variant"] == list(save.uncaught())


class TestBrokenCheck:
    def test_every_publish_variant_is_caught(self) -> None:
        reports = broken_check(["publish"], FAST)
        assert len(reports) == len(load_spec(spec_path("publish")).broken)
        assert all(r.caught == r.catches and r.missed == () for r in reports), reports
        assert all(r.crash_states > 0 for r in reports)

    def test_a_variant_that_is_not_caught_fails(self, tmp_path, capsys) -> None:
        """A declared variant that violates nothing it claims (coverage by step number does
        not touch the pending stage) is reported not caught, and the command exits 1."""
        (tmp_path / "specs").mkdir()
        _spec_copy(
            tmp_path / "specs",
            "emergency",
            lambda text: (
                text.split("\n[[broken]]")[0]
                + "\n[[broken]]\n"
                + 'variant = "statecraft.proofs.stop.broken:coverage_by_step_number"\n'
                + 'catches = ["EMERGENCY-COVERAGE", "EMERGENCY-PENDING"]\n'
            ),
        )
        main(["crashcheck", "--machine", "emergency", "--broken", "--jobs", "1", "--json",
              "--specs-dir", str(tmp_path / "specs")])  # fmt: skip
        out = json.loads(capsys.readouterr().out)
        assert out["exit_code"] == 1
        (report,) = out["data"]["broken"]
        assert report["caught"] == ["EMERGENCY-COVERAGE"]
        assert report["missed"] == ["EMERGENCY-PENDING"]
        assert any("not caught violating EMERGENCY-PENDING" in e["message"] for e in out["errors"])
