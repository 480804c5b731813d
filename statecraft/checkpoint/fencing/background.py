"""One call on a background thread whose error the joining thread raises. The writer lease's
publication at startup runs so (``WriterLease.publish_in_background``, in
:mod:`statecraft.checkpoint.fencing.lease`), its fsyncs overlapping what resume reads."""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["BackgroundCall"]


class BackgroundCall:
    """``run()`` started on a daemon thread at construction; :meth:`join` waits for it and
    raises what it raised (``BaseException`` included: a simulated crash, an interrupt)."""

    def __init__(self, run: Callable[[], None], *, name: str) -> None:
        self._run = run
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._body, name=name, daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        state = "running" if self._thread.is_alive() else "done"
        return f"BackgroundCall({self._thread.name!r}, {state})"

    def _body(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # handed over to the joining thread, which raises it
            self._error = exc

    def join(self) -> None:
        """Wait for the call to end.

        Raises:
            BaseException: what the call raised (the error is raised by every join).
        """
        self._thread.join()
        if self._error is not None:
            raise self._error
