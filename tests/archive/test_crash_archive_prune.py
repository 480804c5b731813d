"""The crash harness proves specs/archive_prune.toml on the shipped machine (remote retention's
removal of one archived iteration: the commit record first, then the objects) and catches the
declared wrong variants: payloads before the commit record, keys found by substring, and a rerun
that takes an unpublished remainder for done."""

from __future__ import annotations

import pytest

from statecraft.cli.crashcheck import crashcheck
from statecraft.engine import load_spec
from statecraft.proofs import ExploreOptions, explore
from statecraft.proofs.archive.prune_broken import (
    delete_by_substring,
    payloads_before_the_commit_record,
    rerun_takes_unpublished_for_done,
)
from statecraft.proofs.archive.prune_scenarios import archive_prune_scenarios
from statecraft.resources import spec_path

SPEC = load_spec(spec_path("archive_prune"))


def test_crashcheck_proves_every_guarantee_substantively() -> None:
    """Every guarantee holds at every crash point (and an injected request error at every
    operation) of both scenarios under every crash kind, each judged substantively."""
    reports, scenario_reports = crashcheck(["archive_prune"], ExploreOptions(extra_subsets=2))
    (report,) = reports
    assert report.violations == (), report.violations[0].reproducer()
    assert report.vacuous == ()
    assert {s.scenario for s in scenario_reports} == {s.name for s in archive_prune_scenarios()}
    substantive = {g.id: 0 for g in SPEC.guarantees}
    for s in scenario_reports:
        for g_id, n in s.substantive_by_guarantee.items():
            substantive[g_id] += n
    assert all(n > 0 for n in substantive.values()), substantive


@pytest.mark.parametrize(
    ("variant", "guarantee", "words"),
    [
        (payloads_before_the_commit_record, "AP-NEVER-TORN", "torn published iteration"),
        (delete_by_substring, "AP-OTHERS-UNTOUCHED", "checkpoint_artifacts"),
        (rerun_takes_unpublished_for_done, "AP-RERUN", "left"),
    ],
)
def test_declared_broken_variant_is_caught(variant, guarantee, words) -> None:
    """Each wrong prune violates the guarantee its spec entry names, with a message that says
    what was found."""
    (scenario,) = variant()
    report = explore(scenario, SPEC, ExploreOptions(extra_subsets=0))
    assert guarantee in report.violated_guarantees()
    first = next(v for v in report.violations if v.guarantee == guarantee)
    assert words in first.message
