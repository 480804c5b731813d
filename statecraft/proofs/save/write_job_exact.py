"""Which iterations of a write-job run can resume exactly, as the checks of
:mod:`statecraft.proofs.save.write_job_checks` judge them with the independent oracle
(:mod:`statecraft.proofs.oracle`): an iteration is *exact* when it is a complete checkpoint of
the full plan (:meth:`DiskView.problem` finds nothing) and holds no retention marker
(``.retention-*``)."""

from __future__ import annotations

from collections.abc import Sequence

from statecraft.proofs.oracle import DiskView, iteration_name

__all__ = ["MARKER_PREFIX", "exact", "exact_problem", "marked"]

#: the name prefix of every file retention adds inside an ``iter_N``
MARKER_PREFIX = ".retention-"


def marked(view: DiskView, iteration: int) -> list[str]:
    """The retention markers inside ``iter_N``."""
    prefix = iteration_name(iteration) + "/"
    return sorted(
        p[len(prefix) :]
        for p in view.files
        if p.startswith(prefix) and p[len(prefix) :].startswith(MARKER_PREFIX)
    )


def exact_problem(view: DiskView, iteration: int, files: Sequence[str]) -> str | None:
    """Why ``iteration`` cannot resume exactly (``None``: it is complete and unmarked)."""
    problem = view.problem(iteration, files)
    if problem is not None:
        return problem
    markers = marked(view, iteration)
    if markers:
        return f"{iteration_name(iteration)} holds retention markers {markers}"
    return None


def exact(view: DiskView, files: Sequence[str]) -> list[int]:
    """The exact iterations of ``view``, oldest first."""
    return [i for i in view.iterations() if exact_problem(view, i, files) is None]
