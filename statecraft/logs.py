"""What statecraft prints when nobody configured logging: ``statecraft: <message>`` on stderr.

The library reports through the ``"statecraft"`` logger and its children (``statecraft.resume``,
``statecraft.save``, ...) and never with bare ``print``. A training script that configures no
logging would see none of it (Python drops INFO records, and prints WARNING ones without a
prefix), so :func:`configure_default_output` -- called by ``Checkpointer(...)`` as
``configure_default_output(rank=collective.rank, quiet=...)`` before anything else it does, so
that the config's own warnings are shown too -- installs one stderr handler on the
``"statecraft"`` logger:

=========================  ==============================================================
situation                  what reaches stderr
=========================  ==============================================================
rank 0                     INFO and up: the resume decision (``resumed from <path> (iter
                           N)`` / the fresh start and why), each save (where, bytes,
                           seconds), every warning
any other rank             ERROR and up only: the resume decision, saves and warnings are
                           the same on every rank, so rank 0 prints them once per job
``quiet=True``             nothing (the handler stays installed at a level above
                           CRITICAL, so Python's last-resort handler prints no bare
                           warnings either)
logging configured by the  nothing from this module: the user's handlers on the
user                       ``statecraft`` logger or the root logger receive the records as
                           usual, at the levels the user set; ``quiet`` does not apply
=========================  ==============================================================

"Configured by the user" is decided at every record, not only at installation: a script that
calls :func:`logging.basicConfig` after building its ``Checkpointer`` gets each line exactly
once, through its own handler (the default handler steps aside, and the ``statecraft`` logger's
level, raised to INFO only by this module, is given back). ``propagate`` is never turned off.
Warnings the library issues with :func:`warnings.warn` are untouched: they go through Python's
``warnings`` machinery as always (``logging.captureWarnings`` is not called).

Example:
    >>> configure_default_output(rank=0, quiet=False)   # doctest: +SKIP
    >>> logging.getLogger("statecraft").info("saved %s", "iter_000000100")  # doctest: +SKIP
    statecraft: saved iter_000000100
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

__all__ = ["LOGGER_NAME", "PREFIX_FORMAT", "configure_default_output", "default_output_installed"]

#: the logger every statecraft module logs under (modules use children of it)
LOGGER_NAME = "statecraft"
#: the format of each line the default handler prints
PREFIX_FORMAT = "statecraft: %(message)s"
#: the handler level that prints nothing (above CRITICAL)
_SILENT = logging.CRITICAL + 10


class _DefaultOutput(logging.StreamHandler):
    """The default stderr handler; ``sys.stderr`` is looked up at each record (as Python's own
    last-resort handler does), so a redirected or replaced stderr is honoured."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)
        self.setFormatter(logging.Formatter(PREFIX_FORMAT))
        self.raised_logger_level = False  # this module set the logger's level to INFO
        self.addFilter(self._user_has_not_configured)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass  # always the current sys.stderr

    def _user_has_not_configured(self, _record: logging.LogRecord) -> bool:
        """Print only while nobody else handles the records; otherwise step aside for good."""
        if not _user_configured():
            return True
        self.give_back_logger_level()  # the user's configuration decides the level now
        self.setLevel(_SILENT)
        return False

    def give_back_logger_level(self) -> None:
        """Undo this module's raising of the ``statecraft`` logger's level to INFO."""
        logger = logging.getLogger(LOGGER_NAME)
        if self.raised_logger_level and logger.level == logging.INFO:
            logger.setLevel(logging.NOTSET)
        self.raised_logger_level = False


def _ours() -> _DefaultOutput | None:
    for handler in logging.getLogger(LOGGER_NAME).handlers:
        if isinstance(handler, _DefaultOutput):
            return handler
    return None


def _user_configured() -> bool:
    """True when the ``statecraft`` logger has a handler that is not ours, or the root logger
    has any handler (``logging.basicConfig``, a pytest capture, a framework's setup)."""
    others = [
        h for h in logging.getLogger(LOGGER_NAME).handlers if not isinstance(h, _DefaultOutput)
    ]
    return bool(others or logging.getLogger().handlers)


def default_output_installed() -> bool:
    """True when the default handler is installed and would print INFO records right now."""
    handler = _ours()
    return handler is not None and handler.level <= logging.INFO and not _user_configured()


def configure_default_output(*, rank: int, quiet: bool) -> None:
    """Make statecraft's messages visible on stderr, prefixed ``statecraft:``, unless logging is
    configured already (see the module docstring for the full table).

    Idempotent: there is at most one default handler; a later call re-decides its level (the
    latest ``Checkpointer`` of a process wins). When the user has configured logging (a handler
    on the ``statecraft`` logger or on the root logger), nothing is installed and ``quiet`` has
    no effect: the user's handlers and levels decide.

    Args:
        rank: this process's rank (``0`` without ``torch.distributed``); only rank 0 prints
            below ERROR.
        quiet: print nothing (the ``quiet`` knob of ``CheckpointConfig`` or
            ``Checkpointer(quiet=...)``).

    Raises:
        TypeError: ``rank`` is not a non-negative int or ``quiet`` not a bool (a programming
            error of the caller, named so).
    """
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise TypeError(f"configure_default_output(rank=...): a non-negative int, got {rank!r}")
    if not isinstance(quiet, bool):
        raise TypeError(f"configure_default_output(quiet=...): true or false, got {quiet!r}")
    logger = logging.getLogger(LOGGER_NAME)
    handler = _ours()
    if _user_configured():
        return
    if handler is None:
        handler = _DefaultOutput()
        logger.addHandler(handler)
    if quiet:
        handler.setLevel(_SILENT)
        handler.give_back_logger_level()
        return
    handler.setLevel(logging.INFO if rank == 0 else logging.ERROR)
    if rank == 0 and logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)  # records below the root's WARNING must be created at all
        handler.raised_logger_level = True
