"""Flag-only signal handlers for the termination watch
(:mod:`statecraft.checkpoint.stop.termination`).

A handled signal only appends its number to a list; the run reads that list at its next step
boundary and stops there (the emergency save runs in ordinary code, never inside a handler).
In CPython a Python-level handler already runs in the main thread between bytecodes, so the
handler does nothing that needs async-signal safety beyond that: no logging, no I/O, no lock
(``list.append`` is one atomic operation under the GIL).

Call order (the watch does it): ``install()`` from the main thread at ``resume()`` -- after
torch.distributed, Lightning or Ray installed theirs, so statecraft's handler is the one in
place -- then any number of deliveries, then ``uninstall()`` at ``close()``, which puts each
previous handler back. ``signal.signal`` works only on the main thread: from another thread
``install()`` installs nothing, warns once and returns ``False`` (the sentinel file and the
deadline still stop the run). A process forked after ``install()`` (a ``fork``-started
DataLoader worker) inherits the handler; there it behaves as the child's previous handler
would have (the default action: the worker dies of SIGTERM as before).

Example:
    >>> flags = SignalFlags(("SIGTERM",))   # doctest: +SKIP
    >>> flags.install()                     # doctest: +SKIP
    True
    >>> os.kill(os.getpid(), signal.SIGTERM)  # doctest: +SKIP
    >>> flags.received                      # doctest: +SKIP
    ('SIGTERM',)
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterable
from types import FrameType
from typing import Any

__all__ = ["SignalFlags", "describe_handler"]

log = logging.getLogger("statecraft")


def describe_handler(handler: Any) -> str:
    """How a log line names a signal handler: ``module.qualname`` for a Python callable,
    ``SIG_DFL`` / ``SIG_IGN``, or a note for one installed outside Python (``None``)."""
    if handler is None:
        return "installed outside Python"
    if isinstance(handler, signal.Handlers):
        return handler.name
    qualname = getattr(handler, "__qualname__", None) or type(handler).__qualname__
    module = getattr(handler, "__module__", None)
    return f"{module}.{qualname}" if module else str(qualname)


class _FlagHandler:
    """The installed handler: in the installing process, records the signal number and
    nothing else. In a forked child (a ``fork``-started DataLoader worker inherits Python's
    handlers) it does what the child would have done without statecraft: calls the previous
    Python handler, ignores the signal where it was ignored, else dies of it (default action),
    so ``scancel`` still ends the job's worker processes."""

    __slots__ = ("numbers", "pid", "previous")

    def __init__(self) -> None:
        self.numbers: list[int] = []
        self.pid = os.getpid()
        self.previous: dict[int, Any] = {}

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() == self.pid:
            self.numbers.append(signum)
            return
        previous = self.previous.get(signum)
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def __repr__(self) -> str:
        return "statecraft flag-only termination handler"


class SignalFlags:
    """Flag-only handlers for the named signals (names from ``knobs.TERMINATION_SIGNALS``).

    Attributes:
        names: the signals this object handles once installed, in the configured order.
    """

    def __init__(self, names: Iterable[str]) -> None:
        self.names: tuple[str, ...] = tuple(names)
        self._handler = _FlagHandler()
        self._previous: dict[int, Any] = self._handler.previous  # shared: the handler reads it
        self._warned_thread = False

    def __repr__(self) -> str:
        return f"SignalFlags({list(self.names)!r}, installed={self.installed})"

    @property
    def installed(self) -> bool:
        """The handlers are installed (``install()`` succeeded and ``uninstall()`` has not run)."""
        return bool(self._previous)

    @property
    def received(self) -> tuple[str, ...]:
        """The name of every handled signal delivered so far, in delivery order."""
        return tuple(signal.Signals(n).name for n in list(self._handler.numbers))

    def install(self) -> bool:
        """Install the flag-only handler for every name; idempotent.

        Returns:
            ``True`` when the handlers are in place (also for an empty list: nothing to
            install); ``False`` when this is not the main thread: nothing is installed and one
            WARNING says so (the first time).
        """
        if self.installed or not self.names:
            return True
        thread = threading.current_thread()
        if thread is not threading.main_thread():
            if not self._warned_thread:
                self._warned_thread = True
                log.warning(
                    "termination signals not handled: resume() ran on thread %s, not the main "
                    "thread; the sentinel file and the deadline still stop the run",
                    thread.name,
                )
            return False
        self._handler.pid = os.getpid()
        for name in self.names:
            number = signal.Signals[name]
            previous = signal.signal(number, self._handler)
            self._previous[number] = previous
            if callable(previous) and previous is not signal.default_int_handler:
                log.info(
                    "replacing the %s handler %s: statecraft handles it flag-only (the run "
                    "stops and saves at the next step boundary); close() restores it",
                    name,
                    describe_handler(previous),
                )
            else:
                log.debug("handling %s flag-only (was %s)", name, describe_handler(previous))
        return True

    def uninstall(self) -> None:
        """Put back each previous handler where statecraft's is still the installed one.

        A handler something else installed over statecraft's since is left in place (said at
        DEBUG). A previous handler installed outside Python cannot be reinstalled from Python:
        the default action is restored instead (said at DEBUG). Called from a thread other
        than the main one, nothing can be restored: one WARNING, and the handlers stay
        installed until an ``uninstall()`` on the main thread.
        """
        if not self.installed:
            return
        thread = threading.current_thread()
        if thread is not threading.main_thread():
            log.warning(
                "termination signal handlers not restored: close() ran on thread %s, not the "
                "main thread; they stay flag-only until close() runs on the main thread",
                thread.name,
            )
            return
        for number, previous in self._previous.items():
            name = signal.Signals(number).name
            current = signal.getsignal(number)
            if current is not self._handler:
                log.debug(
                    "leaving the %s handler %s in place: it replaced statecraft's after resume()",
                    name,
                    describe_handler(current),
                )
                continue
            if previous is None:
                log.debug("restoring SIG_DFL for %s (its previous handler was not Python's)", name)
                previous = signal.SIG_DFL
            signal.signal(number, previous)
        self._previous.clear()
