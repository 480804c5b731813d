"""Property tests over component-plan configs (issue 9, item 1 and its acceptance): plans are
canonicalized into table order, unions behave as set unions, every rejection rule of both plan
knobs names the knob, and plan_warnings warns exactly for the partial plans that are active."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statecraft.checkpoint.config import (
    FULL_PLAN,
    CheckpointConfig,
    plan_warnings,
    run_plan,
    validation_plan,
)
from statecraft.checkpoint.kernel.components import ComponentPlan
from statecraft.errors import CheckpointError, ConfigError

KNOBS = ("checkpoint_components", "validation.checkpoint_components")
QUICK = settings(max_examples=60, deadline=None)

names = st.sampled_from(FULL_PLAN)
subsets = st.sets(names, min_size=1).map(sorted)
orders = subsets.flatmap(st.permutations)  # any order of any non-empty subset
plans = subsets.map(ComponentPlan.of)


def with_knob(knob: str, value: Any, **extra: Any) -> dict[str, Any]:
    """A knob mapping setting dotted ``knob`` to ``value`` (plus top-level ``extra``)."""
    section, _, leaf = knob.rpartition(".")
    return {**extra, **({section: {leaf: value}} if section else {leaf: value})}


def knob_of(config: CheckpointConfig, knob: str) -> tuple[str, ...]:
    return (
        config.validation.checkpoint_components
        if knob.startswith("v")
        else (config.checkpoint_components)
    )


class TestCanonicalization:
    @QUICK
    @given(order=orders, knob=st.sampled_from(KNOBS))
    def test_any_order_becomes_table_order(self, order: list[str], knob: str) -> None:
        """Any permutation of any non-empty subset is stored in table order, by the config
        (both knobs) and by ComponentPlan, and canonicalizing again changes nothing."""
        expected = tuple(c for c in FULL_PLAN if c in order)
        config = CheckpointConfig.from_dict(with_knob(knob, list(order)))
        assert knob_of(config, knob) == expected
        plan = ComponentPlan.of(order)
        assert plan.components == expected
        assert ComponentPlan.of(plan.components) == plan
        again = CheckpointConfig.from_dict(with_knob(knob, list(knob_of(config, knob))))
        assert again == config

    @QUICK
    @given(order=orders)
    def test_overrides_canonicalize_too(self, order: list[str]) -> None:
        """A key=value override in any order gives the same canonical plan."""
        text = "[" + ",".join(order) + "]"
        config = CheckpointConfig.load(None, [f"rl.validation.checkpoint_components={text}"])
        assert config.validation.checkpoint_components == ComponentPlan.of(order).components

    @QUICK
    @given(order=orders)
    def test_full_iff_every_component(self, order: list[str]) -> None:
        """A plan is full (kind checkpoint) exactly when it names all three components."""
        plan = ComponentPlan.of(order)
        assert plan.is_full == (set(order) == set(FULL_PLAN))
        assert plan.kind == ("checkpoint" if plan.is_full else "artifact")


class TestUnion:
    @QUICK
    @given(a=plans, b=plans)
    def test_commutative_and_covering(self, a: ComponentPlan, b: ComponentPlan) -> None:
        """a.union(b) == b.union(a), it covers both, and is exactly their components (an
        overlap included: a plan united with itself or a sub-plan)."""
        union = a.union(b)
        assert union == b.union(a)
        assert union.covers(a)
        assert union.covers(b)
        assert set(union.components) == set(a.components) | set(b.components)

    def test_overlapping_plans_unite(self) -> None:
        """[model, optimizer] united with [model, training_state] is the full plan (the
        shared component once), not a duplicate-name refusal."""
        a = ComponentPlan.of(["model", "optimizer"])
        assert a.union(ComponentPlan.of(["training_state", "model"])) == ComponentPlan.full()
        assert a.union(ComponentPlan.of(["model"])) == a

    @QUICK
    @given(a=plans, b=plans, c=plans)
    def test_associative(self, a: ComponentPlan, b: ComponentPlan, c: ComponentPlan) -> None:
        """(a | b) | c == a | (b | c), with | the plan union."""
        assert a.union(b).union(c) == a.union(b.union(c))

    @QUICK
    @given(a=plans)
    def test_idempotent(self, a: ComponentPlan) -> None:
        """a united with itself is a, and with the full plan is the full plan."""
        assert a.union(a) == a
        assert a.union(ComponentPlan.full()) == ComponentPlan.full()

    @QUICK
    @given(a=plans, b=plans)
    def test_full_iff_together_they_cover_all(self, a: ComponentPlan, b: ComponentPlan) -> None:
        """The union is full exactly when the two plans together name every component."""
        union = a.union(b)
        assert union.is_full == (set(a.components) | set(b.components) == set(FULL_PLAN))
        assert union.is_full == union.covers(ComponentPlan.full())


def expected_issues(knob: str, value: list[Any]) -> list[tuple[str, str]]:
    """The oracle of the plan checker: (path, expectation) per bad element."""
    if not value:
        return [(knob, f"a non-empty list drawn from {list(FULL_PLAN)}")]
    out, seen = [], set()
    for i, name in enumerate(value):
        if type(name) is not str:
            out.append((f"{knob}[{i}]", "a component name (a string)"))
        elif name not in FULL_PLAN:
            out.append((f"{knob}[{i}]", "one of 'model', 'optimizer', 'training_state'"))
        elif name in seen:
            out.append((f"{knob}[{i}]", "each component at most once"))
        else:
            seen.add(name)
    return out


elements = st.one_of(
    names,
    st.sampled_from(["weights", "Model", "", "optim", "training-state"]),
    st.integers(-2, 2),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False, width=16),
    st.lists(names, max_size=2),
)


class TestRejections:
    @QUICK
    @given(value=st.lists(elements, max_size=5), knob=st.sampled_from(KNOBS))
    def test_every_bad_plan_is_refused_naming_the_knob(self, value: list[Any], knob: str) -> None:
        """Empty lists, duplicates, non-strings and unknown names are each refused with one
        issue per bad element, its path under the knob named in the message; a good list
        passes."""
        issues = expected_issues(knob, value)
        if not issues:
            CheckpointConfig.from_dict(with_knob(knob, value))
            return
        with pytest.raises(ConfigError) as info:
            CheckpointConfig.from_dict(with_knob(knob, value))
        found = [(i.path, i.allowed) for i in info.value.issues]
        assert found == issues
        for path, expected in issues:
            assert f"  - {path}: got " in str(info.value)
            assert expected in str(info.value)

    @pytest.mark.parametrize("knob", KNOBS)
    @pytest.mark.parametrize(
        ("text", "path", "expected"),
        [
            ("[]", "", "a non-empty list drawn from"),
            ("[model,model]", "[1]", "each component at most once"),
            ("[1,model]", "[0]", "a component name (a string)"),
            ("[model,weights]", "[1]", "one of 'model', 'optimizer', 'training_state'"),
            ("model", "", "a non-empty list drawn from"),
            ("null", "", "a non-empty list drawn from"),
        ],
    )
    def test_overrides_are_refused_naming_the_knob(
        self, knob: str, text: str, path: str, expected: str
    ) -> None:
        """Each rule holds for key=value overrides too, the message naming the dotted knob."""
        with pytest.raises(ConfigError) as info:
            CheckpointConfig.load(None, [f"{knob}={text}"])
        assert [i.path for i in info.value.issues] == [knob + path]
        assert f"{knob}{path}: got " in str(info.value)
        assert expected in str(info.value)

    @QUICK
    @given(value=st.lists(elements, max_size=4))
    def test_the_plan_record_refuses_what_config_refuses(self, value: list[Any]) -> None:
        """ComponentPlan.of refuses exactly the lists config validation refuses."""
        if not expected_issues("k", value):
            assert ComponentPlan.of(value).components == tuple(c for c in FULL_PLAN if c in value)
            return
        with pytest.raises(CheckpointError, match="a component plan is a non-empty list of"):
            ComponentPlan.of(value)


def expected_warnings(cfg: CheckpointConfig) -> list[tuple[str, str]]:
    """The oracle of plan_warnings: (knob=plan prefix, what) per line, in order."""
    out = []
    if set(cfg.checkpoint_components) != set(FULL_PLAN) and cfg.save_every:
        out.append((f"checkpoint_components=[{', '.join(cfg.checkpoint_components)}]", "plan"))
    v = cfg.validation
    if v.save_checkpoint and len(v.checkpoint_components) < 3:
        out.append(
            (f"validation.checkpoint_components=[{', '.join(v.checkpoint_components)}]", "plan")
        )
    if v.save_checkpoint and not v.every:
        out.append(("validation.save_checkpoint=true with validation.every=0", "never"))
    return out


configs = st.builds(
    lambda save_every, run, every, before, save, val: CheckpointConfig.from_dict(
        {
            "save_every": save_every,
            "checkpoint_components": run,
            "validation": {
                "every": every,
                "before_training": before,
                "save_checkpoint": save,
                "checkpoint_components": val,
            },
        }
    ),
    st.integers(0, 3),
    orders,
    st.integers(0, 3),
    st.booleans(),
    st.booleans(),
    orders,
)


class TestWarnings:
    @settings(max_examples=120, deadline=None)
    @given(cfg=configs)
    def test_warns_exactly_for_active_partial_plans(self, cfg: CheckpointConfig) -> None:
        """One line per active partial plan (run plan with save_every > 0, validation plan
        with save_checkpoint), plus the never-saving-validation line; each names its knob and
        plan, the artifacts' place, and how to silence it."""
        lines = plan_warnings(cfg)
        expected = expected_warnings(cfg)
        assert len(lines) == len(expected)
        for line, (prefix, what) in zip(lines, expected, strict=True):
            assert line.startswith(prefix + ": ")
            if what == "plan":
                assert "non-resumable artifacts under checkpoint_artifacts/" in line
                assert "resume=auto" in line
                knob = prefix.split("=")[0]
                assert line.endswith(
                    f"set {knob}=[model, optimizer, training_state] (the full plan) to silence"
                )
            else:
                assert "validation never requests a save" in line
                assert line.endswith("validation.save_checkpoint=false to silence")

    def test_defaults_do_not_warn(self) -> None:
        """The default config (full plans, validation off) has no plan warning."""
        assert plan_warnings(CheckpointConfig()) == []

    @pytest.mark.parametrize("order", list(itertools.permutations(["model", "optimizer"])))
    def test_an_inactive_validation_plan_does_not_warn(self, order: tuple[str, ...]) -> None:
        """A partial validation plan with save_checkpoint=false is inactive: no warning, and
        validation_plan is None."""
        cfg = CheckpointConfig.from_dict(
            {"validation": {"every": 5, "checkpoint_components": list(order)}}
        )
        assert plan_warnings(cfg) == []
        assert validation_plan(cfg) is None
        assert run_plan(cfg) == ComponentPlan.full()

    def test_a_partial_run_plan_without_cadence_does_not_warn(self) -> None:
        """checkpoint_components=[model] with save_every=0: no cadence save, no warning."""
        cfg = CheckpointConfig.from_dict({"checkpoint_components": ["model"]})
        assert plan_warnings(cfg) == []

    def test_the_lines_read_whole(self) -> None:
        """The exact text of both plan lines, so a reworded warning is a reviewed change."""
        cfg = CheckpointConfig.load(
            None,
            [
                "save_every=100",
                "checkpoint_components=[training_state,model]",
                "validation.every=50",
                "validation.save_checkpoint=true",
                "validation.checkpoint_components=[model]",
            ],
        )
        assert plan_warnings(cfg) == [
            "checkpoint_components=[model, training_state]: a partial plan; cadence and final "
            "saves (save_every=100) become non-resumable artifacts under checkpoint_artifacts/ "
            "holding only those components, which resume=auto never adopts (continuing from "
            "one is a warm start); set checkpoint_components=[model, optimizer, "
            "training_state] (the full plan) to silence",
            "validation.checkpoint_components=[model]: a partial plan; validation saves "
            "(validation.save_checkpoint=true) become non-resumable artifacts under "
            "checkpoint_artifacts/, committed only after a successful evaluation, with no "
            "pending-validation recovery and never adopted by resume=auto; set "
            "validation.checkpoint_components=[model, optimizer, training_state] (the full "
            "plan) to silence",
        ]
