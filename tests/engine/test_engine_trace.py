"""Tests of statecraft.engine.trace: trace events and their text form."""

from __future__ import annotations

from statecraft.engine import TraceEvent, format_trace


class TestTraceEvent:
    """TraceEvent.describe: one line per executed effect."""

    def test_describe_ok_event_with_io(self) -> None:
        """An ok event shows the edge, the outcome, the duration in ms and its I/O range."""
        event = TraceEvent("a", "write", "b", "ok", 0.0015, io_first=3, io_count=5)
        assert event.describe() == "a --write--> b ok 1.500ms io[3:8]"

    def test_describe_error_event_without_gate(self) -> None:
        """An error event without I/O accounting shows the error and no I/O range."""
        event = TraceEvent("a", "write", "failed", "error", 0.0, error="OSError(5)")
        assert event.describe() == "a --write--> failed error 0.000ms OSError(5)"


class TestFormatTrace:
    """format_trace: numbered lines, or a placeholder for an empty trace."""

    def test_numbered_lines(self) -> None:
        """Each event is one indented, numbered line, in order."""
        events = [
            TraceEvent("a", "e0", "b", "ok", 0.0),
            TraceEvent("b", "e1", "b", "crash", 0.0, error="SimulatedCrash('x')"),
        ]
        assert format_trace(events) == (
            "  0: a --e0--> b ok 0.000ms\n  1: b --e1--> b crash 0.000ms SimulatedCrash('x')"
        )

    def test_empty_trace(self) -> None:
        """An empty trace says that no effect ran."""
        assert format_trace(()) == "  (no effects ran)"
