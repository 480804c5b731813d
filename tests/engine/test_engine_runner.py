"""Tests of statecraft.engine.runner: running a checked table over its bindings.

Tables are defined inline with ``parse_table``; effects record what they did on a small context
object, so each test can say which effects ran, in which order, and which did not.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from statecraft.engine import (
    Bindings,
    CrashPlan,
    IoGate,
    Machine,
    MachineTable,
    RunResult,
    SimulatedCrash,
    TraceEvent,
    parse_table,
)
from statecraft.errors import MachineRuntimeError
from statecraft.storage import LocalStore, OsFilesystem, SimFilesystem

TOY_TABLE = Path(__file__).resolve().parents[1] / "toy" / "replace.toml"


@attrs.define
class Ctx:
    """What effects, guards and observers see: a log of calls, guard values, planted errors."""

    calls: list[str] = attrs.field(factory=list)
    flags: dict[str, bool] = attrs.field(factory=dict)
    fail: dict[str, BaseException] = attrs.field(factory=dict)
    label: str = "absent"
    store: LocalStore | None = None


def effect(name: str) -> Callable[[Ctx], None]:
    """An effect that logs its name and raises the error planted for it, if any."""

    def run(ctx: Ctx) -> None:
        ctx.calls.append(name)
        if name in ctx.fail:
            raise ctx.fail[name]

    run.__name__ = name
    return run


def guard(name: str) -> Callable[[Ctx], bool]:
    """A guard reading ``ctx.flags[name]``."""
    return lambda ctx: ctx.flags[name]


def chain(*effects: str, on_error: dict[str, str] | None = None) -> MachineTable:
    """A straight line s0 -e0-> s1 -e1-> ... -> done; ``on_error`` maps effects to the
    failure state ``failed``, declared when used."""
    on_error = on_error or {}
    states: dict[str, dict[str, Any]] = {f"s{i}": {} for i in range(len(effects))}
    states["done"] = {"terminal": True}
    if on_error:
        states["failed"] = {"terminal": True, "failure": True}
    transitions = []
    for i, name in enumerate(effects):
        target = f"s{i + 1}" if i + 1 < len(effects) else "done"
        spec: dict[str, Any] = {"from": f"s{i}", "do": name, "to": target}
        if name in on_error:
            spec["on_error"] = on_error[name]
        transitions.append(spec)
    return parse_table(
        {"name": "line", "initial": "s0", "states": states, "transitions": transitions},
        source="line.toml",
    )


def bind(table: MachineTable, **extra: Any) -> Machine:
    """The machine of ``table`` with logging effects for every effect it names."""
    bindings = Bindings(effects={name: effect(name) for name in table.effect_names}, **extra)
    return Machine(table, bindings)


BRANCH = parse_table(
    {
        "name": "branch",
        "initial": "start",
        "states": {
            "start": {},
            "left": {"terminal": True},
            "right": {"terminal": True},
        },
        "transitions": [
            {"from": "start", "guard": "x", "do": "go_left", "to": "left"},
            {"from": "start", "guard": "not x", "do": "go_right", "to": "right"},
        ],
    }
)

OVERLAP = parse_table(
    {
        "name": "overlap",
        "initial": "start",
        "states": {"start": {}, "b": {"terminal": True}, "c": {"terminal": True}},
        "transitions": [
            {"from": "start", "guard": "x", "do": "to_b", "to": "b"},
            {"from": "start", "guard": "y", "do": "to_c", "to": "c"},
        ],
    }
)

RECOVERING = parse_table(
    {
        "name": "rec",
        "initial": "s0",
        "observe": "obs",
        "states": {
            "s0": {},
            "s1": {"observable": True},
            "s2": {"observable": True},
            "done": {"terminal": True, "observable": True},
        },
        "transitions": [
            {"from": "s0", "do": "e0", "to": "s1"},
            {"from": "s1", "do": "e1", "to": "s2"},
            {"from": "s2", "do": "e2", "to": "done"},
        ],
        "observations": {"absent": "nothing durable"},
        "recover": {"absent": "s0", "s1": "s1", "s2": "s2", "done": "done"},
    }
)


def recovering_machine() -> Machine:
    """RECOVERING bound to logging effects and an observer returning ``ctx.label``."""
    return bind(RECOVERING, observers={"obs": lambda ctx: ctx.label})


class TestMachineRun:
    """Machine.run: from the initial (or a given) state to a terminal state."""

    def test_runs_to_terminal_and_traces_every_effect(self) -> None:
        """Every effect runs once in table order; the trace records state, effect, target,
        outcome and duration of each."""
        machine = bind(chain("e0", "e1", "e2"))
        ctx = Ctx()
        result = machine.run(ctx)
        assert ctx.calls == ["e0", "e1", "e2"]
        assert isinstance(result, RunResult)
        assert result.machine == "line"
        assert result.final_state == "done"
        assert result.failed is False
        assert result.error is None
        assert result.started_from == "s0"
        assert result.observed is None
        assert [(e.state, e.effect, e.target, e.outcome) for e in result.trace] == [
            ("s0", "e0", "s1", "ok"),
            ("s1", "e1", "s2", "ok"),
            ("s2", "e2", "done", "ok"),
        ]
        for event in result.trace:
            assert isinstance(event.duration_s, float)
            assert 0.0 <= event.duration_s < 5.0
            assert event.error is None
            assert event.io_first is None  # no gate, no I/O accounting
            assert event.io_count == 0

    def test_duration_measures_the_effect(self) -> None:
        """An effect that takes measurable time shows at least that duration in its event."""
        import time

        table = chain("slow")
        machine = Machine(table, Bindings(effects={"slow": lambda ctx: time.sleep(0.02)}))
        (event,) = machine.run(Ctx()).trace
        assert event.duration_s >= 0.02

    def test_start_state_skips_earlier_effects(self) -> None:
        """Starting in a later state runs only the effects from there."""
        machine = bind(chain("e0", "e1", "e2"))
        ctx = Ctx()
        result = machine.run(ctx, start="s1")
        assert ctx.calls == ["e1", "e2"]
        assert result.started_from == "s1"

    def test_start_in_terminal_state_runs_nothing(self) -> None:
        """A run that starts in a terminal state returns at once with an empty trace."""
        machine = bind(chain("e0"))
        ctx = Ctx()
        result = machine.run(ctx, start="done")
        assert ctx.calls == []
        assert result.trace == ()
        assert result.final_state == "done"

    def test_undeclared_start_state_is_refused(self) -> None:
        """Starting in a state the table does not declare raises MachineRuntimeError."""
        machine = bind(chain("e0"))
        with pytest.raises(MachineRuntimeError) as info:
            machine.run(Ctx(), start="nowhere")
        assert str(info.value) == "machine 'line' in state 'nowhere': start state is not declared"
        assert info.value.machine == "line"
        assert info.value.state == "nowhere"

    def test_machine_can_run_again(self) -> None:
        """A second run of the same Machine starts from the initial state again."""
        machine = bind(chain("e0", "e1"))
        first, second = Ctx(), Ctx()
        machine.run(first)
        result = machine.run(second)
        assert second.calls == ["e0", "e1"]
        assert result.final_state == "done"

    @pytest.mark.parametrize(
        ("x", "effect_ran", "final"), [(True, "go_left", "left"), (False, "go_right", "right")]
    )
    def test_guards_choose_the_branch(self, x: bool, effect_ran: str, final: str) -> None:
        """``guard = "x"`` is taken when x is true, ``guard = "not x"`` when it is false."""
        machine = bind(BRANCH, guards={"x": guard("x")})
        ctx = Ctx(flags={"x": x})
        result = machine.run(ctx)
        assert ctx.calls == [effect_ran]
        assert result.final_state == final

    def test_no_enabled_transition_is_a_runtime_error(self) -> None:
        """When every guard is false the runner raises and names the state and the fix."""
        machine = bind(OVERLAP, guards={"x": guard("x"), "y": guard("y")})
        ctx = Ctx(flags={"x": False, "y": False})
        with pytest.raises(MachineRuntimeError) as info:
            machine.run(ctx)
        assert str(info.value) == (
            "machine 'overlap' in state 'start': exactly one transition must be enabled, found "
            "0: none; make the guards of this state mutually exclusive and exhaustive"
        )
        assert ctx.calls == []

    def test_two_enabled_transitions_is_a_runtime_error(self) -> None:
        """When two guards are true the runner raises and names both transitions."""
        machine = bind(OVERLAP, guards={"x": guard("x"), "y": guard("y")})
        ctx = Ctx(flags={"x": True, "y": True})
        with pytest.raises(MachineRuntimeError) as info:
            machine.run(ctx)
        assert str(info.value) == (
            "machine 'overlap' in state 'start': exactly one transition must be enabled, found "
            "2: #0 start [x] --to_b--> b, #1 start [y] --to_c--> c; make the guards of this "
            "state mutually exclusive and exhaustive"
        )
        assert ctx.calls == []

    def test_on_error_path_ends_in_failure_state(self) -> None:
        """An effect error with on_error moves to that state; the run reports, not raises, it."""
        machine = bind(chain("e0", "e1", "e2", on_error={"e1": "failed"}))
        boom = ValueError("disk on fire")
        ctx = Ctx(fail={"e1": boom})
        result = machine.run(ctx)
        assert ctx.calls == ["e0", "e1"]
        assert result.final_state == "failed"
        assert result.failed is True
        assert result.error is boom
        last = result.trace[-1]
        assert (last.state, last.effect, last.target, last.outcome) == (
            "s1",
            "e1",
            "failed",
            "error",
        )
        assert last.error == "ValueError('disk on fire')"

    def test_on_error_to_a_non_failure_state_continues(self) -> None:
        """An on_error edge into an ordinary state continues the run; a successful end reports
        no error."""
        table = parse_table(
            {
                "name": "cleanup",
                "initial": "a",
                "states": {"a": {}, "cleaning": {}, "done": {"terminal": True}},
                "transitions": [
                    {"from": "a", "do": "work", "to": "done", "on_error": "cleaning"},
                    {"from": "cleaning", "do": "clean", "to": "done"},
                ],
            }
        )
        ctx = Ctx(fail={"work": OSError("nope")})
        result = bind(table).run(ctx)
        assert ctx.calls == ["work", "clean"]
        assert result.final_state == "done"
        assert result.failed is False
        assert result.error is None
        assert [e.outcome for e in result.trace] == ["error", "ok"]

    def test_effect_error_without_on_error_propagates_with_trace_note(self) -> None:
        """An effect error with no on_error edge propagates unchanged, with the trace as a note;
        later effects do not run."""
        machine = bind(chain("e0", "e1", "e2"))
        boom = KeyError("missing")
        ctx = Ctx(fail={"e1": boom})
        with pytest.raises(KeyError) as info:
            machine.run(ctx)
        assert info.value is boom
        assert ctx.calls == ["e0", "e1"]
        (note,) = info.value.__notes__
        lines = note.splitlines()
        assert lines[0] == "line trace:"
        assert lines[1].startswith("  0: s0 --e0--> s1 ok ")
        assert lines[2].startswith("  1: s1 --e1--> s1 error ")
        assert lines[2].endswith("KeyError('missing')")
        assert len(lines) == 3


class TestRunResult:
    """RunResult.raise_for_failure: re-raise what ended a run in a failure state."""

    def test_reraises_the_original_error(self) -> None:
        """The very exception the effect raised comes back out."""
        machine = bind(chain("e0", on_error={"e0": "failed"}))
        boom = RuntimeError("write failed")
        result = machine.run(Ctx(fail={"e0": boom}))
        with pytest.raises(RuntimeError) as info:
            result.raise_for_failure()
        assert info.value is boom

    def test_success_returns_self(self) -> None:
        """A successful result is returned unchanged, for chaining."""
        result = bind(chain("e0")).run(Ctx())
        assert result.raise_for_failure() is result

    def test_failure_state_without_error_raises_runtime_error(self) -> None:
        """Reaching a failure state through an ordinary transition raises MachineRuntimeError."""
        table = parse_table(
            {
                "name": "giveup",
                "initial": "a",
                "states": {"a": {}, "gave_up": {"terminal": True, "failure": True}},
                "transitions": [{"from": "a", "do": "give_up", "to": "gave_up"}],
            }
        )
        result = bind(table).run(Ctx())
        assert result.failed is True
        assert result.error is None
        with pytest.raises(MachineRuntimeError) as info:
            result.raise_for_failure()
        assert str(info.value) == "machine 'giveup' in state 'gave_up': ended in a failure state"


class TestCrashPlanInRun:
    """Machine.run with a CrashPlan: the simulated process dies before or after an effect."""

    @pytest.mark.parametrize("k", [0, 1, 2])
    def test_crash_before_kth_effect(self, k: int) -> None:
        """Crashing before effect k raises SimulatedCrash with the k events before it; effect k
        and the later ones do not run."""
        machine = bind(chain("e0", "e1", "e2"))
        ctx = Ctx()
        with pytest.raises(SimulatedCrash) as info:
            machine.run(ctx, crash=CrashPlan(before_effect=k))
        assert ctx.calls == ["e0", "e1", "e2"][:k]
        assert str(info.value) == f"simulated crash before effect #{k}"
        trace = info.value.trace  # type: ignore[attr-defined]
        assert [e.effect for e in trace] == ["e0", "e1", "e2"][:k]
        assert all(e.outcome == "ok" for e in trace)

    @pytest.mark.parametrize("k", [0, 1, 2])
    def test_crash_after_kth_effect(self, k: int) -> None:
        """Crashing after effect k raises SimulatedCrash once effect k returned; later effects
        do not run."""
        machine = bind(chain("e0", "e1", "e2"))
        ctx = Ctx()
        with pytest.raises(SimulatedCrash) as info:
            machine.run(ctx, crash=CrashPlan(after_effect=k))
        assert ctx.calls == ["e0", "e1", "e2"][: k + 1]
        assert str(info.value) == f"simulated crash after effect #{k}"
        assert [e.effect for e in info.value.trace] == ctx.calls  # type: ignore[attr-defined]

    def test_crash_beyond_the_last_effect_never_fires(self) -> None:
        """A crash plan past the run's end lets the run complete."""
        machine = bind(chain("e0", "e1"))
        result = machine.run(Ctx(), crash=CrashPlan(before_effect=2))
        assert result.final_state == "done"

    def test_at_io_needs_a_gate(self) -> None:
        """A crash at an I/O index without the shared gate is refused with the fix."""
        machine = bind(chain("e0"))
        with pytest.raises(ValueError, match=r"CrashPlan\.at_io needs the IoGate the stores share"):
            machine.run(Ctx(), crash=CrashPlan(at_io=0))


def two_writes() -> Machine:
    """A machine whose effects publish ``a`` then ``b`` with LocalStore.write_atomic
    (5 store operations each)."""
    table = parse_table(
        {
            "name": "writes",
            "initial": "s0",
            "states": {"s0": {}, "s1": {}, "done": {"terminal": True}},
            "transitions": [
                {"from": "s0", "do": "write_a", "to": "s1"},
                {"from": "s1", "do": "write_b", "to": "done"},
            ],
        }
    )

    def write(name: str) -> Callable[[Ctx], None]:
        def run(ctx: Ctx) -> None:
            ctx.calls.append(f"write_{name}")
            ctx.store.write_atomic(name, name.encode() * 10)  # type: ignore[union-attr]
            ctx.calls.append(f"wrote_{name}")

        return run

    return Machine(table, Bindings(effects={"write_a": write("a"), "write_b": write("b")}))


WRITE_OPS = ["open_write", "write", "fsync", "rename", "fsync_dir"]
OPS_PER_WRITE = len(WRITE_OPS)


def store_over(kind: str, tmp_path: Path, gate: IoGate) -> LocalStore:
    """A LocalStore whose filesystem (simulated or the real OS) passes ``gate``."""
    if kind == "sim":
        fs = SimFilesystem(gate=gate)
        fs.makedirs("/store")
        return LocalStore("/store", fs=fs)
    return LocalStore(tmp_path, fs=OsFilesystem(gate=gate))


def published(store: LocalStore) -> set[str]:
    """Names visible in the store, temporaries left out."""
    return {n for n in store.list() if not n.startswith(".")}


@pytest.mark.parametrize("kind", ["sim", "os"])
class TestIoCrash:
    """Machine.run with CrashPlan(at_io=k) and an IoGate shared with a LocalStore."""

    def test_gate_accounts_io_per_effect(self, kind: str, tmp_path: Path) -> None:
        """Without a crash each event records the index and count of its store operations."""
        gate = IoGate()
        store = store_over(kind, tmp_path, gate)
        assert gate.count == 0
        result = two_writes().run(Ctx(store=store), gate=gate)
        assert [(e.io_first, e.io_count) for e in result.trace] == [(0, 5), (5, 5)]
        assert [r.op for r in gate.log] == WRITE_OPS * 2
        assert published(store) == {"a", "b"}

    @pytest.mark.parametrize("k", range(2 * OPS_PER_WRITE))
    def test_crash_lands_inside_the_right_effect(self, kind: str, tmp_path: Path, k: int) -> None:
        """Crashing before store operation k stops the effect that performs it, at that
        operation; the operations before k took place and none after."""
        gate = IoGate()
        store = store_over(kind, tmp_path, gate)
        ctx = Ctx(store=store)
        with pytest.raises(SimulatedCrash) as info:
            two_writes().run(ctx, crash=CrashPlan(at_io=k), gate=gate)
        op = WRITE_OPS[k % OPS_PER_WRITE]
        assert str(info.value).startswith(f"simulated crash before I/O op #{k} ({op} ")
        effect_no = k // OPS_PER_WRITE
        trace: tuple[TraceEvent, ...] = info.value.trace  # type: ignore[attr-defined]
        assert len(trace) == effect_no + 1
        crashed = trace[-1]
        assert crashed.effect == ["write_a", "write_b"][effect_no]
        assert crashed.outcome == "crash"
        assert crashed.target == crashed.state  # the machine did not move
        assert (crashed.io_first, crashed.io_count) == (effect_no * 5, k % OPS_PER_WRITE)
        assert crashed.error is not None
        assert crashed.error.startswith("SimulatedCrash(")
        assert gate.count == k
        # the crashing effect never returned; the next one never started
        assert ctx.calls == ["write_a", "wrote_a", "write_b"][: 2 * effect_no + 1]
        # a name is published once its rename (op 3 of its write) ran
        expected = {"a"} if k >= 4 else set()
        if k >= 9:
            expected.add("b")
        assert published(store) == expected

    def test_crash_after_the_last_op_lets_the_run_finish(self, kind: str, tmp_path: Path) -> None:
        """An I/O crash index past the run's operations never fires."""
        gate = IoGate()
        store = store_over(kind, tmp_path, gate)
        result = two_writes().run(Ctx(store=store), crash=CrashPlan(at_io=10), gate=gate)
        assert result.final_state == "done"

    def test_simulated_crash_is_not_caught_by_except_exception(
        self, kind: str, tmp_path: Path
    ) -> None:
        """An effect that swallows every Exception around its I/O still dies at the crash."""
        gate = IoGate()
        store = store_over(kind, tmp_path, gate)
        table = parse_table(
            {
                "name": "swallow",
                "initial": "a",
                "states": {"a": {}, "b": {"terminal": True}},
                "transitions": [{"from": "a", "do": "careless", "to": "b", "on_error": "b"}],
            }
        )

        def careless(ctx: Ctx) -> None:
            try:
                ctx.store.write_atomic("x", b"payload")  # type: ignore[union-attr]
            except Exception:  # the point: this must not catch a simulated crash
                ctx.calls.append("swallowed")
            ctx.calls.append("after")

        ctx = Ctx(store=store)
        machine = Machine(table, Bindings(effects={"careless": careless}))
        with pytest.raises(SimulatedCrash):
            machine.run(ctx, crash=CrashPlan(at_io=2), gate=gate)
        assert ctx.calls == []


class TestMachineRecover:
    """Machine.observe / Machine.recover: classify durable storage, continue from there."""

    @pytest.mark.parametrize(
        ("label", "start", "ran"),
        [
            ("absent", "s0", ["e0", "e1", "e2"]),
            ("s1", "s1", ["e1", "e2"]),
            ("s2", "s2", ["e2"]),
            ("done", "done", []),
        ],
    )
    def test_recover_continues_from_mapped_state(
        self, label: str, start: str, ran: list[str]
    ) -> None:
        """recover() observes a label and runs on from the state its recover entry names."""
        machine = recovering_machine()
        ctx = Ctx(label=label)
        result = machine.recover(ctx)
        assert ctx.calls == ran
        assert result.observed == label
        assert result.started_from == start
        assert result.final_state == "done"
        assert [e.effect for e in result.trace] == ran

    def test_observe_returns_the_label(self) -> None:
        """observe() hands back the observer's label when the table declares it."""
        assert recovering_machine().observe(Ctx(label="s2")) == "s2"

    def test_undeclared_observation_is_a_runtime_error(self) -> None:
        """An observer returning a label with no recover entry raises and lists the declared
        labels; nothing runs."""
        machine = recovering_machine()
        ctx = Ctx(label="bogus")
        with pytest.raises(MachineRuntimeError) as info:
            machine.recover(ctx)
        assert str(info.value) == (
            "machine 'rec' in state '-': observe returned 'bogus', which has no recover entry; "
            "declared labels: ['absent', 'done', 's1', 's2']"
        )
        assert ctx.calls == []

    def test_observe_without_binding_is_a_runtime_error(self) -> None:
        """observe() on a table without an observe binding raises MachineRuntimeError."""
        machine = bind(chain("e0"))
        with pytest.raises(MachineRuntimeError, match="the table declares no observe binding"):
            machine.observe(Ctx())

    def test_recover_can_crash_too(self) -> None:
        """recover() accepts a crash plan, counted from the first effect it runs."""
        machine = recovering_machine()
        ctx = Ctx(label="s1")
        with pytest.raises(SimulatedCrash):
            machine.recover(ctx, crash=CrashPlan(after_effect=0))
        assert ctx.calls == ["e1"]


class TestMachineFromFile:
    """Machine.from_file: load, check and bind a table file."""

    def test_loads_the_toy_table(self) -> None:
        """The toy replace table binds and reports its name and source."""

        def nothing(ctx: object) -> None:
            return None

        bindings = Bindings(
            effects={"write_data": nothing, "switch_pointer": nothing},
            observers={"observe_replace": lambda ctx: "absent"},
        )
        machine = Machine.from_file(TOY_TABLE, bindings)
        assert machine.name == "replace"
        assert repr(machine) == f"Machine('replace', states=3, source={str(TOY_TABLE)!r})"
        assert machine.run(None).final_state == "committed"


class TestPerRunState:
    """A Machine is immutable; each run keeps its own state, so runs of one table overlap."""

    def test_two_runs_of_one_machine_interleave_in_two_threads(self) -> None:
        """Two threads alternate effects of the same Machine step by step (each effect waits
        for the other run's); both reach ``done`` with their own full trace."""
        import threading

        table = chain("a", "b", "c")
        turn = threading.Condition()
        order: list[tuple[str, str]] = []
        state = {"next": "one"}

        def step(name: str) -> Callable[[Any], None]:
            def run(ctx: Any) -> None:
                with turn:
                    turn.wait_for(lambda: state["next"] == ctx.who, timeout=10)
                    order.append((ctx.who, name))
                    state["next"] = "two" if ctx.who == "one" else "one"
                    turn.notify_all()

            return run

        machine = Machine(table, Bindings(effects={n: step(n) for n in ("a", "b", "c")}))

        @attrs.define
        class Who:
            who: str

        results: dict[str, RunResult] = {}

        def go(who: str) -> None:
            results[who] = machine.run(Who(who))

        threads = [threading.Thread(target=go, args=(w,)) for w in ("one", "two")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=20)
        assert order == [
            ("one", "a"), ("two", "a"), ("one", "b"), ("two", "b"), ("one", "c"), ("two", "c"),
        ]  # fmt: skip
        for who in ("one", "two"):
            assert results[who].final_state == "done"
            assert [e.effect for e in results[who].trace] == ["a", "b", "c"]

    def test_a_run_nested_in_an_effect_of_the_same_machine(self) -> None:
        """An effect may run the same Machine to completion; the outer run continues from its
        own state afterwards (the state lives on the run, not the Machine)."""
        table = chain("a", "b")
        inner: list[RunResult] = []

        def a(ctx: Ctx) -> None:
            ctx.calls.append("a")
            if len(ctx.calls) == 1:
                inner.append(machine.run(ctx))

        machine = Machine(table, Bindings(effects={"a": a, "b": effect("b")}))
        ctx = Ctx()
        outer = machine.run(ctx)
        assert outer.final_state == "done"
        assert inner[0].final_state == "done"
        assert ctx.calls == ["a", "a", "b", "b"]
        assert [e.effect for e in outer.trace] == ["a", "b"]

    def test_sequential_runs_share_no_state(self) -> None:
        """A run keeps its state in its own locals: the Machine's ``transitions`` graph holds
        no model, and a run after a crashed one starts from its own start state."""
        machine = bind(chain("a", "b"))
        with pytest.raises(SimulatedCrash):
            machine.run(Ctx(), crash=CrashPlan(after_effect=0))
        first = machine.run(Ctx())
        second = machine.run(Ctx(), start="s1")
        assert machine._bookkeeping.models == []
        assert [e.effect for e in first.trace] == ["a", "b"]
        assert (first.started_from, second.started_from) == ("s0", "s1")
        assert [e.effect for e in second.trace] == ["b"]

    def test_compiled_steps_follow_the_transitions_graph(self) -> None:
        """Each compiled step moves to the target and ``on_error`` state that both the table
        and the ``transitions`` graph give its transition."""
        machine = bind(chain("a", "b", on_error={"b": "failed"}))
        for t in machine.table.transitions:
            (step,) = machine._steps[t.source]
            assert (step.target, step.on_error) == (t.target, t.on_error)
            graph = machine._bookkeeping.events[f"_ok{t.index}"].transitions[t.source]
            assert [g.dest for g in graph] == [t.target]
        assert machine._steps["done"] == machine._steps["failed"] == ()

    def test_a_custom_effect_call_is_used_for_every_effect(self) -> None:
        """``call=`` receives each effect's name, function and context."""
        seen: list[str] = []

        def call(name: str, fn: Callable[[Any], Any], ctx: Any) -> None:
            seen.append(name)
            fn(ctx)

        ctx = Ctx()
        bind(chain("a", "b")).run(ctx, call=call)
        assert seen == ["a", "b"]
        assert ctx.calls == ["a", "b"]
