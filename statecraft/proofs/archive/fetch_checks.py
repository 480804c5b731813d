"""The checks named by ``specs/fetch.toml``.

They judge the raw bytes of the simulated disk against :attr:`FetchScenario.expected` (the
archived files as the setup read them from the source tree) and the store operations the runs
performed (the gate's log); no production decoding or verification is called. Each raises
:class:`~statecraft.proofs.GuaranteeViolation` with what it found and calls ``ctx.exercised()``
only when it asserted something in the state it was given.
"""

from __future__ import annotations

import re

from statecraft.engine.crash import IoRecord
from statecraft.errors import ArchiveError, FetchDestinationExistsError
from statecraft.proofs.archive.fetch_scenarios import DST_ROOT, FetchRecovery, FetchScenario
from statecraft.proofs.oracle import touched_paths
from statecraft.proofs.scenario import CheckContext, GuaranteeViolation

__all__ = [
    "existing_destination_untouched",
    "placed_copy_is_the_verified_archive",
    "retry_places_or_refuses",
    "touches_only_its_names",
]


def _scenario(ctx: CheckContext) -> FetchScenario:
    return ctx.scenario


def _recovery(ctx: CheckContext) -> FetchRecovery:
    if not isinstance(ctx.recovery, FetchRecovery):
        raise GuaranteeViolation(f"recovery did not complete: {ctx.recovery!r}")
    return ctx.recovery


def _target(scenario: FetchScenario) -> str:
    return f"{DST_ROOT}/{scenario.dest_name}"


def _staging(scenario: FetchScenario) -> re.Pattern[str]:
    return re.compile(rf"^\.{re.escape(scenario.dest_name)}\.fetch-\d+-\d+$")


def _difference(found: dict[str, bytes], expected: dict[str, bytes]) -> str | None:
    missing = sorted(set(expected) - set(found))
    extra = sorted(set(found) - set(expected))
    changed = sorted(p for p in set(found) & set(expected) if found[p] != expected[p])
    if not (missing or extra or changed):
        return None
    return f"missing {missing}, extra {extra}, differing bytes {changed}"


def placed_copy_is_the_verified_archive(ctx: CheckContext) -> None:
    """FET-NEVER-PLACED-UNVERIFIED."""
    scenario = _scenario(ctx)
    if scenario.existing:
        return
    target = _target(scenario)
    present = ctx.world.fs.stat(target) is not None
    if scenario.tamper:
        ctx.exercised()
        if present:
            raise GuaranteeViolation(
                f"{target} exists ({sorted(ctx.world.fs.tree(target))}) although a payload of "
                "the archive was tampered with: an unverified copy was placed"
            )
        return
    if not present:
        return
    ctx.exercised()
    problem = _difference(ctx.world.fs.tree(target), scenario.expected)
    if problem is not None:
        raise GuaranteeViolation(f"{target} is placed but is not the archive: {problem}")


def existing_destination_untouched(ctx: CheckContext) -> None:
    """FET-NO-OVERWRITE."""
    scenario = _scenario(ctx)
    if not scenario.existing:
        return
    ctx.exercised()
    target = _target(scenario)
    problem = _difference(ctx.world.fs.tree(target), scenario.existing_tree)
    if problem is not None:
        raise GuaranteeViolation(f"{target} existed before the fetch and changed: {problem}")
    runs = []
    if ctx.acknowledged or (scenario.last_run is not None and ctx.phase == "crashed"):
        runs.append(("the fetch", scenario.last_run))
    if ctx.phase == "recovered":
        runs.append(("the retry", _recovery(ctx).retry))
    for who, result in runs:
        if result is None:
            continue
        if not isinstance(result.error, FetchDestinationExistsError):
            raise GuaranteeViolation(
                f"{who} over the existing {target} ended {result.final_state} with "
                f"{result.error!r}, expected a FetchDestinationExistsError refusal"
            )


def retry_places_or_refuses(ctx: CheckContext) -> None:
    """FET-RETRY-PLACES."""
    scenario = _scenario(ctx)
    if scenario.existing:
        return
    recovery = _recovery(ctx)
    ctx.exercised()
    target = _target(scenario)
    retry = recovery.retry
    if scenario.tamper:
        if not retry.failed or not isinstance(retry.error, ArchiveError):
            raise GuaranteeViolation(
                f"the retried fetch of a tampered archive ended {retry.final_state} "
                f"({retry.error!r}), expected an ArchiveError"
            )
        if ctx.world.fs.stat(target) is not None:
            raise GuaranteeViolation(f"{target} exists after the retry of a tampered fetch")
    else:
        if retry.final_state == "refused":
            if not isinstance(retry.error, FetchDestinationExistsError):
                raise GuaranteeViolation(f"the retry refused with {retry.error!r}")
        elif retry.final_state != "placed":
            raise GuaranteeViolation(
                f"the retried fetch ended {retry.final_state} ({retry.error!r}), expected "
                "placed or refused because the first fetch placed it"
            )
        problem = _difference(ctx.world.fs.tree(target), scenario.expected)
        if problem is not None:
            raise GuaranteeViolation(f"after the retry {target} is not the archive: {problem}")
    pattern = _staging(scenario)
    left = {
        n: sorted(ctx.world.fs.tree(f"{DST_ROOT}/{n}"))
        for n in ctx.world.fs.listdir(DST_ROOT)
        if pattern.match(n)
    }
    if any(left.values()):
        raise GuaranteeViolation(f"the retry left staging files {left} in {DST_ROOT}")


def _outside(scenario: FetchScenario, record: IoRecord) -> list[str]:
    if record.op in ("put", "delete"):
        return [f"{record.op} {record.target} on the bucket"]
    target = _target(scenario)
    pattern = _staging(scenario)
    bad = []
    for path in touched_paths(record):
        inside = path == target or path.startswith(target + "/")
        if path.startswith(DST_ROOT + "/"):
            first = path[len(DST_ROOT) + 1 :].split("/", 1)[0]
            inside = inside or bool(pattern.match(first))
        if path in ("/", DST_ROOT):  # a store creates its missing root (node loss)
            inside = True
        if not inside:
            bad.append(f"{record.op} {path}")
    return bad


def touches_only_its_names(ctx: CheckContext) -> None:
    """FET-LOCAL-ONLY-DST."""
    scenario = _scenario(ctx)
    logs = [("the fetch", ctx.io_log)]
    if ctx.phase == "recovered":
        logs.append(("the retry", _recovery(ctx).retry_io))
    for who, log in logs:
        if not log:
            continue
        ctx.exercised()
        bad = [b for record in log for b in _outside(scenario, record)]
        if bad:
            raise GuaranteeViolation(f"{who} changed names it does not own: {bad[:5]}")
