"""The termination watch: how a run learns, at a step boundary, that it must stop and save.

Three sources, in the priority order each rank applies to its own observations
(:meth:`TerminationWatch.observed`):

==============  ===============================================================================
source          observed when
==============  ===============================================================================
a signal        one of ``termination.signals`` was delivered since ``install()``: the first
                one delivered is the reason (``"signal SIGTERM"``); the handler only records it
the sentinel    ``<sentinel_dir>/<sentinel_name>`` exists (``os.stat`` at every boundary, every
                rank; ``sentinel_dir=""`` means ``$SLURM_LOG_DIR``, unset: no sentinel) and is
                not stale: ``"sentinel"``. Stale: its mtime is before the previous window's
                ``DONE.json.finished_at`` (:meth:`~TerminationWatch.ignore_sentinels_before`)
                or before ``$SLURM_JOB_START_TIME`` (a window killed before it consumed its
                sentinel left it; without this rule the requeued run would stop at once)
the deadline    ``clock() >= deadline - deadline_margin_s`` (``deadline="slurm"``:
                ``$SLURM_JOB_END_TIME``): ``"deadline"``
==============  ===============================================================================

:meth:`TerminationWatch.should_stop` is the one collective per step: ``collective.any`` of
"this rank observed something", and only when true an ``all_gather`` of the reasons; every
rank then records the same :class:`StopDecision` (reason by
:func:`~statecraft.checkpoint.stop.records.first_reason`, the ranks that observed one, rank
0's clock). The decision is latched: once stopped, later calls return it with no collective
(every rank latches at the same call, so none is left waiting in one). A single-process run
decides alone (``SingleProcess`` collectives are local).

Call order (the facade does it): construct at ``Checkpointer(...)`` (a bad ``"slurm"``
deadline is a :class:`~statecraft.errors.ConfigError` there), ``ignore_sentinels_before(t)``
and ``install()`` at ``resume()`` on every rank, ``should_stop(step=N)`` first thing in each
``step_end()``, after a stop's emergency save and ``DONE.json`` ``consume_sentinel()`` on rank
0 and ``log_late_signals()``, ``uninstall(redeliver=True)`` at the end of ``finalize()`` (a
signal no boundary acted on goes on to the restored handler), ``uninstall()`` at ``close()``.

Example:
    >>> watch = TerminationWatch(config.termination, collective)   # doctest: +SKIP
    >>> watch.install()                                            # doctest: +SKIP
    True
    >>> watch.should_stop(step=120)                                # doctest: +SKIP
    StopDecision(stop=True, reason='sentinel', ranks=(0, 1), decided_at=1764612000.5)
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from statecraft.checkpoint.config.knobs import parse_deadline
from statecraft.checkpoint.config.schema import TerminationConfig
from statecraft.checkpoint.stop.records import StopDecision, first_reason, signal_reason
from statecraft.checkpoint.stop.termination_signals import SignalFlags
from statecraft.errors import ConfigError, ConfigIssue
from statecraft.parallel.collectives import Collective

__all__ = [
    "SLURM_END_TIME_VARIABLE",
    "SLURM_LOG_DIR_VARIABLE",
    "SLURM_START_TIME_VARIABLE",
    "TerminationWatch",
]

log = logging.getLogger("statecraft")

#: the variable Slurm sets to the job's end time (unix seconds); ``termination.deadline=slurm``
SLURM_END_TIME_VARIABLE = "SLURM_JOB_END_TIME"
#: the sentinel's directory when ``termination.sentinel_dir`` is empty (the batch script sets it)
SLURM_LOG_DIR_VARIABLE = "SLURM_LOG_DIR"
#: the variable Slurm sets to this job window's start time (unix seconds): a sentinel older
#: than it was written in an earlier window (one killed before it could consume it)
SLURM_START_TIME_VARIABLE = "SLURM_JOB_START_TIME"

_NO_STOP = StopDecision(False)


def _sentinel_path(config: TerminationConfig, environ: Mapping[str, str]) -> Path | None:
    """``<sentinel_dir>/<sentinel_name>``; ``sentinel_dir=""``: ``$SLURM_LOG_DIR`` (set and
    not empty), else ``None`` (no sentinel polled)."""
    directory = config.sentinel_dir or environ.get(SLURM_LOG_DIR_VARIABLE, "")
    return Path(directory) / config.sentinel_name if directory else None


def _unix_seconds(text: str | None) -> float | None:
    """A positive whole number of unix seconds (``None``: unset or anything else)."""
    value = (text or "").strip()
    if value.isascii() and value.isdigit() and int(value) > 0:
        return float(int(value))
    return None


def _deadline(config: TerminationConfig, environ: Mapping[str, str]) -> float | None:
    """The deadline as a unix time (``None``: none).

    Raises:
        ConfigError: ``deadline="slurm"`` and ``$SLURM_JOB_END_TIME`` is unset or not a
            positive whole number of unix seconds; or a deadline ``parse_deadline`` refuses.
    """
    text = config.deadline
    if text != "slurm":
        try:
            return parse_deadline(text)
        except ValueError as error:
            issue = ConfigIssue("termination.deadline", text, f"a parsable deadline ({error})")
            raise ConfigError([issue]) from None
    raw = environ.get(SLURM_END_TIME_VARIABLE)
    end = _unix_seconds(raw)
    if end is not None:
        return end
    found = "unset" if raw is None else f"{raw!r}"
    issue = ConfigIssue(
        "termination.deadline",
        "slurm",
        f"${SLURM_END_TIME_VARIABLE} set to the job's end time in unix seconds (it is "
        f"{found}); run inside a Slurm job (sbatch and srun set it), or set "
        "termination.deadline to a unix time or an ISO 8601 date-time with a UTC offset, or "
        "to '' for no deadline",
    )
    raise ConfigError([issue])


class TerminationWatch:
    """This rank's view of "must the run stop now", and the collective decision.

    Args:
        config: the ``termination.*`` section. ``enabled=false``: the watch observes nothing,
            installs nothing, and ``should_stop()`` is always no-stop (no collective: every
            rank has the same config).
        collective: the run's collectives (``SingleProcess`` for a world of one).
        environ: where ``$SLURM_LOG_DIR``, ``$SLURM_JOB_END_TIME`` and
            ``$SLURM_JOB_START_TIME`` are read (default ``os.environ``), once, here.
        clock: the wall clock for the deadline and ``StopDecision.decided_at``.

    Attributes:
        sentinel_path: the polled sentinel file (``None``: no sentinel, or disabled).
        deadline: the resolved deadline, unix seconds (``None``: none, or disabled).

    Raises:
        ConfigError: ``deadline="slurm"`` without a parsable ``$SLURM_JOB_END_TIME`` (names
            ``termination.deadline`` and the variable, and the fix).
    """

    def __init__(
        self,
        config: TerminationConfig,
        collective: Collective,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        env = os.environ if environ is None else environ
        self.config = config
        self._collective = collective
        self._clock = clock
        self.sentinel_path: Path | None = None
        self.deadline: float | None = None
        if config.enabled:
            self.sentinel_path = _sentinel_path(config, env)
            self.deadline = _deadline(config, env)
        self._flags = SignalFlags(config.signals if config.enabled else ())
        self._stale_before: float | None = _unix_seconds(env.get(SLURM_START_TIME_VARIABLE))
        self._warned_stale = False
        self._warned_poll = False
        self._decision: StopDecision | None = None
        self._decision_step: int | None = None
        self._signals_at_decision = 0
        self._late_logged = 0

    def __repr__(self) -> str:
        return (
            f"TerminationWatch(enabled={self.config.enabled}, sentinel={self.sentinel_path}, "
            f"deadline={self.deadline}, signals={list(self._flags.names)}, "
            f"stopped={self._decision is not None})"
        )

    # -- signals -----------------------------------------------------------------------------

    def install(self) -> bool:
        """Install the flag-only handlers for ``config.signals`` (main thread only;
        idempotent).

        Returns:
            ``True``: the handlers are in place (also for ``signals=[]`` or a disabled watch:
            nothing to install). ``False``: not the main thread; nothing installed, one
            WARNING (the sentinel and the deadline still stop the run).
        """
        return self._flags.install()

    def uninstall(self, *, redeliver: bool = False) -> tuple[str, ...]:
        """Restore each previous handler where statecraft's is still installed (a handler
        that replaced statecraft's since is left, said at DEBUG). Recorded signals stay
        recorded.

        Args:
            redeliver: ``finalize()``'s call. A signal recorded but never acted on (no stop
                was decided: it came during or after the last boundary, or during
                ``finalize()``) is not swallowed: once the previous handlers are back, each
                one (once, in delivery order) is sent again to this process, so the handler in
                place before ``resume()`` gets it (the default action ends the process), after
                ``DONE.json`` is durable. One INFO line each, before it is sent. Nothing is
                sent when the handlers could not be restored (not the main thread).

        Returns:
            The signals sent again (``()``: none).
        """
        installed = self._flags.installed
        self._flags.uninstall()
        if not redeliver or not installed or self._flags.installed or self._decision is not None:
            return ()
        names = tuple(dict.fromkeys(self.signals_received))
        for name in names:
            log.info(
                "signal %s arrived after the last step boundary: the run completed and "
                "DONE.json is written; passing it on to the handler in place before resume()",
                name,
            )
            os.kill(os.getpid(), signal.Signals[name])
        return names

    @property
    def signals_received(self) -> tuple[str, ...]:
        """The name of every handled signal delivered so far, in order (``("SIGTERM",)``)."""
        return self._flags.received

    def late_signals(self) -> tuple[str, ...]:
        """The signals delivered after the stop decision (``()`` before one): they change
        nothing, the first reason stays."""
        if self._decision is None or not self._decision.stop:
            return ()
        return self.signals_received[self._signals_at_decision :]

    def log_late_signals(self) -> tuple[str, ...]:
        """Log (INFO, once each) every signal delivered after the stop decision and not logged
        yet: ``signal SIGTERM received again after the stop decision at step 120: ignored;
        the emergency save continues``. Returns the ones logged by this call."""
        late = self.late_signals()
        new = late[self._late_logged :]
        at = "" if self._decision_step is None else f" at step {self._decision_step}"
        for name in new:
            log.info(
                "signal %s received again after the stop decision%s: ignored; the emergency "
                "save continues",
                name,
                at,
            )
        self._late_logged = len(late)
        return new

    # -- sentinel ----------------------------------------------------------------------------

    def _sentinel_seen(self) -> bool:
        """The sentinel exists and is not stale. A stale one is renamed ``.stale`` by rank 0
        (WARNING once); a poll that fails other than by absence is a WARNING once, not a stop."""
        path = self.sentinel_path
        if path is None:
            return False
        try:
            mtime = os.stat(path).st_mtime
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError as error:
            if not self._warned_poll:
                self._warned_poll = True
                log.warning("cannot poll the termination sentinel %s (%s); not a stop", path, error)
            return False
        if self._stale_before is None or mtime >= self._stale_before:
            return True
        # Rank 0 alone renames it: another rank renaming late could take a fresh sentinel
        # written just after rank 0's rename for the stale one. Every rank ignores it by mtime.
        stale = path.with_name(path.name + ".stale")
        where = f"rank 0 renames it to {stale.name}"
        if self._collective.rank == 0:
            try:
                os.replace(path, stale)
                where = f"renamed to {stale.name}"
            except FileNotFoundError:
                return False  # gone since the stat: nothing to ignore
            except OSError as error:
                where = f"could not rename it ({error}); it stays ignored"
        if not self._warned_stale:
            self._warned_stale = True
            log.warning(
                "ignoring the stale termination sentinel %s: written in an earlier window "
                "(mtime %.3f is before %.3f, the previous window's end or this job window's "
                "start); %s",
                path,
                mtime,
                self._stale_before,
                where,
            )
        return False

    def ignore_sentinels_before(self, t: float) -> None:
        """A sentinel whose mtime is before ``t`` (the previous window's
        ``DONE.json.finished_at``) is stale: WARNING once, renamed ``<name>.stale`` by rank 0,
        never a reason (the later of ``t`` and ``$SLURM_JOB_START_TIME`` applies). Checks at
        once (so the warning comes at ``resume()``). Call it on every rank: a rank without the
        rule would take the stale file for a stop."""
        before = self._stale_before
        self._stale_before = float(t) if before is None else max(before, float(t))
        self._sentinel_seen()

    def consume_sentinel(self) -> None:
        """Rename the sentinel to ``<name>.consumed`` (replacing an older one) so the requeued
        window does not stop at once; absent is fine. Rank 0, after the emergency save and
        ``DONE.json``. A rename that fails is a WARNING: the next window's stale rule ignores
        the file anyway (its mtime is before this window's ``DONE.json``)."""
        path = self.sentinel_path
        if path is None:
            return
        consumed = path.with_name(path.name + ".consumed")
        try:
            os.replace(path, consumed)
        except FileNotFoundError:
            return
        except OSError as error:
            log.warning(
                "could not consume the termination sentinel %s (%s); the next window ignores "
                "it as stale",
                path,
                error,
            )
            return
        log.info("termination sentinel consumed: %s renamed to %s", path, consumed.name)

    # -- the decision ------------------------------------------------------------------------

    def observed(self) -> str | None:
        """This rank's own reason, no collective: a recorded signal first (the first one
        delivered), then the sentinel, then the deadline; ``None``: nothing (or disabled)."""
        if not self.config.enabled:
            return None
        received = self.signals_received
        if received:
            return signal_reason(received[0])
        if self._sentinel_seen():
            return "sentinel"
        margin = self.config.deadline_margin_s
        if self.deadline is not None and self._clock() >= self.deadline - margin:
            return "deadline"
        return None

    @property
    def stopped(self) -> StopDecision | None:
        """The latched stop decision (``None``: no stop yet)."""
        return self._decision

    def should_stop(self, *, step: int | None = None) -> StopDecision:
        """The same decision on every rank, taken collectively (call it on every rank at the
        same boundary).

        Args:
            step: the boundary's optimizer step, named by the "received again" log line.

        Returns:
            No stop (``StopDecision(False)``), or the stop: ``reason`` by
            :func:`first_reason` over every rank's :meth:`observed`, ``ranks`` the ranks that
            observed one, ``decided_at`` rank 0's clock. Once stopped, every later call
            returns that decision with no collective, and logs any signal delivered since
            (:meth:`log_late_signals`).
        """
        if self._decision is not None:
            self.log_late_signals()
            return self._decision
        if not self.config.enabled:
            return _NO_STOP
        local = self.observed()
        if not self._collective.any(local is not None):
            return _NO_STOP
        gathered = self._collective.all_gather((local, self._clock()))
        reasons = [reason for reason, _ in gathered]
        decision = StopDecision(
            True,
            first_reason(reasons),
            tuple(rank for rank, reason in enumerate(reasons) if reason is not None),
            float(gathered[0][1]),
        )
        self._decision = decision
        self._decision_step = step
        self._signals_at_decision = len(self.signals_received)
        return decision
