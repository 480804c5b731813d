"""Run a checked transition table over its bindings.

The runner is deliberately small: it asks the guards which single transition is enabled, runs
its effect, moves to the target (or to ``on_error`` when the effect raises), and repeats until a
terminal state. The decisions are ours; the ``transitions`` library holds the table's graph.

Compiled once, run many times: a :class:`Machine` is immutable once built. Its constructor
checks the table, builds the ``transitions`` graph of it (one trigger per outcome of every
transition, no model), and compiles from that graph a map from each state to its outgoing
steps, each with its guard, effect and the target states the graph gives it, the callables
already resolved from the bindings. A run keeps its state in its own locals and walks that map:
no lock, no ``transitions`` model, no name lookup per transition (the library's trigger path
cost 3-4x the rest of a transition). Two runs of one machine can therefore be in flight at
once, in two threads, or nested, sharing nothing but the immutable map.

Who runs an effect: ``run(..., call=...)`` hands every effect call to an
:data:`EffectCall`; the default calls it here. Under ``torch.distributed`` the facade passes
:func:`statecraft.parallel.coordinated.rank_zero_effects`, which runs a coordinator effect on
rank 0 and broadcasts its outcome (the engine, the lowest layer, knows nothing of ranks).

Crash points (before / after the k-th effect, before the k-th store operation) are injected
here and through the :class:`~statecraft.engine.crash.IoGate` the stores share.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import attrs
from transitions import Machine as _TransitionsMachine

from statecraft.engine.bindings import Bindings, Effect, Guard
from statecraft.engine.checks import check_table
from statecraft.engine.crash import CrashPlan, IoGate, SimulatedCrash
from statecraft.engine.loader import load_table
from statecraft.engine.table import MachineTable, TransitionSpec
from statecraft.engine.trace import TraceEvent, format_trace
from statecraft.errors import MachineRuntimeError

__all__ = ["EffectCall", "Machine", "RunResult", "call_here"]

#: ``call(effect_name, effect, ctx)`` runs one effect for a run (see the module docstring)
EffectCall = Callable[[str, Effect, object], None]


def call_here(name: str, effect: Effect, ctx: object) -> None:
    """The default :data:`EffectCall`: run the effect in this process."""
    effect(ctx)


# ``transitions`` logs every state entry at INFO; our trace records the same. Quiet it unless
# the application configured that logger itself.
if logging.getLogger("transitions").level == logging.NOTSET:
    logging.getLogger("transitions").setLevel(logging.WARNING)


@attrs.frozen
class RunResult:
    """The end of a run.

    Attributes:
        machine: the machine's name.
        final_state: the terminal state reached.
        failed: the terminal state is a failure state.
        trace: every effect executed, in order.
        error: the exception that led to a failure state (``None`` on success).
        started_from: the state the run started in.
        observed: the observation label when the run was started by :meth:`Machine.recover`.
    """

    machine: str
    final_state: str
    failed: bool
    trace: tuple[TraceEvent, ...]
    error: BaseException | None = None
    started_from: str = ""
    observed: str | None = None

    def raise_for_failure(self) -> RunResult:
        """Re-raise the error that ended the run in a failure state; return self otherwise."""
        if self.failed and self.error is not None:
            raise self.error
        if self.failed:
            raise MachineRuntimeError(self.machine, self.final_state, "ended in a failure state")
        return self


@attrs.frozen
class _Step:
    """One compiled transition: its spec, its guard and effect resolved to callables, and the
    states the ``transitions`` graph moves a run to on each outcome."""

    spec: TransitionSpec
    guard: Guard | None
    negated: bool
    effect: Effect
    target: str
    on_error: str | None


class Machine:
    """A table bound to its effects, checked and compiled once at construction; immutable
    afterwards, so runs of one machine may overlap (each keeps its own state).

    Args:
        table: the loaded table.
        bindings: callables for every effect, guard and observation the table names.

    Raises:
        MachineDefinitionError: the table or its bindings fail a static check.
    """

    def __init__(self, table: MachineTable, bindings: Bindings) -> None:
        check_table(table, bindings)
        self.table = table
        self.bindings = bindings
        self._terminal = frozenset(table.terminal_names)
        self._failure = frozenset(s.name for s in table.states if s.failure)
        self._state_names = frozenset(table.state_names)
        specs = []
        for t in table.transitions:
            specs.append({"trigger": f"_ok{t.index}", "source": t.source, "dest": t.target})
            if t.on_error:
                specs.append({"trigger": f"_err{t.index}", "source": t.source, "dest": t.on_error})
        self._bookkeeping = _TransitionsMachine(
            model=None,
            states=list(table.state_names),
            transitions=specs,
            initial=table.initial,
            auto_transitions=False,
        )
        self._steps = self._compile()

    def _compile(self) -> dict[str, tuple[_Step, ...]]:
        """State -> its outgoing steps in table order; targets read from the graph."""
        steps: dict[str, list[_Step]] = {s.name: [] for s in self.table.states}
        for t in self.table.transitions:
            guard = self.bindings.guards[t.guard.name] if t.guard is not None else None
            steps[t.source].append(
                _Step(
                    spec=t,
                    guard=guard,
                    negated=t.guard.negated if t.guard is not None else False,
                    effect=self.bindings.effects[t.effect],
                    target=self._dest(f"_ok{t.index}", t.source),
                    on_error=self._dest(f"_err{t.index}", t.source) if t.on_error else None,
                )
            )
        return {state: tuple(out) for state, out in steps.items()}

    def _dest(self, trigger: str, source: str) -> str:
        """Where the graph's ``trigger`` leads from ``source``."""
        (transition,) = self._bookkeeping.events[trigger].transitions[source]
        return str(transition.dest)

    @classmethod
    def from_file(cls, path: str | Path, bindings: Bindings) -> Machine:
        """Load, check and bind the table at ``path``."""
        return cls(load_table(path), bindings)

    @property
    def name(self) -> str:
        return self.table.name

    def __repr__(self) -> str:
        table = self.table
        return f"Machine({table.name!r}, states={len(table.states)}, source={table.source!r})"

    def enabled(self, state: str, ctx: object) -> TransitionSpec:
        """The single enabled transition out of ``state``.

        Raises:
            MachineRuntimeError: none or several are enabled (guards overlap or leave a gap).
        """
        return self._enabled(state, ctx).spec

    def _enabled(self, state: str, ctx: object) -> _Step:
        outgoing = self._steps[state]
        if len(outgoing) == 1 and outgoing[0].guard is None:
            return outgoing[0]
        candidates = [
            step for step in outgoing if step.guard is None or bool(step.guard(ctx)) != step.negated
        ]
        if len(candidates) != 1:
            labels = ", ".join(step.spec.label() for step in candidates) or "none"
            raise MachineRuntimeError(
                self.table.name,
                state,
                f"exactly one transition must be enabled, found {len(candidates)}: {labels}; "
                "make the guards of this state mutually exclusive and exhaustive",
            )
        return candidates[0]

    def run(
        self,
        ctx: object,
        *,
        start: str | None = None,
        crash: CrashPlan | None = None,
        gate: IoGate | None = None,
        observed: str | None = None,
        call: EffectCall = call_here,
    ) -> RunResult:
        """Run from ``start`` (default: the initial state) to a terminal state.

        Args:
            ctx: the transaction context handed to every effect, guard and observation.
            start: the state to start in (a recover target when resuming).
            crash: where to simulate a crash, if anywhere.
            gate: the I/O gate the context's stores share; needed for ``crash.at_io`` and to
                record which store operations each effect performed.
            call: how each effect is called (default: here; see :data:`EffectCall`).

        Returns:
            the :class:`RunResult`; a failure terminal state is reported, not raised.

        Raises:
            SimulatedCrash: at the crash point; ``.trace`` holds the events so far.
            Exception: an effect's error when its transition has no ``on_error``; the trace is
                attached as a note and as ``.trace``.
        """
        state = start or self.table.initial
        if state not in self._state_names:
            raise MachineRuntimeError(self.table.name, state, "start state is not declared")
        if crash is not None and crash.at_io is not None:
            if gate is None:
                raise ValueError("CrashPlan.at_io needs the IoGate the stores share; pass gate=")
            gate.crash_at = crash.at_io
        trace: list[TraceEvent] = []
        error: BaseException | None = None
        effect_index = 0
        terminal, clock, here = self._terminal, time.perf_counter, call is call_here
        while state not in terminal:
            step = self._enabled(state, ctx)
            if crash is not None and crash.before_effect == effect_index:
                raise self._crashed(SimulatedCrash(crash.describe()), trace)
            io_first = gate.count if gate is not None else None
            started = clock()
            try:
                if here:
                    step.effect(ctx)
                else:
                    call(step.spec.effect, step.effect, ctx)
            except SimulatedCrash as exc:
                trace.append(_event(step.spec, state, "crash", started, gate, io_first, exc))
                raise self._crashed(exc, trace) from None
            except Exception as exc:
                if step.on_error is None:
                    trace.append(_event(step.spec, state, "error", started, gate, io_first, exc))
                    exc.add_note(f"{self.table.name} trace:\n{format_trace(trace)}")
                    try:
                        exc.trace = tuple(trace)  # type: ignore[attr-defined]
                    except AttributeError:  # an exception type without a __dict__
                        pass
                    raise
                state = step.on_error
                trace.append(_event(step.spec, state, "error", started, gate, io_first, exc))
                error = exc
                effect_index += 1
                continue
            duration = clock() - started
            state = step.target
            trace.append(
                TraceEvent(
                    state=step.spec.source,
                    effect=step.spec.effect,
                    target=state,
                    outcome="ok",
                    duration_s=duration,
                    io_first=io_first,
                    io_count=gate.count - io_first
                    if gate is not None and io_first is not None
                    else 0,
                )
            )
            if crash is not None and crash.after_effect == effect_index:
                raise self._crashed(SimulatedCrash(crash.describe()), trace)
            effect_index += 1
        return RunResult(
            machine=self.table.name,
            final_state=state,
            failed=state in self._failure,
            trace=tuple(trace),
            error=error if state in self._failure else None,
            started_from=start or self.table.initial,
            observed=observed,
        )

    def observe(self, ctx: object) -> str:
        """Classify durable storage with the table's observation binding.

        Raises:
            MachineRuntimeError: the binding reported a label the table does not declare.
        """
        if self.table.observe is None:
            raise MachineRuntimeError(self.table.name, "-", "the table declares no observe binding")
        label = self.bindings.observers[self.table.observe](ctx)
        if label not in self.table.recover:
            raise MachineRuntimeError(
                self.table.name,
                "-",
                f"observe returned {label!r}, which has no recover entry; declared labels: "
                f"{sorted(self.table.recover)}",
            )
        return label

    def recover(
        self,
        ctx: object,
        *,
        crash: CrashPlan | None = None,
        gate: IoGate | None = None,
        call: EffectCall = call_here,
    ) -> RunResult:
        """Observe durable storage, continue from the state ``recover`` maps it to."""
        label = self.observe(ctx)
        return self.run(
            ctx, start=self.table.recover[label], crash=crash, gate=gate, observed=label, call=call
        )

    @staticmethod
    def _crashed(exc: SimulatedCrash, trace: list[TraceEvent]) -> SimulatedCrash:
        exc.trace = tuple(trace)  # type: ignore[attr-defined]
        return exc


def _event(
    transition: TransitionSpec,
    target: str,
    outcome: str,
    started: float,
    gate: IoGate | None,
    io_first: int | None,
    exc: BaseException,
) -> TraceEvent:
    """The trace record of an effect that raised (``"error"``) or crashed (``"crash"``)."""
    io_count = gate.count - io_first if gate is not None and io_first is not None else 0
    return TraceEvent(
        state=transition.source,
        effect=transition.effect,
        target=target if outcome != "crash" else transition.source,
        outcome=outcome,
        duration_s=time.perf_counter() - started,
        io_first=io_first,
        io_count=io_count,
        error=repr(exc),
    )
