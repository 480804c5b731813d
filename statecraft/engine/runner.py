"""Run a checked transition table over its bindings.

The runner is deliberately small: it asks the guards which single transition is enabled, runs
its effect, moves to the target (or to ``on_error`` when the effect raises), and repeats until a
terminal state. ``transitions.Machine`` holds the current state so the bookkeeping is the
library's; the decisions are ours.

Per-run state: a :class:`Machine` is immutable once built (its table, bindings and the
``transitions`` graph); every :meth:`Machine.run` keeps its state in locals and in a
``transitions`` bookkeeping model (:class:`_Run`) that it holds exclusively for the length of
the run. Models are registered with the shared graph once and kept in a free list when idle
(a cache holding no run's state): ``add_model`` costs about as much as 64 transitions on a
64-state table, and building a ``transitions.Machine`` per run far more. Two runs of one
machine can therefore be in flight at once, in two threads, or nested.

Who runs an effect: ``run(..., call=...)`` hands every effect call to an
:data:`EffectCall`; the default calls it here. Under ``torch.distributed`` the facade passes
:func:`statecraft.parallel.coordinated.rank_zero_effects`, which runs a coordinator effect on
rank 0 and broadcasts its outcome (the engine, the lowest layer, knows nothing of ranks).

Crash points (before / after the k-th effect, before the k-th store operation) are injected
here and through the :class:`~statecraft.engine.crash.IoGate` the stores share.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import attrs
from transitions import Machine as _TransitionsMachine

from statecraft.engine.bindings import Bindings, Effect
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


class _Run:
    """The ``transitions`` model one run holds exclusively while it is in flight; its
    ``state`` is that run's current state."""

    state: str


class Machine:
    """A table bound to its effects, checked once at construction; immutable afterwards, so
    runs of one machine may overlap (each keeps its own state).

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
        self._terminal = set(table.terminal_names)
        self._failure = {s.name for s in table.states if s.failure}
        self._idle: list[_Run] = []  # registered bookkeeping models no run holds
        self._idle_lock = threading.Lock()
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
        candidates = []
        for t in self.table.outgoing(state):
            if t.guard is None:
                candidates.append(t)
                continue
            value = bool(self.bindings.guards[t.guard.name](ctx))
            if value != t.guard.negated:
                candidates.append(t)
        if len(candidates) != 1:
            labels = ", ".join(t.label() for t in candidates) or "none"
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
        if state not in self.table.state_names:
            raise MachineRuntimeError(self.table.name, state, "start state is not declared")
        if crash is not None and crash.at_io is not None:
            if gate is None:
                raise ValueError("CrashPlan.at_io needs the IoGate the stores share; pass gate=")
            gate.crash_at = crash.at_io
        run = self._checkout(state)
        try:
            return self._run(run, ctx, state, start, crash, gate, observed, call)
        finally:
            with self._idle_lock:
                self._idle.append(run)

    def _checkout(self, state: str) -> _Run:
        """A bookkeeping model for one run, in ``state``, held by that run alone."""
        with self._idle_lock:
            run = self._idle.pop() if self._idle else None
        if run is None:
            run = _Run()
            self._bookkeeping.add_model(run, initial=state)
        else:
            self._bookkeeping.set_state(state, model=run)
        return run

    def _run(
        self,
        run: _Run,
        ctx: object,
        state: str,
        start: str | None,
        crash: CrashPlan | None,
        gate: IoGate | None,
        observed: str | None,
        call: EffectCall,
    ) -> RunResult:
        trace: list[TraceEvent] = []
        error: BaseException | None = None
        effect_index = 0
        while state not in self._terminal:
            transition = self.enabled(state, ctx)
            if crash is not None and crash.before_effect == effect_index:
                raise self._crashed(SimulatedCrash(crash.describe()), trace)
            io_first = gate.count if gate is not None else None
            started = time.perf_counter()
            try:
                call(transition.effect, self.bindings.effects[transition.effect], ctx)
            except SimulatedCrash as exc:
                trace.append(self._event(transition, state, "crash", started, gate, io_first, exc))
                raise self._crashed(exc, trace) from None
            except Exception as exc:
                event = self._event(transition, state, "error", started, gate, io_first, exc)
                if transition.on_error is None:
                    trace.append(event)
                    exc.add_note(f"{self.table.name} trace:\n{format_trace(trace)}")
                    try:
                        exc.trace = tuple(trace)  # type: ignore[attr-defined]
                    except AttributeError:  # an exception type without a __dict__
                        pass
                    raise
                trace.append(attrs.evolve(event, target=transition.on_error))
                getattr(run, f"_err{transition.index}")()
                state = transition.on_error
                error = exc
                effect_index += 1
                continue
            trace.append(self._event(transition, transition.target, "ok", started, gate, io_first))
            getattr(run, f"_ok{transition.index}")()
            state = run.state
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

    def _event(
        self,
        transition: TransitionSpec,
        target: str,
        outcome: str,
        started: float,
        gate: IoGate | None,
        io_first: int | None,
        exc: BaseException | None = None,
    ) -> TraceEvent:
        io_count = gate.count - io_first if gate is not None and io_first is not None else 0
        return TraceEvent(
            state=transition.source,
            effect=transition.effect,
            target=target if outcome != "crash" else transition.source,
            outcome=outcome,
            duration_s=time.perf_counter() - started,
            io_first=io_first,
            io_count=io_count,
            error=repr(exc) if exc is not None else None,
        )

    @staticmethod
    def _crashed(exc: SimulatedCrash, trace: list[TraceEvent]) -> SimulatedCrash:
        exc.trace = tuple(trace)  # type: ignore[attr-defined]
        return exc
