"""The termination watch: real signals to this very process, a real sentinel file, a deadline
on a fake clock, and a real two-rank gloo group that takes one stop decision."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statecraft.checkpoint.config.knobs import TERMINATION_SIGNALS
from statecraft.checkpoint.config.schema import TerminationConfig
from statecraft.checkpoint.stop.records import StopDecision
from statecraft.checkpoint.stop.termination import TerminationWatch
from statecraft.errors import ConfigError
from statecraft.parallel.collectives import SingleProcess

HANDLED = [signal.Signals[name] for name in TERMINATION_SIGNALS]


@pytest.fixture(autouse=True)
def handlers() -> Iterator[None]:
    """Every termination signal's handler as it was before the test, put back after it."""
    before = {number: signal.getsignal(number) for number in HANDLED}
    yield
    for number, previous in before.items():
        signal.signal(number, previous if previous is not None else signal.SIG_DFL)


class CountingWorld(SingleProcess):
    """A world of one that counts the collectives it ran (by name)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def any(self, flag: bool) -> bool:
        self.calls.append("any")
        return super().any(flag)

    def all_gather(self, value: Any) -> list[Any]:
        self.calls.append("all_gather")
        return super().all_gather(value)


class RankOne(SingleProcess):
    """Rank 1's view, for the rank-local rules (no collective is run through it)."""

    rank = 1


def deliver(number: int, until: Callable[[], bool]) -> None:
    """Send ``number`` to this process and wait (5 s at most) until ``until()`` holds."""
    os.kill(os.getpid(), number)
    give_up = time.monotonic() + 5
    while not until() and time.monotonic() < give_up:
        time.sleep(0.001)


def watch_of(tmp_path: Path | None = None, **knobs: Any) -> TerminationWatch:
    """A watch over a world of one, its sentinel in ``tmp_path`` when one is given."""
    if tmp_path is not None:
        knobs.setdefault("sentinel_dir", str(tmp_path))
    return TerminationWatch(TerminationConfig(**knobs), SingleProcess(), environ={})


class Recorder:
    """A Python-level handler another framework might have installed."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def __call__(self, signum: int, frame: object) -> None:
        self.seen.append(signum)


class TestSignals:
    def test_a_signal_only_sets_a_flag_and_the_first_one_wins(self) -> None:
        """SIGTERM then SIGUSR1 leave the process running; the reason is the first one."""
        watch = watch_of()
        assert watch.install() is True
        assert watch.observed() is None
        deliver(signal.SIGTERM, lambda: len(watch.signals_received) == 1)
        deliver(signal.SIGUSR1, lambda: len(watch.signals_received) == 2)
        assert watch.signals_received == ("SIGTERM", "SIGUSR1")
        assert watch.observed() == "signal SIGTERM"

    def test_uninstall_restores_the_previous_handler(self) -> None:
        """The handler in place before install() gets the signal again after uninstall()."""
        previous = Recorder()
        signal.signal(signal.SIGUSR1, previous)
        watch = watch_of()
        watch.install()
        deliver(signal.SIGUSR1, lambda: bool(watch.signals_received))
        assert previous.seen == []
        watch.uninstall()
        assert signal.getsignal(signal.SIGUSR1) is previous
        deliver(signal.SIGUSR1, lambda: bool(previous.seen))
        assert previous.seen == [signal.SIGUSR1]
        assert watch.signals_received == ("SIGUSR1",)  # still recorded after uninstall

    def test_uninstall_redeliver_passes_on_signals_no_stop_acted_on(self) -> None:
        """finalize()'s uninstall(redeliver=True): SIGTERM then SIGUSR1 then SIGTERM again,
        recorded with no stop decided, go on to the restored handlers once each, in delivery
        order; a plain uninstall() sends nothing."""
        previous = Recorder()
        for number in (signal.SIGTERM, signal.SIGUSR1):
            signal.signal(number, previous)
        quiet = watch_of()
        quiet.install()
        deliver(signal.SIGTERM, lambda: bool(quiet.signals_received))
        quiet.uninstall()
        assert previous.seen == []
        watch = watch_of()
        watch.install()
        deliver(signal.SIGTERM, lambda: len(watch.signals_received) == 1)
        deliver(signal.SIGUSR1, lambda: len(watch.signals_received) == 2)
        deliver(signal.SIGTERM, lambda: len(watch.signals_received) == 3)
        assert previous.seen == []
        assert watch.uninstall(redeliver=True) == ("SIGTERM", "SIGUSR1")
        assert previous.seen == [signal.SIGTERM, signal.SIGUSR1]

    def test_uninstall_redeliver_sends_nothing_after_a_stop(self) -> None:
        """A signal that stopped the run was acted on: uninstall(redeliver=True) after the
        stop decision restores the handler and sends nothing again."""
        previous = Recorder()
        signal.signal(signal.SIGTERM, previous)
        watch = watch_of()
        watch.install()
        deliver(signal.SIGTERM, lambda: bool(watch.signals_received))
        assert watch.should_stop(step=3).reason == "signal SIGTERM"
        assert watch.uninstall(redeliver=True) == ()
        assert signal.getsignal(signal.SIGTERM) is previous
        assert previous.seen == []

    def test_install_is_idempotent(self) -> None:
        """A second install() changes nothing; one uninstall() restores the original."""
        previous = Recorder()
        signal.signal(signal.SIGTERM, previous)
        watch = watch_of()
        assert watch.install() is True
        assert watch.install() is True
        watch.uninstall()
        assert signal.getsignal(signal.SIGTERM) is previous

    def test_a_handler_that_replaced_ours_is_left_in_place(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """uninstall() does not clobber a handler installed over statecraft's; DEBUG says so."""
        watch = watch_of()
        watch.install()
        later = Recorder()
        signal.signal(signal.SIGTERM, later)
        with caplog.at_level(logging.DEBUG, logger="statecraft"):
            watch.uninstall()
        assert signal.getsignal(signal.SIGTERM) is later
        assert "leaving the SIGTERM handler" in caplog.text
        assert "Recorder" in caplog.text

    def test_replacing_a_python_handler_names_it(self, caplog: pytest.LogCaptureFixture) -> None:
        """The INFO line names the replaced handler's qualified name."""
        signal.signal(signal.SIGTERM, Recorder())
        with caplog.at_level(logging.INFO, logger="statecraft"):
            watch_of().install()
        infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
        assert len(infos) == 1
        assert infos[0].startswith(
            f"replacing the SIGTERM handler {__name__}.Recorder: statecraft handles it flag-only"
        )

    def test_install_off_the_main_thread_warns_and_installs_nothing(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """From another thread: False, one WARNING naming the thread, no handler changed."""
        before = {n: signal.getsignal(n) for n in HANDLED}
        watch = watch_of()
        results: list[bool] = []

        def twice() -> None:
            results.extend([watch.install(), watch.install()])

        with caplog.at_level(logging.WARNING, logger="statecraft"):
            worker = threading.Thread(target=twice, name="loader-7")
            worker.start()
            worker.join()
        assert results == [False, False]
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert warnings == [
            "termination signals not handled: resume() ran on thread loader-7, not the main "
            "thread; the sentinel file and the deadline still stop the run"
        ]
        assert {n: signal.getsignal(n) for n in HANDLED} == before

    def test_an_empty_signal_list_installs_nothing(self) -> None:
        """signals=[]: install() is True and no handler changes."""
        before = {n: signal.getsignal(n) for n in HANDLED}
        assert watch_of(signals=[]).install() is True
        assert {n: signal.getsignal(n) for n in HANDLED} == before

    def test_sigint_is_handled_when_listed(self) -> None:
        """A listed SIGINT raises no KeyboardInterrupt; it is a stop reason."""
        watch = watch_of(signals=["SIGINT"])
        watch.install()
        deliver(signal.SIGINT, lambda: bool(watch.signals_received))
        assert watch.observed() == "signal SIGINT"

    @pytest.mark.parametrize("previous", ["default", "python"])
    def test_a_forked_child_keeps_its_previous_behaviour(self, previous: str) -> None:
        """A child forked after install() (a DataLoader worker) dies of SIGTERM, or runs the
        previous Python handler; the parent records nothing."""
        if previous == "python":
            signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(7))
        watch = watch_of()
        watch.install()
        child = os.fork()
        if child == 0:  # the child: only async-safe calls, and never back into pytest
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            finally:
                os._exit(3)  # survived the signal: the handler swallowed it
        _, status = os.waitpid(child, 0)
        if previous == "python":
            assert os.waitstatus_to_exitcode(status) == 7
        else:
            assert os.waitstatus_to_exitcode(status) == -signal.SIGTERM
        assert watch.signals_received == ()

    def test_an_unlisted_signal_is_not_handled(self) -> None:
        """Only the listed signals get the flag-only handler."""
        before = signal.getsignal(signal.SIGUSR2)
        watch_of(signals=["SIGTERM"]).install()
        assert signal.getsignal(signal.SIGUSR2) is before


class TestDisabled:
    def test_a_disabled_watch_observes_nothing_and_installs_nothing(self, tmp_path: Path) -> None:
        """enabled=false: a sentinel, a passed deadline and an unset SLURM_JOB_END_TIME change
        nothing; no handler, no collective."""
        (tmp_path / "SIGUSR1_RECEIVED").write_text("")
        world = CountingWorld()
        before = {n: signal.getsignal(n) for n in HANDLED}
        config = TerminationConfig(enabled=False, sentinel_dir=str(tmp_path), deadline="slurm")
        watch = TerminationWatch(config, world, environ={}, clock=lambda: 1e12)
        assert watch.sentinel_path is None
        assert watch.deadline is None
        watch.install()
        assert {n: signal.getsignal(n) for n in HANDLED} == before
        assert watch.observed() is None
        assert watch.should_stop() == StopDecision(False)
        assert world.calls == []


class TestSentinel:
    def test_the_sentinel_is_a_reason(self, tmp_path: Path) -> None:
        """A file at <sentinel_dir>/<sentinel_name> stops the run with reason 'sentinel'."""
        watch = watch_of(tmp_path)
        assert watch.sentinel_path == tmp_path / "SIGUSR1_RECEIVED"
        assert watch.observed() is None
        (tmp_path / "SIGUSR1_RECEIVED").write_text("")
        assert watch.observed() == "sentinel"

    def test_the_sentinel_dir_defaults_to_slurm_log_dir(self, tmp_path: Path) -> None:
        """sentinel_dir='' polls $SLURM_LOG_DIR; neither set: no sentinel at all."""
        config = TerminationConfig(sentinel_name="STOP")
        env = {"SLURM_LOG_DIR": str(tmp_path)}
        assert TerminationWatch(config, SingleProcess(), environ=env).sentinel_path == (
            tmp_path / "STOP"
        )
        assert TerminationWatch(config, SingleProcess(), environ={}).sentinel_path is None
        explicit = TerminationConfig(sentinel_dir=str(tmp_path / "x"))
        watch = TerminationWatch(explicit, SingleProcess(), environ=env)
        assert watch.sentinel_path == tmp_path / "x" / "SIGUSR1_RECEIVED"

    def test_consuming_renames_it_and_replaces_an_older_one(self, tmp_path: Path) -> None:
        """consume_sentinel(): <name>.consumed holds the new file; it is no longer a reason."""
        sentinel = tmp_path / "SIGUSR1_RECEIVED"
        (tmp_path / "SIGUSR1_RECEIVED.consumed").write_text("older")
        sentinel.write_text("newer")
        watch = watch_of(tmp_path)
        watch.consume_sentinel()
        assert not sentinel.exists()
        assert (tmp_path / "SIGUSR1_RECEIVED.consumed").read_text() == "newer"
        assert watch.observed() is None
        watch.consume_sentinel()  # absent is fine
        watch_of().consume_sentinel()  # no sentinel configured is fine

    def test_a_stale_sentinel_is_renamed_and_ignored(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """mtime before the previous window's end: WARNING once, renamed .stale, no reason; a
        fresh one after it is a reason again."""
        sentinel = tmp_path / "SIGUSR1_RECEIVED"
        sentinel.write_text("")
        os.utime(sentinel, (1000.0, 1000.0))
        watch = watch_of(tmp_path)
        with caplog.at_level(logging.WARNING, logger="statecraft"):
            watch.ignore_sentinels_before(2000.0)
            assert watch.observed() is None
        assert not sentinel.exists()
        assert (tmp_path / "SIGUSR1_RECEIVED.stale").exists()
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1
        assert warnings[0].startswith(f"ignoring the stale termination sentinel {sentinel}")
        assert "renamed to SIGUSR1_RECEIVED.stale" in warnings[0]
        sentinel.write_text("")
        os.utime(sentinel, (2000.0, 2000.0))
        assert watch.observed() == "sentinel"

    def test_only_rank_zero_renames_a_stale_sentinel(self, tmp_path: Path) -> None:
        """Rank 1 ignores the stale file by its mtime and leaves the rename to rank 0."""
        sentinel = tmp_path / "SIGUSR1_RECEIVED"
        sentinel.write_text("")
        os.utime(sentinel, (1000.0, 1000.0))
        config = TerminationConfig(sentinel_dir=str(tmp_path))
        watch = TerminationWatch(config, RankOne(), environ={})
        watch.ignore_sentinels_before(2000.0)
        assert watch.observed() is None
        assert sentinel.exists()

    def test_a_sentinel_older_than_the_slurm_job_start_is_stale(self, tmp_path: Path) -> None:
        """Left by a window killed before it consumed it: older than $SLURM_JOB_START_TIME,
        stale even with no DONE.json (an older finished_at does not lower the bar)."""
        sentinel = tmp_path / "SIGUSR1_RECEIVED"
        sentinel.write_text("")
        os.utime(sentinel, (1500.0, 1500.0))
        config = TerminationConfig(sentinel_dir=str(tmp_path))
        env = {"SLURM_JOB_START_TIME": "2000"}
        watch = TerminationWatch(config, SingleProcess(), environ=env)
        watch.ignore_sentinels_before(1000.0)
        assert watch.observed() is None
        assert (tmp_path / "SIGUSR1_RECEIVED.stale").exists()
        sentinel.write_text("")
        os.utime(sentinel, (2001.0, 2001.0))  # this window's own: the USR1 trap wrote it
        assert watch.observed() == "sentinel"


class TestDeadline:
    def test_the_deadline_with_a_margin_on_a_fake_clock(self) -> None:
        """Stops at the first poll where clock() >= deadline - margin, not before."""
        now = [0.0]
        config = TerminationConfig(deadline="2026-12-01T18:00:00Z", deadline_margin_s=60)
        watch = TerminationWatch(config, SingleProcess(), environ={}, clock=lambda: now[0])
        end = 1796148000.0  # 2026-12-01T18:00:00Z
        assert watch.deadline == end
        now[0] = end - 60.5
        assert watch.observed() is None
        now[0] = end - 60
        assert watch.observed() == "deadline"

    def test_slurm_reads_the_job_end_time(self) -> None:
        """deadline='slurm' is $SLURM_JOB_END_TIME (unix seconds) from the given environment."""
        config = TerminationConfig(deadline="slurm")
        env = {"SLURM_JOB_END_TIME": "1767225600"}
        watch = TerminationWatch(config, SingleProcess(), environ=env, clock=lambda: 1767225600)
        assert watch.deadline == 1767225600.0
        assert watch.observed() == "deadline"

    @pytest.mark.parametrize(
        ("env", "found"), [({}, "unset"), ({"SLURM_JOB_END_TIME": "soon"}, "'soon'")]
    )
    def test_slurm_without_a_parsable_end_time_is_a_config_error(
        self, env: dict[str, str], found: str
    ) -> None:
        """The error names termination.deadline, the variable, what it holds, and the fix."""
        with pytest.raises(ConfigError) as caught:
            TerminationWatch(TerminationConfig(deadline="slurm"), SingleProcess(), environ=env)
        message = str(caught.value)
        assert (
            "termination.deadline: got 'slurm'; expected $SLURM_JOB_END_TIME set to the job's "
            f"end time in unix seconds (it is {found}); run inside a Slurm job"
        ) in message
        assert "or to '' for no deadline" in message
        assert [i.path for i in caught.value.issues] == ["termination.deadline"]


class TestDecision:
    def test_priority_is_signal_then_sentinel_then_deadline(self, tmp_path: Path) -> None:
        """With all three present, a signal is the reason; without it, the sentinel."""
        config = TerminationConfig(sentinel_dir=str(tmp_path), deadline="1")
        watch = TerminationWatch(config, SingleProcess(), environ={})
        assert watch.observed() == "deadline"
        (tmp_path / "SIGUSR1_RECEIVED").write_text("")
        assert watch.observed() == "sentinel"
        watch.install()
        deliver(signal.SIGUSR1, lambda: bool(watch.signals_received))
        assert watch.observed() == "signal SIGUSR1"

    def test_no_stop_costs_one_any_and_a_stop_is_latched(self, tmp_path: Path) -> None:
        """No stop: one `any`, no gather; the stop gathers once; later calls run none."""
        world = CountingWorld()
        config = TerminationConfig(sentinel_dir=str(tmp_path))
        watch = TerminationWatch(config, world, environ={}, clock=lambda: 42.5)
        assert watch.should_stop(step=3) == StopDecision(False)
        assert world.calls == ["any"]
        (tmp_path / "SIGUSR1_RECEIVED").write_text("")
        decision = watch.should_stop(step=4)
        assert decision == StopDecision(True, "sentinel", (0,), 42.5)
        assert world.calls == ["any", "any", "all_gather"]
        watch.consume_sentinel()
        assert watch.should_stop(step=5) is decision
        assert watch.stopped is decision
        assert world.calls == ["any", "any", "all_gather"]

    def test_a_signal_after_the_stop_is_logged_once_and_changes_nothing(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A SIGTERM after a sentinel stop: same decision, one INFO line naming the step."""
        (tmp_path / "SIGUSR1_RECEIVED").write_text("")
        watch = watch_of(tmp_path)
        watch.install()
        decision = watch.should_stop(step=120)
        assert watch.late_signals() == ()
        deliver(signal.SIGTERM, lambda: bool(watch.signals_received))
        with caplog.at_level(logging.INFO, logger="statecraft"):
            assert watch.should_stop(step=121) is decision
            assert watch.should_stop(step=122) is decision
            assert watch.log_late_signals() == ()
        assert decision.reason == "sentinel"
        assert watch.late_signals() == ("SIGTERM",)
        assert [r.getMessage() for r in caplog.records] == [
            "signal SIGTERM received again after the stop decision at step 120: ignored; the "
            "emergency save continues"
        ]


# -- two real gloo ranks ----------------------------------------------------------------------

CALLS = 5  # should_stop() calls per scenario, on every rank
SIGNAL_AT = 2  # the call index before which the signalled rank receives SIGTERM


def _decisions(watch: TerminationWatch, rank: int, scenario: str, tmp: Path) -> list[Any]:
    """Run one scenario's calls on this rank; the decisions as JSON-ready lists."""
    out: list[Any] = []
    for call in range(CALLS):
        if call == SIGNAL_AT:
            if rank == 1:
                deliver(signal.SIGTERM, lambda: bool(watch.signals_received))
            elif scenario == "mixed":
                (tmp / f"{scenario}-rank0" / "SIGUSR1_RECEIVED").write_text("")
        d = watch.should_stop(step=call)
        out.append([d.stop, d.reason, list(d.ranks), d.decided_at])
    return out


def _rank(rank: int, world_size: int, tmp_text: str) -> None:
    """One rank: both scenarios, then the asymmetric latched calls, then a barrier."""
    import datetime

    import torch.distributed as dist

    from statecraft.parallel.collectives import TorchDistributed

    tmp = Path(tmp_text)
    dist.init_process_group(
        "gloo",
        init_method=f"file://{tmp}/store",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=30),  # a mismatched collective fails in 30 s
    )
    try:
        results: dict[str, Any] = {}
        for scenario in ("signal", "mixed"):
            sentinel_dir = tmp / f"{scenario}-rank{rank}"  # a rank's own: only it sees a file
            sentinel_dir.mkdir()
            config = TerminationConfig(sentinel_dir=str(sentinel_dir))
            watch = TerminationWatch(config, TorchDistributed(), environ={})
            results[f"{scenario}-installed"] = watch.install()
            results[scenario] = _decisions(watch, rank, scenario, tmp)
            # latched calls run no collective: rank 0 makes three more than rank 1, and the
            # barrier below would pair with one of them otherwise
            for _ in range(3 if rank == 0 else 0):
                watch.should_stop()
            dist.barrier()
            watch.uninstall()
        (tmp / f"rank{rank}.json").write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """What each of two real gloo ranks decided in both scenarios."""
    import torch.multiprocessing

    tmp = tmp_path_factory.mktemp("gloo")
    torch.multiprocessing.spawn(_rank, args=(2, str(tmp)), nprocs=2, join=True)
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in (0, 1)]


@pytest.mark.slow
class TestTwoGlooRanks:
    def test_only_rank_one_signalled_both_stop_at_the_same_call(
        self, two_ranks: list[dict[str, Any]]
    ) -> None:
        """SIGTERM on rank 1 only: both ranks get the identical decision at the same call."""
        zero, one = two_ranks[0]["signal"], two_ranks[1]["signal"]
        assert two_ranks[0]["signal-installed"] is True
        assert zero == one
        assert [d[0] for d in zero] == [False] * SIGNAL_AT + [True] * (CALLS - SIGNAL_AT)
        stop = zero[SIGNAL_AT]
        assert stop[1:3] == ["signal SIGTERM", [1]]
        assert all(d == stop for d in zero[SIGNAL_AT:])

    def test_a_sentinel_on_rank_zero_and_a_signal_on_rank_one_record_the_signal(
        self, two_ranks: list[dict[str, Any]]
    ) -> None:
        """Different reasons on the two ranks: both record the signal, from both ranks."""
        zero, one = two_ranks[0]["mixed"], two_ranks[1]["mixed"]
        assert zero == one
        assert zero[SIGNAL_AT][:3] == [True, "signal SIGTERM", [0, 1]]
        assert [d[0] for d in zero[:SIGNAL_AT]] == [False] * SIGNAL_AT
