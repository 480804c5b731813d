"""One rank-0 decide-and-broadcast helper, and the role-aware effect call built on it,
exercised over a two-rank collective made of threads."""

from __future__ import annotations

import pickle
import threading
from collections.abc import Callable
from typing import Any, ClassVar

import attrs
import pytest

from statecraft.engine.tagging import Role
from statecraft.errors import MachineDefinitionError, ResumeError
from statecraft.parallel.collectives import SingleProcess
from statecraft.parallel.coordinated import rank_zero_effects
from statecraft.parallel.rank0 import on_rank_zero


class _Hub:
    """What two thread-ranks share: one slot and a barrier per broadcast."""

    def __init__(self, world_size: int) -> None:
        self.barrier = threading.Barrier(world_size, timeout=10)
        self.slot: bytes = b""


class ThreadRank:
    """A Collective for one thread of a world of threads; values travel pickled, as they do
    through torch.distributed."""

    def __init__(self, hub: _Hub, rank: int, world_size: int) -> None:
        self.hub, self.rank, self.world_size = hub, rank, world_size

    def broadcast(self, value: Any) -> Any:
        if self.rank == 0:
            self.hub.slot = pickle.dumps(value)
        self.hub.barrier.wait()
        out = pickle.loads(self.hub.slot)
        self.hub.barrier.wait()
        return out

    def all_gather(self, value: Any) -> list[Any]:  # pragma: no cover - unused here
        raise NotImplementedError

    def any(self, flag: bool) -> bool:  # pragma: no cover - unused here
        raise NotImplementedError

    def barrier(self) -> None:
        self.hub.barrier.wait()


def on_two_ranks(body: Callable[[ThreadRank], Any]) -> list[Any]:
    """Run ``body(collective)`` on ranks 0 and 1 at once; each rank's value or exception."""
    hub = _Hub(2)
    results: list[Any] = [None, None]

    def run(rank: int) -> None:
        try:
            results[rank] = body(ThreadRank(hub, rank, 2))
        except Exception as exc:  # collected for the assertions
            results[rank] = exc

    threads = [threading.Thread(target=run, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    return results


class TestOnRankZero:
    def test_world_of_one_just_calls(self) -> None:
        """In a world of one the function runs once and its value is returned."""
        calls: list[int] = []
        assert on_rank_zero(SingleProcess(), lambda: calls.append(1) or "v") == "v"
        assert calls == [1]

    def test_value_reaches_every_rank_and_only_rank_zero_decides(self) -> None:
        """Rank 0 runs fn; both ranks return its value."""
        ran: list[int] = []

        def body(c: ThreadRank) -> Any:
            return on_rank_zero(c, lambda: ran.append(c.rank) or {"decided_by": c.rank})

        assert on_two_ranks(body) == [{"decided_by": 0}, {"decided_by": 0}]
        assert ran == [0]

    def test_error_is_raised_on_every_rank_with_rank_zeros_message(self) -> None:
        """Rank 0's exception is re-raised on both ranks (the same object on rank 0)."""
        boom = ResumeError("rank 0 could not list the attempt: disk gone")

        def fail() -> None:
            raise boom

        results = on_two_ranks(lambda c: on_rank_zero(c, fail))
        assert results[0] is boom
        assert isinstance(results[1], ResumeError)
        assert str(results[1]) == "rank 0 could not list the attempt: disk gone"

    def test_statecraft_errors_arrive_with_their_fields(self) -> None:
        """CheckpointCorruptError(path, problem, fix) reaches rank 1 as that class, with rank
        0's message and structured fields."""
        from statecraft.errors import CheckpointCorruptError

        boom = CheckpointCorruptError("local:/c/iter_000000008", "is missing", "Resume.")

        def fail() -> None:
            raise boom

        results = on_two_ranks(lambda c: on_rank_zero(c, fail))
        assert results[0] is boom
        assert type(results[1]) is CheckpointCorruptError
        assert str(results[1]) == str(boom)
        assert results[1].fields == boom.fields

    def test_an_error_that_does_not_pickle_as_itself_arrives_intact(self) -> None:
        """A foreign exception whose __init__ takes other arguments than its args cannot be
        rebuilt by pickle; rank 1 still raises that class, with rank 0's message and fields."""
        boom = _Unpicklable("local:/c/iter_000000008", "is missing")
        with pytest.raises(TypeError):
            pickle.loads(pickle.dumps(boom))

        def fail() -> None:
            raise boom

        results = on_two_ranks(lambda c: on_rank_zero(c, fail))
        assert results[0] is boom
        assert type(results[1]) is _Unpicklable
        assert str(results[1]) == str(boom)
        assert results[1].__dict__ == boom.__dict__


class _Unpicklable(RuntimeError):
    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


@attrs.define
class _Ctx:
    coordinated: ClassVar[tuple[str, ...]] = ("found", "notes")
    rank: int
    found: list[int] = attrs.field(factory=list)
    notes: list[str] = attrs.field(factory=list)
    local: str = ""


class TestRankZeroEffects:
    def test_coordinator_effect_runs_on_rank_zero_and_its_fields_are_shared(self) -> None:
        """A coordinator effect runs once, on rank 0; its declared fields reach rank 1, other
        fields do not."""
        ran: list[int] = []

        def scan(ctx: _Ctx) -> None:
            ran.append(ctx.rank)
            ctx.found = [3, 2, 1]
            ctx.local = "rank 0 only"

        def body(c: ThreadRank) -> _Ctx:
            ctx = _Ctx(c.rank)
            rank_zero_effects(c, {"scan": Role.COORDINATOR})("scan", scan, ctx)
            return ctx

        results = on_two_ranks(body)
        assert ran == [0]
        assert [r.found for r in results] == [[3, 2, 1], [3, 2, 1]]
        assert [r.local for r in results] == ["rank 0 only", ""]

    def test_coordinator_error_is_raised_everywhere_with_the_fields_set_before_it(self) -> None:
        """Fields rank 0 set before raising reach rank 1, and both ranks raise rank 0's error
        (so both take the same on_error transition)."""

        def verify(ctx: _Ctx) -> None:
            ctx.notes.append("passed over iter_000000003")
            raise ResumeError("iter_000000003 does not verify")

        def body(c: ThreadRank) -> Any:
            ctx = _Ctx(c.rank)
            try:
                rank_zero_effects(c, {"verify": Role.COORDINATOR})("verify", verify, ctx)
            except ResumeError as exc:
                return ctx.notes, str(exc)
            return None

        assert (
            on_two_ranks(body)
            == [(["passed over iter_000000003"], "iter_000000003 does not verify")] * 2
        )

    def test_a_corrupt_candidate_error_reaches_rank_one(self) -> None:
        """A coordinator effect raising CheckpointCorruptError (which pickle cannot rebuild)
        raises it on rank 1 too, as the same class with the same message."""
        from statecraft.errors import CheckpointCorruptError

        def verify(ctx: _Ctx) -> None:
            raise CheckpointCorruptError("local:/c/iter_000000008", "is missing", "Resume.")

        def body(c: ThreadRank) -> Any:
            rank_zero_effects(c, {"verify": Role.COORDINATOR})("verify", verify, _Ctx(c.rank))

        results = on_two_ranks(body)
        assert [type(r) for r in results] == [CheckpointCorruptError] * 2
        assert str(results[0]) == str(results[1])

    def test_every_rank_effect_runs_on_every_rank(self) -> None:
        """An EVERY_RANK effect runs on both ranks, nothing broadcast."""
        ran: list[int] = []

        def load(ctx: _Ctx) -> None:
            ran.append(ctx.rank)

        on_two_ranks(
            lambda c: rank_zero_effects(c, {"load": Role.EVERY_RANK})("load", load, _Ctx(c.rank))
        )
        assert sorted(ran) == [0, 1]

    def test_a_context_without_coordinated_fields_is_refused(self) -> None:
        """A coordinator effect over a context that declares no coordinated fields fails on
        both ranks, naming the context and the fix, before anything runs."""

        @attrs.define
        class Bare:
            rank: int

        results = on_two_ranks(
            lambda c: rank_zero_effects(c, {"scan": Role.COORDINATOR})(
                "scan", lambda ctx: None, Bare(c.rank)
            )
        )
        for result in results:
            assert isinstance(result, MachineDefinitionError)
            assert "Bare declares no 'coordinated' fields" in str(result)
            assert "add coordinated: ClassVar" in str(result)

    def test_an_effect_without_a_role_is_refused(self) -> None:
        """An effect missing from the roles mapping is a definition error naming it."""
        call = rank_zero_effects(ThreadRank(_Hub(1), 0, 2), {})
        with pytest.raises(MachineDefinitionError, match="effect 'ghost' has no role"):
            call("ghost", lambda ctx: None, _Ctx(0))
