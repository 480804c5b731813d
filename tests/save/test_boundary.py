"""The boundary decision (statecraft/checkpoint/facade/boundary.py; issue 9, item 4): which
transaction a step boundary runs and with which plan, checked exhaustively against an
independent table-driven oracle, and when regular saves and validation are due."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statecraft.checkpoint.config import FULL_PLAN, CheckpointConfig
from statecraft.checkpoint.facade.boundary import (
    Boundary,
    BoundaryKind,
    before_training_due,
    decide_boundary,
    regular_save_due,
    validation_due,
)
from statecraft.checkpoint.kernel.components import ComponentPlan
from statecraft.errors import CheckpointError

ALL = frozenset(FULL_PLAN)
SUBSETS = [
    frozenset(c) for n in range(1, 4) for c in itertools.combinations(FULL_PLAN, n)
]  # the 7 non-empty plans

# (validation due, regular due, validation requests a save, union full) -> kind; written as a
# table from the prose, independently of the code's branches.
ORACLE: dict[tuple[bool, bool, bool, bool], str] = {}
for _vdue, _reg, _vreq, _full in itertools.product([False, True], repeat=4):
    if not _vdue:
        _kind = ("save" if _full else "artifact") if _reg else "nothing"
    elif not (_reg or _vreq):
        _kind = "evaluate"
    elif _full:
        _kind = "durable_validation"
    else:
        _kind = "artifact_then_evaluate" if _reg else "evaluate_then_artifact"
    ORACLE[(_vdue, _reg, _vreq, _full)] = _kind


def config(run: frozenset[str], save: bool, vplan: frozenset[str], **extra: Any) -> Any:
    return CheckpointConfig.from_dict(
        {
            "checkpoint_components": sorted(run),
            "validation": {"save_checkpoint": save, "checkpoint_components": sorted(vplan)},
            **extra,
        }
    )


def expected(
    run: frozenset[str], save: bool, vplan: frozenset[str], regular: bool, vdue: bool
) -> tuple[str, frozenset[str] | None]:
    wanted = (run if regular else frozenset()) | (vplan if vdue and save else frozenset())
    kind = ORACLE[(vdue, regular, vdue and save, wanted == ALL)]
    return kind, (wanted or None) if kind not in ("nothing", "evaluate") else None


class TestDecideBoundary:
    def test_every_combination_matches_the_oracle(self) -> None:
        """All 7 x 2 x 7 plan configs x regular due x validation due: the kind, the plan, and
        the due flags are what the oracle says, and a saving kind carries a plan covering
        every due plan."""
        checked = 0
        for run, save, vplan in itertools.product(SUBSETS, [False, True], SUBSETS):
            cfg = config(run, save, vplan)
            for regular, vdue in itertools.product([False, True], repeat=2):
                got = decide_boundary(cfg, regular_due=regular, validation_due=vdue)
                kind, plan = expected(run, save, vplan, regular, vdue)
                assert got.kind.value == kind, (run, save, vplan, regular, vdue)
                assert (set(got.plan.components) if got.plan else None) == plan
                assert (got.regular_due, got.validation_due) == (regular, vdue)
                assert got.kind.saves == (got.plan is not None)
                if got.plan is not None:
                    assert got.plan.is_full == (
                        got.kind in (BoundaryKind.SAVE, BoundaryKind.DURABLE_VALIDATION)
                    )
                    if regular:
                        assert got.plan.covers(ComponentPlan.of(run))
                checked += 1
        assert checked == 7 * 2 * 7 * 4

    def test_the_defaults(self) -> None:
        """Defaults: a cadence boundary is a full save; validation alone evaluates without a
        save; both at once is the durable validation transaction (a full union)."""
        cfg = CheckpointConfig()
        full = ComponentPlan.full()
        assert decide_boundary(cfg, regular_due=True, validation_due=False) == Boundary(
            BoundaryKind.SAVE, full, True, False
        )
        assert decide_boundary(cfg, regular_due=False, validation_due=True) == Boundary(
            BoundaryKind.EVALUATE, None, False, True
        )
        assert decide_boundary(cfg, regular_due=True, validation_due=True).kind is (
            BoundaryKind.DURABLE_VALIDATION
        )
        assert decide_boundary(cfg, regular_due=False, validation_due=False).kind is (
            BoundaryKind.NOTHING
        )

    def test_partial_plans_unite_to_the_durable_transaction(self) -> None:
        """Run plan [model, optimizer] and validation plan [model, training_state] at one
        step: one full save, the durable validation transaction."""
        cfg = config(frozenset({"model", "optimizer"}), True, frozenset({"training_state"}))
        got = decide_boundary(cfg, regular_due=True, validation_due=True)
        assert got == Boundary(BoundaryKind.DURABLE_VALIDATION, ComponentPlan.full(), True, True)

    def test_a_partial_union_commits_before_evaluating(self) -> None:
        """Run plan [model] due with validation plan [optimizer]: one [model, optimizer]
        artifact committed before the evaluation; validation alone evaluates first."""
        cfg = config(frozenset({"model"}), True, frozenset({"optimizer"}))
        both = decide_boundary(cfg, regular_due=True, validation_due=True)
        assert both.kind is BoundaryKind.ARTIFACT_THEN_EVALUATE
        assert both.plan == ComponentPlan.of(["model", "optimizer"])
        alone = decide_boundary(cfg, regular_due=False, validation_due=True)
        assert alone.kind is BoundaryKind.EVALUATE_THEN_ARTIFACT
        assert alone.plan == ComponentPlan.of(["optimizer"])

    @pytest.mark.parametrize("save", [False, True])
    @pytest.mark.parametrize("vdue", [False, True])
    def test_before_training_always_evaluates(self, save: bool, vdue: bool) -> None:
        """The before-training pass is checkpoint-free whatever the plans say."""
        cfg = config(frozenset({"model"}), save, ALL, save_every=5)
        got = decide_boundary(cfg, regular_due=False, validation_due=vdue, before_training=True)
        assert got == Boundary(BoundaryKind.EVALUATE, None, False, True)
        assert not got.kind.saves
        assert got.kind.evaluates

    def test_before_training_with_a_save_due_is_a_caller_bug(self) -> None:
        """No save is due before the first step: asking so is refused, naming the rule."""
        with pytest.raises(CheckpointError, match="before-training pass cannot have a regular"):
            decide_boundary(
                CheckpointConfig(), regular_due=True, validation_due=False, before_training=True
            )

    def test_kind_properties(self) -> None:
        """saves / evaluates per kind, from the rule table."""
        saves = {k.value for k in BoundaryKind if k.saves}
        evaluates = {k.value for k in BoundaryKind if k.evaluates}
        assert saves == {
            "save",
            "artifact",
            "durable_validation",
            "artifact_then_evaluate",
            "evaluate_then_artifact",
        }
        assert evaluates == {
            "durable_validation",
            "artifact_then_evaluate",
            "evaluate_then_artifact",
            "evaluate",
        }


def cadence(every: int, step: int, final: bool) -> bool:
    """The oracle of "a multiple of every, or the final step", without the modulo."""
    return final or step in range(every, step + 1, every)


QUICK = settings(max_examples=150, deadline=None)
steps = st.integers(0, 40)
lasts = st.one_of(st.none(), st.integers(0, 40))


class TestDue:
    @QUICK
    @given(
        every=st.integers(0, 6),
        step=steps,
        quiescent=st.booleans(),
        last=lasts,
        final=st.booleans(),
    )
    def test_regular_save_due(
        self, every: int, step: int, quiescent: bool, last: int | None, final: bool
    ) -> None:
        """Due iff save_every > 0, quiescent, step > 0, not already saved, and on the cadence
        or final."""
        cfg = CheckpointConfig(save_every=every)
        got = regular_save_due(
            cfg, step=step, quiescent=quiescent, last_saved_step=last, final=final
        )
        want = (
            bool(every) and quiescent and step >= 1 and last != step and cadence(every, step, final)
        )
        assert got == want

    @QUICK
    @given(
        every=st.integers(0, 6),
        step=steps,
        registered=st.booleans(),
        last=lasts,
        final=st.booleans(),
        save=st.booleans(),
    )
    def test_validation_due(
        self, every: int, step: int, registered: bool, last: int | None, final: bool, save: bool
    ) -> None:
        """Due iff an evaluation is registered, validation.every > 0, step > 0, not already
        validated, and on the cadence or final (save_checkpoint plays no part)."""
        cfg = CheckpointConfig.from_dict({"validation": {"every": every, "save_checkpoint": save}})
        got = validation_due(
            cfg, step=step, registered=registered, last_validated_step=last, final=final
        )
        want = (
            registered and every > 0 and step > 0 and step != last and cadence(every, step, final)
        )
        assert got == want

    @settings(max_examples=60, deadline=None)
    @given(save_every=st.integers(0, 5), every=st.integers(0, 5), total=st.integers(0, 17))
    def test_a_whole_run_saves_and_validates_each_step_once(
        self, save_every: int, every: int, total: int
    ) -> None:
        """A loop of ``total`` steps then finalize(): saves land on the cadence multiples and
        the final step (with save_every > 0), validations likewise, each step at most once."""
        cfg = CheckpointConfig.from_dict({"save_every": save_every, "validation": {"every": every}})
        saved: list[int] = []
        validated: list[int] = []
        for step, final in [*((s, False) for s in range(1, total + 1)), (total, True)]:
            if regular_save_due(
                cfg,
                step=step,
                quiescent=True,
                last_saved_step=saved[-1] if saved else None,
                final=final,
            ):
                saved.append(step)
            if validation_due(
                cfg,
                step=step,
                registered=True,
                last_validated_step=validated[-1] if validated else None,
                final=final,
            ):
                validated.append(step)
        for n, got in ((save_every, saved), (every, validated)):
            want = sorted({*range(n, total + 1, n), total} - {0}) if n else []
            assert got == want

    @pytest.mark.parametrize(
        ("before", "registered", "fresh", "remaining", "due"),
        [
            (True, True, True, 5, True),
            (False, True, True, 5, False),
            (True, False, True, 5, False),
            (True, True, False, 5, False),
            (True, True, True, 0, False),
        ],
    )
    def test_before_training_due(
        self, before: bool, registered: bool, fresh: bool, remaining: int, due: bool
    ) -> None:
        """The pre-training pass: knob on, evaluation registered, fresh run, steps left
        (validation.every plays no part)."""
        cfg = CheckpointConfig.from_dict({"validation": {"before_training": before}})
        assert (
            before_training_due(cfg, registered=registered, fresh=fresh, remaining_steps=remaining)
            is due
        )
