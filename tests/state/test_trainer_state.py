"""Tests of statecraft.checkpoint.state: update clocks, scheduler identity, pristine
optimizer, and the ``trainer.pt`` payload.

Payload round trips go through ``torch.save`` and ``torch.load(weights_only=True)``, which proves
the payload is weights-only safe.
"""

from __future__ import annotations

import io
import random
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from statecraft.checkpoint.kernel.validation_records import (
    ValidationIdentity,
    ValidationStage,
    ValidationState,
)
from statecraft.checkpoint.state import (
    SUPPORTED_SCHEDULER_IDENTITY_VERSIONS,
    TRAINER_STATE_SCHEMA,
    Outcome,
    RngInventory,
    SchedulerIdentity,
    TrainerState,
    UpdateClocks,
    capture_rng_state,
    check_scheduler_identity,
    gather_rng_inventory,
    optimizer_is_pristine,
    restore_rng_state,
)
from statecraft.errors import TrainerStateError

SOURCE = "run/checkpoints/iter_000000007/trainer.pt"
COSINE = SchedulerIdentity("warmup_cosine", 1, {"warmup_steps": 100, "min_lr_factor": 0.1})


def weights_only_roundtrip(obj: Any) -> Any:
    """``torch.save`` ``obj`` to memory and load it back with ``weights_only=True``."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def clocks_after(*outcomes: Outcome) -> UpdateClocks:
    clocks = UpdateClocks()
    for outcome in outcomes:
        clocks.record(outcome)
    return clocks


def valid_payload(**changes: Any) -> dict[str, Any]:
    """A current-schema payload (optimizer_step 5, attempt 7, 2 skips) with ``changes`` applied."""
    payload = TrainerState(
        optimizer_step=5, attempt_id=7, skips_total=2, skips_consecutive=1, rng=None
    ).to_payload()
    payload.update(changes)
    return payload


def problems_of(exc: pytest.ExceptionInfo[TrainerStateError]) -> list[str]:
    return exc.value.problems  # type: ignore[attr-defined]


def sgd_with_scheduler() -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return opt, torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)


class TestOutcome:
    def test_values(self) -> None:
        """The three outcomes carry the reference's lower-case names."""
        assert [o.value for o in Outcome] == ["accumulating", "applied", "skipped"]


class TestUpdateClocks:
    def test_starts_at_zero_and_quiescent(self) -> None:
        """Fresh clocks are all zero and quiescent."""
        clocks = UpdateClocks()
        assert (clocks.optimizer_step, clocks.attempt_id, clocks.skips_total) == (0, 0, 0)
        assert clocks.quiescent

    def test_accumulating_opens_window_without_advancing_clocks(self) -> None:
        """ACCUMULATING counts open microbatches and advances no clock."""
        clocks = clocks_after(Outcome.ACCUMULATING, Outcome.ACCUMULATING)
        assert clocks.open_microbatches == 2
        assert (clocks.optimizer_step, clocks.attempt_id, clocks.skips_total) == (0, 0, 0)
        assert not clocks.quiescent

    def test_applied_closes_window(self) -> None:
        """APPLIED advances optimizer_step and attempt_id, resets consecutive skips, closes."""
        clocks = clocks_after(Outcome.SKIPPED, Outcome.ACCUMULATING, Outcome.APPLIED)
        assert clocks.optimizer_step == 1
        assert clocks.attempt_id == 2
        assert (clocks.skips_total, clocks.skips_consecutive) == (1, 0)
        assert clocks.open_microbatches == 0

    def test_skipped_discards_window(self) -> None:
        """SKIPPED advances attempt_id and both skip counters but not optimizer_step."""
        clocks = clocks_after(Outcome.APPLIED, Outcome.ACCUMULATING, Outcome.SKIPPED)
        clocks.record(Outcome.SKIPPED)
        assert clocks.optimizer_step == 1
        assert clocks.attempt_id == 3
        assert (clocks.skips_total, clocks.skips_consecutive) == (2, 2)
        assert clocks.quiescent

    @given(st.lists(st.sampled_from(list(Outcome)), max_size=60))
    def test_random_sequences(self, outcomes: list[Outcome]) -> None:
        """For any sequence the clocks count applied, closed and trailing-skipped windows."""
        clocks = clocks_after(*outcomes)
        applied = outcomes.count(Outcome.APPLIED)
        skipped = outcomes.count(Outcome.SKIPPED)
        closes = [o for o in outcomes if o is not Outcome.ACCUMULATING]
        trailing_skips = 0
        for o in reversed(closes):
            if o is Outcome.APPLIED:
                break
            trailing_skips += 1
        trailing_open = 0
        for o in reversed(outcomes):
            if o is not Outcome.ACCUMULATING:
                break
            trailing_open += 1
        assert clocks.optimizer_step == applied
        assert clocks.attempt_id == applied + skipped
        assert clocks.skips_total == skipped
        assert clocks.skips_consecutive == trailing_skips
        assert clocks.open_microbatches == trailing_open
        assert clocks.quiescent == (not outcomes or outcomes[-1] is not Outcome.ACCUMULATING)

    @pytest.mark.parametrize("outcome", ["applied", 1, None, True])
    def test_record_rejects_non_outcome(self, outcome: object) -> None:
        """record() refuses anything that is not an Outcome, naming the value and the fix."""
        clocks = UpdateClocks()
        with pytest.raises(TrainerStateError, match=r"expects an Outcome; got .*Outcome\.APPLIED"):
            clocks.record(outcome)  # type: ignore[arg-type]
        assert clocks == UpdateClocks()

    def test_require_quiescent_passes_when_closed(self) -> None:
        """require_quiescent is silent when no window is open."""
        clocks_after(Outcome.ACCUMULATING, Outcome.APPLIED).require_quiescent("save")

    def test_require_quiescent_error_text(self) -> None:
        """An open window fails naming the action, the microbatch count and the fix."""
        clocks = clocks_after(Outcome.ACCUMULATING, Outcome.ACCUMULATING, Outcome.ACCUMULATING)
        with pytest.raises(TrainerStateError) as info:
            clocks.require_quiescent("save a checkpoint")
        text = str(info.value)
        assert text.startswith("cannot save a checkpoint: the accumulation window is open with 3")
        assert "save and resume need accum = 0" in text
        assert "Record Outcome.APPLIED or Outcome.SKIPPED" in text

    @pytest.mark.parametrize("value", [-1, True, 1.5, "2"])
    def test_rejects_bad_counter(self, value: object) -> None:
        """A clock that is not a non-negative int (bool included) fails on construction."""
        with pytest.raises(TrainerStateError, match=r"UpdateClocks\.skips_total must be an int"):
            UpdateClocks(skips_total=value)  # type: ignore[arg-type]

    def test_rejects_inconsistent_clocks(self) -> None:
        """attempt_id below optimizer_step fails on construction."""
        with pytest.raises(TrainerStateError, match="attempt_id: expected >= optimizer_step"):
            UpdateClocks(optimizer_step=3, attempt_id=2)


class TestSchedulerIdentity:
    def test_payload_roundtrip(self) -> None:
        """An identity survives to_payload, a weights_only round trip and from_payload."""
        payload = weights_only_roundtrip(COSINE.to_payload())
        assert payload == {"name": "warmup_cosine", "version": 1, "params": COSINE.params}
        assert SchedulerIdentity.from_payload(payload) == COSINE

    def test_params_are_copied(self) -> None:
        """Mutating the caller's params dict does not change the identity."""
        params = {"warmup_steps": 10}
        ident = SchedulerIdentity("x", 1, params)
        params["warmup_steps"] = 20
        assert ident.params == {"warmup_steps": 10}

    def test_supported_versions(self) -> None:
        """Version 1 is the supported identity format."""
        assert frozenset({1}) == SUPPORTED_SCHEDULER_IDENTITY_VERSIONS

    @pytest.mark.parametrize(
        ("args", "match"),
        [
            (("", 1, {}), "name: expected a non-empty str"),
            (("x", 0, {}), "version: expected an int >= 1"),
            (("x", True, {}), "version: expected an int >= 1; got True"),
            (("x", 1, {"a": [1]}), r"params\.a: expected a str, int, finite float"),
            (("x", 1, {"a": float("nan")}), r"params\.a: expected .*got nan"),
            (("x", 1, {1: 2}), "params: expected str keys"),
            (("x", 1, [1]), "params: expected a dict"),
        ],
    )
    def test_rejects_bad_construction(self, args: tuple, match: str) -> None:
        """Bad name, version or params fail when the identity is built."""
        with pytest.raises(TrainerStateError, match=match):
            SchedulerIdentity(*args)

    def test_from_payload_rejects_malformed(self) -> None:
        """A payload with missing and unknown keys fails naming the source and both keys."""
        with pytest.raises(TrainerStateError, match=SOURCE) as info:
            SchedulerIdentity.from_payload({"name": "x", "version": 1, "p": {}}, source=SOURCE)
        assert problems_of(info) == ["missing key 'params'", "unexpected key 'p'"]

    def test_from_payload_keeps_unknown_version(self) -> None:
        """Parsing keeps an unsupported version so the resume check can report it."""
        assert (
            SchedulerIdentity.from_payload({"name": "x", "version": 9, "params": {}}).version == 9
        )


class TestCheckSchedulerIdentity:
    def test_both_absent_is_legacy_state_only(self) -> None:
        """Neither side declaring an identity passes (legacy state-only resume)."""
        check_scheduler_identity(None, None, source=SOURCE)

    def test_equal_identities_pass(self) -> None:
        """Equal identities pass."""
        same = SchedulerIdentity("warmup_cosine", 1, {"min_lr_factor": 0.1, "warmup_steps": 100})
        check_scheduler_identity(COSINE, same, source=SOURCE)

    def test_unsupported_saved_version_fails(self) -> None:
        """A checkpoint identity of an unknown version fails naming the versions and the fix."""
        saved = SchedulerIdentity("warmup_cosine", 2, COSINE.params)
        with pytest.raises(TrainerStateError) as info:
            check_scheduler_identity(saved, COSINE, source=SOURCE)
        text = str(info.value)
        assert text.startswith(SOURCE)
        assert "has version 2; this statecraft reads versions [1]" in text
        assert "start a new run from these weights" in text

    def test_legacy_checkpoint_with_declared_identity_fails(self) -> None:
        """A run declaring an identity refuses a checkpoint that records none."""
        with pytest.raises(TrainerStateError) as info:
            check_scheduler_identity(None, COSINE, source=SOURCE)
        text = str(info.value)
        assert text.startswith(SOURCE)
        assert "'warmup_cosine' v1" in text
        assert "checkpoint records none" in text
        assert "start a new run from these weights (init_from) instead of exact resume" in text

    def test_checkpoint_identity_without_declared_fails(self) -> None:
        """A checkpoint with an identity refuses a run that declares none."""
        with pytest.raises(TrainerStateError) as info:
            check_scheduler_identity(COSINE, None, source=SOURCE)
        text = str(info.value)
        assert "this run declares none" in text
        assert "pass the same scheduler identity" in text

    def test_differing_identities_list_every_field(self) -> None:
        """Differing identities fail listing each differing field, expected vs found."""
        current = SchedulerIdentity(
            "warmup_linear", 1, {"warmup_steps": 200, "min_lr_factor": 0.1, "cycles": 2}
        )
        with pytest.raises(TrainerStateError, match=SOURCE) as info:
            check_scheduler_identity(COSINE, current, source=SOURCE)
        assert problems_of(info) == [
            "name: this run expects 'warmup_linear', the checkpoint has 'warmup_cosine'",
            "params.cycles: this run expects 2, the checkpoint has none",
            "params.warmup_steps: this run expects 200 (int), the checkpoint has 100 (int)",
        ]
        assert "Pass the same scheduler identity" in str(info.value)

    def test_comparison_is_type_strict(self) -> None:
        """An int and an equal float parameter count as a change."""
        current = SchedulerIdentity(
            "warmup_cosine", 1, {"warmup_steps": 100.0, "min_lr_factor": 0.1}
        )
        with pytest.raises(TrainerStateError, match=r"100\.0 \(float\).*100 \(int\)"):
            check_scheduler_identity(COSINE, current, source=SOURCE)


class TestOptimizerIsPristine:
    def test_before_and_after_adamw_step(self) -> None:
        """AdamW on a tiny Linear is pristine until its first step."""
        model = torch.nn.Linear(4, 2)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        assert optimizer_is_pristine(opt)
        model(torch.ones(1, 4)).sum().backward()
        opt.step()
        assert not optimizer_is_pristine(opt)

    def test_rejects_non_optimizer(self) -> None:
        """An object without a state mapping fails naming what to pass."""
        with pytest.raises(TrainerStateError, match=r"pass the torch\.optim\.Optimizer itself"):
            optimizer_is_pristine(object())  # type: ignore[arg-type]


class TestTrainerState:
    def test_payload_keys(self) -> None:
        """to_payload writes every documented key, iter equal to optimizer_step, accum 0."""
        payload = TrainerState(optimizer_step=4, attempt_id=6, skips_total=2, rng=None).to_payload()
        assert payload == {
            "schema": TRAINER_STATE_SCHEMA,
            "optimizer_step": 4,
            "iter": 4,
            "attempt_id": 6,
            "skips_total": 2,
            "skips_consecutive": 0,
            "open_microbatches": 0,
            "rng": None,
            "scheduler": None,
            "scheduler_identity": None,
            "extra": {},
            "stateful": {},
            "optimizer_class": None,
            "validation": None,
        }

    def test_pristine_marker_only_when_true(self) -> None:
        """optimizer_pristine appears in the payload only when True."""
        base = {"optimizer_step": 0, "attempt_id": 0, "rng": None}
        assert "optimizer_pristine" not in TrainerState(**base).to_payload()
        assert TrainerState(**base, optimizer_pristine=True).to_payload()["optimizer_pristine"]

    def test_full_roundtrip_through_weights_only_load(self) -> None:
        """A state with RNG, scheduler, identity and extra survives a weights_only round trip."""
        opt, sched = sgd_with_scheduler()
        for _ in range(3):
            opt.step()
            sched.step()
        rng = RngInventory(2, (capture_rng_state(), capture_rng_state()))
        state = TrainerState(
            optimizer_step=3,
            attempt_id=4,
            skips_total=1,
            rng=rng,
            scheduler_state=sched.state_dict(),
            scheduler_identity=COSINE,
            optimizer_pristine=True,
            extra={"best_loss": 0.25, "tags": ["a"], "nested": {"k": None}},
        )
        payload = weights_only_roundtrip(state.to_payload())
        loaded = TrainerState.from_payload(payload, source=SOURCE)
        assert loaded == state
        assert loaded.rng == rng
        assert loaded.scheduler_state == sched.state_dict()

    def test_to_clocks(self) -> None:
        """to_clocks gives quiescent clocks that continue from the saved values."""
        clocks = TrainerState(
            optimizer_step=2, attempt_id=5, skips_total=3, skips_consecutive=1, rng=None
        ).to_clocks()
        assert clocks == UpdateClocks(2, 5, 3, 1, 0)
        clocks.record(Outcome.SKIPPED)
        assert (clocks.attempt_id, clocks.skips_consecutive) == (6, 2)

    def test_rejects_unsaveable_values(self) -> None:
        """Values a weights_only load or JSON cannot hold are rejected when the state is built."""
        with pytest.raises(TrainerStateError) as info:
            TrainerState(
                optimizer_step=1,
                attempt_id=0,
                rng=capture_rng_state(),  # type: ignore[arg-type]
                scheduler_state={"fn": print},
                extra={"t": frozenset({1})},
            )
        lines = problems_of(info)
        assert lines[0].startswith("attempt_id: expected >= optimizer_step (1)")
        assert lines[1].startswith("rng: expected an RngInventory or None")
        assert lines[2].startswith(
            'scheduler_state["fn"]: builtin_function_or_method -- a function or class'
        )
        assert lines[3] == 'extra["t"]: frozenset -- convert with sorted(x) (or list(x))'


class TestTrainerStateCapture:
    def test_captures_live_objects(self) -> None:
        """capture copies the clocks, scheduler state, identity, pristine flag and extra."""
        opt, sched = sgd_with_scheduler()
        clocks = clocks_after(Outcome.APPLIED, Outcome.SKIPPED)
        rng = gather_rng_inventory(rank=0, world_size=1)
        state = TrainerState.capture(
            clocks,
            rng=rng,
            scheduler=sched,
            scheduler_identity=COSINE,
            optimizer=opt,
            extra={"epoch": 1},
        )
        assert (state.optimizer_step, state.attempt_id, state.skips_total) == (1, 2, 1)
        assert state.skips_consecutive == 1
        assert state.optimizer_pristine
        assert state.scheduler_state == sched.state_dict()
        assert state.rng is rng
        assert state.extra == {"epoch": 1}
        assert state.optimizer_class == "torch.optim.sgd.SGD"

    def test_snapshot_is_independent(self) -> None:
        """Stepping the scheduler after capture does not change the captured state."""
        opt, sched = sgd_with_scheduler()
        state = TrainerState.capture(UpdateClocks(), rng=None, scheduler=sched)
        before = state.to_payload()["scheduler"]
        opt.step()
        sched.step()
        assert state.to_payload()["scheduler"] == before
        assert before != sched.state_dict()

    def test_stepped_optimizer_is_not_pristine(self) -> None:
        """An optimizer with per-parameter state is recorded as not pristine."""
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.AdamW(model.parameters())
        model(torch.ones(1, 2)).sum().backward()
        opt.step()
        state = TrainerState.capture(clocks_after(Outcome.APPLIED), rng=None, optimizer=opt)
        assert "optimizer_pristine" not in state.to_payload()

    def test_open_window_refused(self) -> None:
        """Capturing clocks with an open accumulation window fails."""
        clocks = clocks_after(Outcome.APPLIED, Outcome.ACCUMULATING)
        with pytest.raises(TrainerStateError, match="accumulation window is open with 1"):
            TrainerState.capture(clocks, rng=None)


class TestTrainerStateFromPayload:
    def test_accepts_valid_payload(self) -> None:
        """A payload written by to_payload is read back with the same clocks."""
        state = TrainerState.from_payload(valid_payload(), source=SOURCE)
        assert (state.optimizer_step, state.attempt_id) == (5, 7)
        assert (state.skips_total, state.skips_consecutive) == (2, 1)
        assert not state.optimizer_pristine

    def test_legacy_iter_only(self) -> None:
        """A legacy payload with only iter defaults attempt_id to it and skips to zero."""
        state = TrainerState.from_payload({"iter": 12, "legacy_field": "x"}, source=SOURCE)
        assert (state.optimizer_step, state.attempt_id) == (12, 12)
        assert (state.skips_total, state.skips_consecutive) == (0, 0)
        assert state.rng is None
        assert state.scheduler_state is None
        assert state.extra == {}

    def test_legacy_optimizer_step_only(self) -> None:
        """A legacy payload with only optimizer_step is accepted with the legacy defaults."""
        state = TrainerState.from_payload({"optimizer_step": 3}, source=SOURCE)
        assert (state.optimizer_step, state.attempt_id, state.skips_total) == (3, 3, 0)

    def test_rejects_non_dict(self) -> None:
        """A payload that is not a dict fails naming the source."""
        with pytest.raises(TrainerStateError, match=rf"^{SOURCE}: .*\n  - expected a dict payload"):
            TrainerState.from_payload([1], source=SOURCE)

    def test_rejects_conflicting_clocks(self) -> None:
        """optimizer_step and iter that disagree fail, quoting both values."""
        with pytest.raises(TrainerStateError, match=SOURCE) as info:
            TrainerState.from_payload(valid_payload(iter=4), source=SOURCE)
        assert problems_of(info) == [
            "optimizer_step and iter conflict: optimizer_step=5, iter=4; "
            "they are the same clock and must agree"
        ]

    def test_rejects_missing_step(self) -> None:
        """A payload with neither optimizer_step nor iter fails."""
        with pytest.raises(TrainerStateError, match="optimizer_step: missing"):
            TrainerState.from_payload({"attempt_id": 1}, source=SOURCE)

    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("optimizer_step", -1),
            ("iter", True),
            ("attempt_id", 7.0),
            ("skips_total", "2"),
            ("skips_consecutive", None),
        ],
    )
    def test_rejects_malformed_counter(self, field: str, value: object) -> None:
        """A counter that is not an int >= 0 (bool included) fails with expected vs got."""
        with pytest.raises(TrainerStateError) as info:
            TrainerState.from_payload(valid_payload(**{field: value}), source=SOURCE)
        assert f"{field}: expected an int >= 0; got {value!r}" in problems_of(info)[0]

    def test_rejects_attempt_below_step(self) -> None:
        """attempt_id below optimizer_step (an incomplete attempt record) fails."""
        with pytest.raises(TrainerStateError) as info:
            TrainerState.from_payload(valid_payload(attempt_id=4), source=SOURCE)
        assert problems_of(info) == [
            "attempt_id: expected >= optimizer_step (5), since every applied update is an "
            "attempt; got 4"
        ]

    def test_rejects_consecutive_above_total(self) -> None:
        """More consecutive skips than total skips fails."""
        with pytest.raises(TrainerStateError) as info:
            TrainerState.from_payload(valid_payload(skips_consecutive=3), source=SOURCE)
        assert problems_of(info) == ["skips_consecutive: expected <= skips_total (2); got 3"]

    def test_rejects_open_window(self) -> None:
        """A payload recording an open accumulation window cannot be resumed."""
        with pytest.raises(TrainerStateError) as info:
            TrainerState.from_payload(valid_payload(open_microbatches=2), source=SOURCE)
        assert problems_of(info)[0].startswith(
            "open_microbatches: expected 0 (a closed accumulation window); got 2"
        )

    def test_rejects_unknown_schema(self) -> None:
        """A schema string this release does not know fails with expected vs got."""
        with pytest.raises(TrainerStateError) as info:
            TrainerState.from_payload(
                valid_payload(schema="statecraft.trainer-state.v4"), source=SOURCE
            )
        assert problems_of(info)[0].startswith(
            "schema: expected one of ['statecraft.trainer-state.v1', "
            "'statecraft.trainer-state.v2', 'statecraft.trainer-state.v3'] (or none, for a "
            "legacy file); got 'statecraft.trainer-state.v4'"
        )

    def test_reads_a_v1_payload(self) -> None:
        """A v1 file (no stateful objects, no optimizer class) still reads."""
        payload = valid_payload(schema="statecraft.trainer-state.v1", extra={"best": 0.5})
        del payload["stateful"], payload["optimizer_class"], payload["validation"]
        state = TrainerState.from_payload(payload, source=SOURCE)
        assert (state.stateful, state.optimizer_class, state.extra) == ({}, None, {"best": 0.5})

    def test_a_v1_payload_with_v2_keys_is_refused(self) -> None:
        """v1 does not define stateful: a v1 file that holds it is refused, naming the key."""
        payload = valid_payload(schema="statecraft.trainer-state.v1")
        del payload["validation"]
        with pytest.raises(TrainerStateError) as info:
            TrainerState.from_payload(payload, source=SOURCE)
        assert problems_of(info) == [
            "unexpected key 'stateful' (not part of statecraft.trainer-state.v1)",
            "unexpected key 'optimizer_class' (not part of statecraft.trainer-state.v1)",
        ]

    def test_v2_round_trip_with_tensors_stateful_and_optimizer_class(self) -> None:
        """Loop state with a tensor, stateful objects and the optimizer class survive a
        weights_only round trip."""
        state = TrainerState(
            optimizer_step=2,
            attempt_id=2,
            rng=None,
            extra={"batch": torch.arange(6).view(2, 3), "model_args": {"n_layer": 2}},
            stateful={"scaler": {"scale": 1024.0, "_growth_tracker": 3}},
            optimizer_class="torch.optim.adamw.AdamW",
        )
        loaded = TrainerState.from_payload(
            weights_only_roundtrip(state.to_payload()), source=SOURCE
        )
        assert loaded == state
        assert loaded.to_payload()["schema"] == "statecraft.trainer-state.v3"

    def test_rejects_malformed_v2_fields(self) -> None:
        """A non-identifier stateful name and a non-str optimizer class are named."""
        with pytest.raises(TrainerStateError) as info:
            TrainerState.from_payload(
                valid_payload(stateful={"a b": {}}, optimizer_class=3), source=SOURCE
            )
        assert problems_of(info) == [
            "stateful: names must be plain identifiers; got 'a b'",
            "optimizer_class: expected a str or None; got 3 (int)",
        ]

    def test_rejects_unknown_key_in_current_schema(self) -> None:
        """A current-schema payload with a key the schema does not define fails."""
        with pytest.raises(TrainerStateError, match="unexpected key 'lr'"):
            TrainerState.from_payload(valid_payload(lr=0.1), source=SOURCE)

    def test_rejects_malformed_rng_ranks_length(self) -> None:
        """An RNG inventory with fewer ranks than its world size fails, not treated as legacy."""
        rng = RngInventory(1, (capture_rng_state(),)).to_payload()
        rng["world_size"] = 2
        with pytest.raises(TrainerStateError) as info:
            TrainerState.from_payload(valid_payload(rng=rng), source=SOURCE)
        assert problems_of(info) == ["rng.ranks: expected 2 per-rank states (world_size); got 1"]

    def test_rejects_malformed_rng_types(self) -> None:
        """An RNG inventory with wrongly typed streams fails naming each field path."""
        rng = RngInventory(1, (capture_rng_state(),)).to_payload()
        rng["ranks"][0]["torch"] = rng["ranks"][0]["torch"].tolist()
        rng["ranks"][0]["numpy"]["cached_gaussian"] = 0
        with pytest.raises(TrainerStateError) as info:
            TrainerState.from_payload(valid_payload(rng=rng), source=SOURCE)
        assert [p.split(":")[0] for p in problems_of(info)] == [
            "rng.ranks[0].numpy.cached_gaussian",
            "rng.ranks[0].torch",
        ]

    def test_rejects_bad_scheduler_and_identity(self) -> None:
        """A non-dict scheduler state and a malformed identity are both reported."""
        with pytest.raises(TrainerStateError) as info:
            TrainerState.from_payload(
                valid_payload(scheduler=[1], scheduler_identity={"name": "x"}), source=SOURCE
            )
        assert problems_of(info) == [
            "scheduler: expected a state_dict (dict) or None; got [1] (list)",
            "scheduler_identity: missing key 'version'",
            "scheduler_identity: missing key 'params'",
        ]

    @pytest.mark.parametrize("value", [False, 1, "yes"])
    def test_rejects_pristine_marker_not_true(self, value: object) -> None:
        """optimizer_pristine, when present, must be True."""
        with pytest.raises(TrainerStateError, match="optimizer_pristine: expected True"):
            TrainerState.from_payload(valid_payload(optimizer_pristine=value), source=SOURCE)

    def test_collects_every_problem(self) -> None:
        """Several defects are reported together in one error ending with the fix."""
        with pytest.raises(TrainerStateError) as info:
            TrainerState.from_payload(
                valid_payload(iter=9, open_microbatches=1, extra=[]), source=SOURCE
            )
        assert len(problems_of(info)) == 3
        assert str(info.value).startswith(f"{SOURCE}: 3 problem(s) in the trainer state:")
        assert str(info.value).endswith("instead of exact resume.")

    def test_random_state_survives(self) -> None:
        """The RNG inventory read back from a payload restores the saved draws."""
        random.seed(3)
        state = TrainerState.capture(UpdateClocks(), rng=gather_rng_inventory(rank=0, world_size=1))
        expected = random.random()
        loaded = TrainerState.from_payload(
            weights_only_roundtrip(state.to_payload()), source=SOURCE
        )
        assert loaded.rng is not None
        restore_rng_state(loaded.rng.ranks[0])
        assert random.random() == expected


class TestValidationField:
    """Schema v3: ``validation`` records the run's validation identity and the save's stage."""

    PENDING = ValidationState(
        ValidationIdentity(True, "heldout", ValidationIdentity.config_digest({"every": 2})),
        ValidationStage.EVALUATION_PENDING,
    )

    def test_capture_records_disabled_identity_by_default(self) -> None:
        """A capture without validation= records ValidationState() (disabled, stage none)."""
        state = TrainerState.capture(clocks_after(Outcome.APPLIED), rng=None)
        assert state.validation == ValidationState()
        payload = weights_only_roundtrip(state.to_payload())
        assert payload["validation"] == {
            "schema": "statecraft.validation-state.v1",
            "identity": {"enabled": False, "source": "", "config": ""},
            "stage": "none",
        }

    def test_pending_state_round_trips_through_weights_only_load(self) -> None:
        """An evaluation-pending state survives torch.save and a weights_only load."""
        state = TrainerState.capture(
            clocks_after(Outcome.APPLIED), rng=None, validation=self.PENDING
        )
        loaded = TrainerState.from_payload(
            weights_only_roundtrip(state.to_payload()), source=SOURCE
        )
        assert loaded.validation == self.PENDING
        assert loaded == state

    def test_a_v2_payload_reads_without_validation(self) -> None:
        """A v2 file (written before validation identities) reads with validation None."""
        payload = valid_payload(schema="statecraft.trainer-state.v2")
        del payload["validation"]
        assert TrainerState.from_payload(payload, source=SOURCE).validation is None

    def test_a_v2_payload_holding_validation_is_refused(self) -> None:
        """v2 does not define validation: a v2 file that holds it is refused, naming the key."""
        payload = valid_payload(
            schema="statecraft.trainer-state.v2", validation=ValidationState().to_payload()
        )
        with pytest.raises(TrainerStateError) as info:
            TrainerState.from_payload(payload, source=SOURCE)
        assert problems_of(info) == [
            "unexpected key 'validation' (not part of statecraft.trainer-state.v2)"
        ]

    def test_a_legacy_payload_ignores_validation(self) -> None:
        """A schema-less legacy file's unknown keys are ignored, validation among them."""
        payload = {"iter": 3, "validation": {"stage": "published"}}
        assert TrainerState.from_payload(payload, source=SOURCE).validation is None

    def test_v3_without_validation_is_refused(self) -> None:
        """A v3 payload lacking validation fails naming the key and the schema."""
        payload = valid_payload()
        del payload["validation"]
        with pytest.raises(TrainerStateError) as info:
            TrainerState.from_payload(payload, source=SOURCE)
        assert problems_of(info) == [
            "validation: missing (required by statecraft.trainer-state.v3)"
        ]

    def test_malformed_validation_is_refused(self) -> None:
        """A stage a save never writes and a malformed identity are both named."""
        bad = {
            "schema": "statecraft.validation-state.v1",
            "identity": {"enabled": "yes", "source": "", "config": ""},
            "stage": "published",
        }
        with pytest.raises(TrainerStateError) as info:
            TrainerState.from_payload(valid_payload(validation=bad), source=SOURCE)
        assert problems_of(info) == [
            "validation.stage: 'published' (expected 'none' or 'evaluation_pending')",
            "validation.identity: {'enabled': 'yes', 'source': '', 'config': ''}",
        ]

    def test_constructor_rejects_a_non_state(self) -> None:
        """TrainerState(validation=...) must be a ValidationState or None."""
        with pytest.raises(TrainerStateError, match="validation: expected a ValidationState"):
            TrainerState(optimizer_step=0, attempt_id=0, rng=None, validation="pending")  # type: ignore[arg-type]
