"""Deferred publications of one ``LocalStore``: fsync + rename behind the caller, one directory
fsync for many files.

A writer opened with ``open_atomic(path, defer_sync=True)`` hands its commit (``fsync`` of the
temporary, ``close``, ``rename`` over the final name) to :class:`DeferredPublications` and
returns at once with its record (size and digest are known when the last byte is written). The
directory the rename changed is remembered. :meth:`DeferredPublications.settle` waits for every
handed-over commit, raises the first failure, then fsyncs each remembered directory once.

Ordering, which is what the durability contract needs (DESIGN.md §4, ``docs/durability.md``):
the store calls :meth:`~DeferredPublications.settle` before every other publication or removal,
and the exclusive create (the commit point) settles *alongside* the fsync of its own temporary
and before its ``link``. So every deferred file is durable (data and name) before any later
publication of the same store can become durable: a manifest can never survive a power loss
without the files renamed into its directory before it. What a deferred writer saves is one
directory fsync per file (the renames of one directory share the settle's), and, on the real
OS, the wait: the fsyncs run on helper threads while the caller serializes the next file, and
concurrent fsyncs are merged into one journal commit by the filesystem.

Where the filesystem is simulated, or a gate counts its operations (the crash harness, fault
injection), each commit runs inline, in order (the operation log is deterministic); only the
directory fsync is deferred to the settle. The real OS without a gate runs commits on up to
:data:`WORKERS` threads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from statecraft.storage.filesystem import Filesystem, OsFilesystem

__all__ = ["WORKERS", "DeferredPublications", "runs_concurrently"]

WORKERS = 4
log = logging.getLogger("statecraft.storage")


def runs_concurrently(fs: Filesystem) -> bool:
    """True when commits may run on helper threads: the real OS with no gate counting its
    operations (a gate's crash points and injected faults need one deterministic order)."""
    return isinstance(fs, OsFilesystem) and fs.gate is None


class DeferredPublications:
    """The commits handed over by deferred writers of one store, and the directories their
    renames changed (see the module doc). One thread calls :meth:`submit` and :meth:`settle`."""

    def __init__(self, fs: Filesystem) -> None:
        self._fs = fs
        self._concurrent = runs_concurrently(fs)
        self._pool: ThreadPoolExecutor | None = None
        self._jobs: list[Future[None]] = []
        self._dirs: list[str] = []  # in the order first changed; each fsynced once at settle

    def __repr__(self) -> str:
        return f"DeferredPublications(pending={len(self._jobs)}, dirs={self._dirs})"

    @property
    def pending(self) -> bool:
        """Commits or directory fsyncs are outstanding."""
        return bool(self._jobs or self._dirs)

    def mark(self, directory: str) -> None:
        """Remember that an entry of ``directory`` changed; it is fsynced at the next settle."""
        if directory not in self._dirs:
            self._dirs.append(directory)

    def submit(self, commit: Callable[[], None], directory: str) -> None:
        """Run ``commit`` (fsync, close, rename of one file) behind the caller, or inline
        where commits run in order; ``directory`` is fsynced at the next settle.

        Raises:
            StoreError: (inline only) the commit failed; nothing was published.
        """
        self.mark(directory)
        if not self._concurrent:
            commit()
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="statecraft-commit")
        self._jobs.append(self._pool.submit(commit))

    def settle(
        self, *, alongside: Callable[[], None] | None = None, keep_errors: bool = True
    ) -> None:
        """Wait for every handed-over commit, then fsync each changed directory; run
        ``alongside`` (the commit point's own fsync) at the same time, on this thread.

        On the real OS ``alongside`` overlaps both the commits still in flight and the
        directory fsyncs (a helper waits for the commits, then fsyncs the directories in
        parallel); inline, the directories are fsynced first, then ``alongside`` runs.
        Either way every commit and directory fsync is complete when this returns.

        Args:
            alongside: work of the caller that does not depend on the deferred files (the
                fsync of a manifest's temporary); what comes after the settle (the link)
                does.
            keep_errors: False drops the failures of handed-over commits (a removal of the
                files they wrote is what comes next); they are logged.

        Raises:
            StoreError: a handed-over commit failed (the first failure); the directories are
                not fsynced (``alongside`` may have run).
            OSError: a directory fsync or ``alongside`` failed.
        """
        jobs, self._jobs = self._jobs, []
        dirs, self._dirs = self._dirs, []
        pool = self._pool
        if self._concurrent and pool is not None and alongside is not None and (jobs or dirs):

            def commits_then_directories() -> None:
                _raise_first(jobs)  # the jobs were queued first: they never wait for this
                _raise_first([pool.submit(self._fs.fsync_dir, d) for d in dirs])

            tail = pool.submit(commits_then_directories)
            try:
                alongside()
            finally:
                tail.exception()  # never leave it running
            tail.result()
            return
        _raise_first(jobs, keep=keep_errors)
        if not self._concurrent or pool is None or len(dirs) < 2:
            for directory in dirs:
                self._fs.fsync_dir(directory)
            if alongside is not None:
                alongside()
            return
        futures = [pool.submit(self._fs.fsync_dir, d) for d in dirs]
        try:
            if alongside is not None:
                alongside()
        finally:
            _raise_first(futures)


def _raise_first(futures: list[Future[None]], *, keep: bool = True) -> None:
    """Wait for every future; raise the first failure (``keep``) or log them all."""
    failures = [exc for exc in (f.exception() for f in futures) if exc is not None]
    if failures and keep:
        raise failures[0]
    for failure in failures:
        log.debug("dropped the failure of a deferred commit: %s", failure)
