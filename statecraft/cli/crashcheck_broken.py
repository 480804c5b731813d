"""``statecraft crashcheck --broken``: explore the deliberately wrong variants the specs declare
(``[[broken]]``: a variant and the guarantees it must be caught violating) and fail unless each
is caught. A guarantee whose check no wrong variant makes fail is one that was never shown able
to fail; ``machines check`` lists the guarantees no declared variant catches.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import attrs

from statecraft.engine import Spec, load_spec
from statecraft.proofs import ExploreOptions, Scenario
from statecraft.proofs.pool import default_jobs, explore_in_parallel

__all__ = ["BrokenReport", "broken_check", "run_broken"]


@attrs.frozen
class BrokenReport:
    """What exploring one declared broken variant found: the guarantees it must be caught
    violating (``catches``), those it was (``caught``) and the rest (``missed``)."""

    machine: str
    variant: str
    catches: tuple[str, ...]
    caught: tuple[str, ...]
    scenarios: tuple[str, ...]
    crash_states: int
    distinct_crash_states: int
    seconds: float

    @property
    def missed(self) -> tuple[str, ...]:
        return tuple(g for g in self.catches if g not in self.caught)

    def to_json(self) -> dict[str, Any]:
        return {
            "machine": self.machine,
            "variant": self.variant,
            "catches": list(self.catches),
            "caught": list(self.caught),
            "missed": list(self.missed),
            "scenarios": list(self.scenarios),
            "crash_states": self.crash_states,
            "distinct_crash_states": self.distinct_crash_states,
            "seconds": round(self.seconds, 3),
        }


def broken_check(
    machines: Sequence[str],
    options: ExploreOptions,
    *,
    specs_dir: str | Path | None = None,
    jobs: int = 1,
) -> list[BrokenReport]:
    """Explore every broken variant the specs of ``machines`` declare and say, per variant,
    which of the guarantees it must violate were caught (``crashcheck --broken``).

    Raises:
        SpecError: a spec is malformed or a variant does not import.
    """
    from statecraft import resources
    from statecraft.engine.registry import import_object

    root = Path(specs_dir) if specs_dir is not None else resources.specs_dir()
    rows: list[tuple[str, Any, list[int]]] = []
    work: list[tuple[Scenario, Spec, ExploreOptions]] = []
    for machine in machines:
        spec = load_spec(root / f"{machine}.toml")
        for broken in spec.broken:
            factory = import_object(broken.variant, what="broken variant", source=spec.source)
            scenarios = list(cast(Callable[[], Sequence[Scenario]], factory)())
            rows.append((machine, broken, list(range(len(work), len(work) + len(scenarios)))))
            work.extend((scenario, spec, options) for scenario in scenarios)
    found = explore_in_parallel(work, jobs)
    out = []
    for machine, broken, indices in rows:
        reports = [found[i] for i in indices]
        violated = {g for r in reports for g in r.violated_guarantees()}
        out.append(
            BrokenReport(
                machine=machine,
                variant=broken.variant,
                catches=broken.catches,
                caught=tuple(g for g in broken.catches if g in violated),
                scenarios=tuple(r.scenario for r in reports),
                crash_states=sum(r.crash_states for r in reports),
                distinct_crash_states=sum(r.distinct_crash_states for r in reports),
                seconds=sum(r.seconds for r in reports),
            )
        )
    return out


def run_broken(args: argparse.Namespace, machines: list[str], specs_dir: Path) -> int:
    from statecraft.cli.envelope import emit

    options = ExploreOptions(
        extra_subsets=args.extra_subsets, seed=args.seed, exhaustive=args.exhaustive
    )
    jobs = args.jobs if args.jobs is not None else default_jobs()
    reports = broken_check(machines, options, specs_dir=specs_dir, jobs=jobs)
    lines = [
        f"{r.machine}: {r.variant}: "
        + ("caught" if not r.missed else f"NOT CAUGHT: {', '.join(r.missed)}")
        + f" ({', '.join(r.catches)}; {r.crash_states} states, {r.seconds:.1f}s)"
        for r in reports
    ]
    errors = [
        (
            "broken_variant_not_caught",
            f"{r.machine}: the broken variant {r.variant} was not caught violating "
            f"{', '.join(r.missed)}: the check cannot fail on it; strengthen the check or fix "
            "the variant",
        )
        for r in reports
        if r.missed
    ]
    return emit(
        "crashcheck",
        as_json=args.json,
        exit_code=1 if errors else 0,
        data={"broken": [r.to_json() for r in reports]},
        errors=errors,
        text="\n".join(lines) or "no broken variant declared",
    )
