"""The ``save-with-copies`` crash scenario (a moving old policy and reference: ``old.pt`` and
``ref.pt`` beside the model) proves the shipped save and resume machines never adopt a torn or
missing copy file and restore the copies exactly; a resume that loads the model but not the
copies is caught."""

from __future__ import annotations

import attrs
import pytest

from statecraft.engine import load_spec
from statecraft.proofs import ExploreOptions, explore
from statecraft.proofs.save.scenarios import save_scenarios
from statecraft.resources import spec_path

SAVE_SPEC = load_spec(spec_path("save"))
RESUME_SPEC = load_spec(spec_path("resume"))
BOTH = attrs.evolve(SAVE_SPEC, guarantees=SAVE_SPEC.guarantees + RESUME_SPEC.guarantees)
FAST = ExploreOptions(extra_subsets=0, faults=False)


def _scenario() -> object:
    return next(s for s in save_scenarios() if s.name == "save-with-copies")


def test_the_copies_scenario_keeps_every_guarantee() -> None:
    report = explore(_scenario(), BOTH, FAST)
    assert not report.violations, report.violations[0].reproducer()
    assert report.checks_by_guarantee.get("RESUME-EXACT", 0) > 0


def test_a_resume_that_skips_the_copies_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # the copies are read and checked, but never applied: the resumed old/ref stay stale
    monkeypatch.setattr(
        "statecraft.checkpoint.kernel.loading.copy_steps", lambda tracked, parts: ([], [])
    )
    report = explore(_scenario(), BOTH, FAST)
    assert "RESUME-EXACT" in report.violated_guarantees()
