"""Explore scenarios side by side in forked worker processes (``crashcheck --jobs``).

Each scenario is explored in one worker from start to end; the workers inherit the work by
fork (a scenario may hold closures, which do not pickle) and send back their reports.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

from statecraft.engine.spec import Spec
from statecraft.proofs.explorer import ExploreOptions, ScenarioReport, explore
from statecraft.proofs.scenario import Scenario

__all__ = ["default_jobs", "explore_in_parallel"]


#: the work of a pool: (scenario, the union of its machines' guarantees, options), set before
#: the workers fork (a scenario may hold closures, which do not pickle)
_WORK: list[tuple[Scenario, Spec, ExploreOptions]] = []


def _explore_one(index: int) -> ScenarioReport:
    scenario, spec, options = _WORK[index]
    return explore(scenario, spec, options)


def explore_in_parallel(
    work: list[tuple[Scenario, Spec, ExploreOptions]], jobs: int
) -> list[ScenarioReport]:
    """Explore every item, in ``jobs`` forked processes when more than one (and fork exists)."""
    if jobs <= 1 or len(work) <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [explore(s, spec, options) for s, spec, options in work]
    _WORK[:] = work
    try:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=min(jobs, len(work)), mp_context=context) as pool:
            return list(pool.map(_explore_one, range(len(work))))
    finally:
        _WORK.clear()


def default_jobs() -> int:
    """One worker process per CPU this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)
