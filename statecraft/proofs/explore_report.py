"""What the crash explorer reports: each violation with its reproducer, and per scenario the
crash points, crash states (all, and distinct), checks run and seconds."""

from __future__ import annotations

from typing import Any

import attrs

from statecraft.engine.crash import IoRecord
from statecraft.engine.trace import TraceEvent, format_trace

__all__ = ["ScenarioReport", "Violation"]


@attrs.frozen
class Violation:
    """A guarantee that failed in one crash state, with what is needed to reproduce it."""

    guarantee: str
    statement: str
    message: str
    scenario: str
    point: str
    kind: str
    choice: str
    phase: str
    trace: tuple[TraceEvent, ...] = ()
    io_log: tuple[IoRecord, ...] = ()

    def reproducer(self) -> str:
        io = "\n".join(f"  io#{r.index}: {r.op} {r.target}" for r in self.io_log[-12:])
        return (
            f"{self.guarantee} violated ({self.phase}): {self.message}\n"
            f"  guarantee: {self.statement}\n"
            f"  scenario: {self.scenario}; crash point: {self.point}; kind: {self.kind}; "
            f"loss choice: {self.choice}\n"
            f"trace up to the crash:\n{format_trace(self.trace)}\n"
            f"last I/O operations before the crash:\n{io or '  (none)'}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "guarantee": self.guarantee,
            "statement": self.statement,
            "message": self.message,
            "scenario": self.scenario,
            "point": self.point,
            "kind": self.kind,
            "choice": self.choice,
            "phase": self.phase,
            "trace": [e.describe() for e in self.trace],
            "io_log": [f"#{r.index} {r.op} {r.target}" for r in self.io_log],
        }


@attrs.define
class ScenarioReport:
    """What exploring one scenario found.

    ``checks_by_guarantee`` counts every time a guarantee's check ran;
    ``substantive_by_guarantee`` counts the times it actually asserted something (it called
    ``ctx.exercised()`` or raised a violation), so a check that passes vacuously everywhere
    shows 0 there.
    """

    scenario: str
    machine: str
    io_operations: int = 0
    effects: int = 0
    crash_points: int = 0
    crash_states: int = 0
    distinct_crash_states: int = 0
    checks_run: int = 0
    checks_by_guarantee: dict[str, int] = attrs.field(factory=dict)
    substantive_by_guarantee: dict[str, int] = attrs.field(factory=dict)
    guarantees: tuple[str, ...] = ()
    violations: list[Violation] = attrs.field(factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations

    def violated_guarantees(self) -> set[str]:
        return {v.guarantee for v in self.violations}

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "machine": self.machine,
            "io_operations": self.io_operations,
            "effects": self.effects,
            "crash_points": self.crash_points,
            "crash_states": self.crash_states,
            "distinct_crash_states": self.distinct_crash_states,
            "checks_run": self.checks_run,
            "checks_by_guarantee": dict(self.checks_by_guarantee),
            "substantive_by_guarantee": dict(self.substantive_by_guarantee),
            "guarantees": list(self.guarantees),
            "violations": [v.to_json() for v in self.violations],
            "seconds": round(self.seconds, 3),
        }
