"""Tests of statecraft.engine.crash: crash plans, the I/O gate and the simulated crash."""

from __future__ import annotations

import pytest

from statecraft.engine import CrashPlan, Fault, FaultKind, IoGate, IoRecord, SimulatedCrash


class TestCrashPlan:
    """CrashPlan: exactly one non-negative crash index."""

    @pytest.mark.parametrize(
        ("plan", "text"),
        [
            (CrashPlan(before_effect=2), "before effect #2"),
            (CrashPlan(after_effect=0), "after effect #0"),
            (CrashPlan(at_io=7), "before I/O op #7"),
        ],
    )
    def test_describe(self, plan: CrashPlan, text: str) -> None:
        """describe() says where the crash happens."""
        assert plan.describe() == text

    @pytest.mark.parametrize(
        "kwargs",
        [{}, {"before_effect": 1, "at_io": 2}, {"after_effect": -1}],
        ids=["none", "two", "negative"],
    )
    def test_needs_exactly_one_non_negative_index(self, kwargs: dict[str, int]) -> None:
        """No index, two indices or a negative index is refused with the fix."""
        with pytest.raises(ValueError, match="CrashPlan needs exactly one non-negative index"):
            CrashPlan(**kwargs)


class TestIoGate:
    """IoGate: counts, logs, crashes at the armed index and hands out faults."""

    def test_counts_and_logs_operations(self) -> None:
        """Each operation gets the next index and a log record."""
        gate = IoGate()
        assert gate.before_io("write", "/a") is None
        assert gate.before_io("fsync", "/a") is None
        assert gate.count == 2
        assert gate.log == [IoRecord(0, "write", "/a"), IoRecord(1, "fsync", "/a")]

    def test_crash_at_index_raises_before_the_operation(self) -> None:
        """The armed operation raises SimulatedCrash and is neither counted nor logged."""
        gate = IoGate(crash_at=1)
        gate.before_io("write", "/a")
        with pytest.raises(SimulatedCrash) as info:
            gate.before_io("rename", "/a -> /b")
        assert str(info.value) == "simulated crash before I/O op #1 (rename /a -> /b)"
        assert info.value.where == "before I/O op #1 (rename /a -> /b)"
        assert gate.count == 1
        assert [r.op for r in gate.log] == ["write"]

    def test_fault_is_returned_for_its_index(self) -> None:
        """An injected fault comes back, with its kind and index, only for its operation."""
        gate = IoGate(faults={1: FaultKind.NO_SPACE})
        assert gate.before_io("write", "h") is None
        assert gate.before_io("write", "h") == Fault(FaultKind.NO_SPACE, 1)
        assert gate.before_io("write", "h") is None


class TestSimulatedCrash:
    """SimulatedCrash: a BaseException no ``except Exception`` can swallow."""

    def test_escapes_except_exception(self) -> None:
        """A handler for Exception does not catch a simulated crash."""
        caught: list[BaseException] = []

        def careless() -> None:
            try:
                raise SimulatedCrash("inside an effect")
            except Exception as exc:  # the point of the test
                caught.append(exc)

        with pytest.raises(SimulatedCrash, match="simulated crash inside an effect"):
            careless()
        assert caught == []
