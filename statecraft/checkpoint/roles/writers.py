"""One in-flight write per role, and the boundary that joins them.

Each role has its own writer thread; a boundary's ``write_roles`` dispatches every role's unit
to its writer and joins them all before ``_SUCCESS`` is written, on the boundary's own thread.
The next save first joins the previous boundary (so a role never has two writes in flight);
``join()`` (``finalize()``, ``wait()``, ``close()``) raises a failed boundary's error once,
naming the role.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import attrs

__all__ = ["RoleWriters"]

T = TypeVar("T")


@attrs.define(eq=False)
class RoleWriters:
    """The writer threads of one multi-role run.

    Attributes:
        pending: the boundary in flight (its future), if any.
    """

    executors: dict[str, ThreadPoolExecutor] = attrs.field(factory=dict)
    boundary: ThreadPoolExecutor | None = None
    pending: Future[Any] | None = None

    def dispatch(self, role: str, job: Callable[[], T]) -> Future[T]:
        """Run ``job`` on ``role``'s writer thread."""
        if role not in self.executors:
            self.executors[role] = ThreadPoolExecutor(1, thread_name_prefix=f"statecraft-{role}")
        return self.executors[role].submit(job)

    def start(self, job: Callable[[], T]) -> Future[T]:
        """Run a boundary (its roles dispatched, then its marker) in the background; the
        previous one must have been joined."""
        if self.boundary is None:
            self.boundary = ThreadPoolExecutor(1, thread_name_prefix="statecraft-boundary")
        self.pending = self.boundary.submit(job)
        return self.pending

    def join(self) -> Any:
        """Wait for the boundary in flight; its result, or its error raised (once).

        Raises:
            RoleWriteError / StatecraftError / OSError: the boundary failed (no ``_SUCCESS``).
        """
        pending, self.pending = self.pending, None
        return None if pending is None else pending.result()

    def close(self) -> None:
        """Join, then stop every writer thread (raising the boundary's error after)."""
        try:
            self.join()
        finally:
            for executor in (*self.executors.values(), self.boundary):
                if executor is not None:
                    executor.shutdown(wait=True)
            self.executors.clear()
            self.boundary = None
