"""The crash harness proves specs/incremental_gc.toml (checkpoint_format=incremental: the
collection of unreferenced blobs alone, and a write job that saves with the production
IncrementalWriter, prunes and collects) and catches the declared wrong variants: a
collection that trusts a stale reference count, a blob published before it is durable, and
an unchanged-check that trusts the version counter."""

from __future__ import annotations

import pytest

from statecraft.cli.crashcheck import crashcheck
from statecraft.engine import load_spec
from statecraft.proofs import ExploreOptions, explore
from statecraft.proofs.incremental.broken import (
    blob_published_before_durable,
    gc_trusts_a_stale_reference_count,
    version_counter_unchanged_check,
)
from statecraft.proofs.incremental.scenarios import incremental_gc_scenarios
from statecraft.resources import spec_path

SPEC = load_spec(spec_path("incremental_gc"))


def test_crashcheck_proves_every_guarantee_substantively() -> None:
    """Every guarantee holds at every crash point (and an injected I/O error at every
    operation) of every scenario under every crash kind, each judged substantively."""
    reports, scenario_reports = crashcheck(["incremental_gc"], ExploreOptions(extra_subsets=1))
    (report,) = reports
    assert report.violations == (), report.violations[0].reproducer()
    assert report.vacuous == ()
    assert {s.scenario for s in scenario_reports} == {s.name for s in incremental_gc_scenarios()}
    substantive = {g.id: 0 for g in SPEC.guarantees}
    for s in scenario_reports:
        for g_id, n in s.substantive_by_guarantee.items():
            substantive[g_id] += n
    assert all(n > 0 for n in substantive.values()), substantive


@pytest.mark.parametrize(
    ("variant", "guarantee", "words"),
    [
        (gc_trusts_a_stale_reference_count, "INC-SHARED-SURVIVES", "after the pruning"),
        (gc_trusts_a_stale_reference_count, "INC-NO-MISSING-BLOB", "which is missing"),
        (blob_published_before_durable, "INC-NO-MISSING-BLOB", "committed iter_000000003"),
        (version_counter_unchanged_check, "INC-EXACT", "unchanged-check missed"),
    ],
)
def test_declared_broken_variant_is_caught(variant, guarantee, words) -> None:
    """Each wrong variant violates the guarantee its spec entry names, with a message that
    says what was found."""
    (scenario,) = variant()
    report = explore(scenario, SPEC, ExploreOptions(extra_subsets=0))
    assert guarantee in report.violated_guarantees()
    assert any(words in v.message for v in report.violations if v.guarantee == guarantee)
