"""The checks named by ``specs/validation.toml``.

They judge with the independent oracle (:mod:`statecraft.proofs.oracle`: raw bytes, their own
manifest and record parsing, hashing and safe loading), the store operations each run
performed (the gate's logs) and the calls of the scenarios' counting evaluations. Each raises
:class:`~statecraft.proofs.GuaranteeViolation` with what it found, and calls
``ctx.exercised()`` when it actually asserted something in the state it was given.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import attrs

from statecraft.engine.crash import IoRecord
from statecraft.proofs.oracle import (
    CHECKPOINTS_ROOT,
    MANIFEST,
    DiskView,
    committed_files,
    iteration_name,
    ops_on,
    touched_paths,
)
from statecraft.proofs.scenario import CheckContext, GuaranteeViolation
from statecraft.proofs.validation.scenarios import (
    CountingEvaluator,
    ValidationRecovery,
    ValidationScenario,
    expected_metrics,
)

__all__ = [
    "acknowledged_validation_is_published",
    "committed_files_append_only",
    "evaluation_reruns_iff_not_durable",
    "never_published_early",
    "oracle_stage",
    "recovery_finishes_published",
    "resume_adopts_pending_or_previous",
]

EVALUATED = ".validation-publication-evaluated.json"
PUBLISHED = ".validation-publication-published.json"
RECORDS = (EVALUATED, PUBLISHED)
_STAGES = ("absent", "none", "evaluation_pending", "publication_pending", "published")


@attrs.frozen
class OracleStage:
    """A checkpoint's validation stage as the oracle reads the raw bytes: ``absent`` (not a
    complete checkpoint), ``none``, ``evaluation_pending``, ``publication_pending`` or
    ``published``; with the evaluated metrics."""

    stage: str
    metrics: dict[str, float] | None = None

    def at_least(self, stage: str) -> bool:
        return _STAGES.index(self.stage) >= _STAGES.index(stage)


def _record(view: DiskView, iteration: int, name: str, schema: str) -> dict[str, Any] | None:
    raw = view.files.get(f"{iteration_name(iteration)}/{name}")
    if raw is None:
        return None
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("schema") != schema:
        return None
    if record.get("iteration") != iteration:
        return None
    return record


def _valid_metrics(metrics: Any) -> bool:
    return isinstance(metrics, dict) and all(
        isinstance(k, str) and type(v) in (int, float) and math.isfinite(v)
        for k, v in metrics.items()
    )


def oracle_stage(view: DiskView, iteration: int, files: Sequence[str]) -> OracleStage:
    """The validation stage of ``iteration`` in ``view`` (see :class:`OracleStage`)."""
    if view.problem(iteration, files) is not None:
        return OracleStage("absent")
    validation = view.payload(iteration, "trainer.pt").get("validation")
    if not isinstance(validation, dict) or validation.get("stage") != "evaluation_pending":
        return OracleStage("none")
    evaluated = _record(view, iteration, EVALUATED, "statecraft.validation-evaluated.v1")
    if evaluated is None or not _valid_metrics(evaluated.get("metrics")):
        return OracleStage("evaluation_pending")
    metrics = dict(evaluated["metrics"])
    if _record(view, iteration, PUBLISHED, "statecraft.validation-published.v1") is None:
        return OracleStage("publication_pending", metrics)
    return OracleStage("published", metrics)


def scenario_of(ctx: CheckContext) -> ValidationScenario:
    return ctx.scenario


def recovery_of(ctx: CheckContext) -> ValidationRecovery:
    if not isinstance(ctx.recovery, ValidationRecovery):
        raise GuaranteeViolation(f"recovery did not complete: {ctx.recovery!r}")
    return ctx.recovery


def _view(ctx: CheckContext, key: str, world: Any) -> DiskView:
    view: DiskView = ctx.memo(key, lambda: DiskView.of(world))
    return view


def _stage(ctx: CheckContext, key: str, view: DiskView) -> OracleStage:
    scenario = scenario_of(ctx)
    stage: OracleStage = ctx.memo(
        f"stage:{key}", lambda: oracle_stage(view, scenario.target, scenario.plan_files)
    )
    return stage


@attrs.frozen
class _Run:
    """One process's validation run as the checks judge it."""

    who: str
    io: tuple[IoRecord, ...]
    evaluator: CountingEvaluator | None
    seen: DiskView


def _runs(ctx: CheckContext) -> list[_Run]:
    """The crashed run (judged against the disk setup left) and, once recovered, the
    recovery's validation run (against the disk it found)."""
    runs = [
        _Run("the run", ctx.io_log, scenario_of(ctx).last_run, _view(ctx, "before", ctx.before))
    ]
    if ctx.phase == "recovered":
        recovery = recovery_of(ctx)
        runs.append(_Run("the recovery", recovery.io, recovery.evaluator, recovery.seen))
    return runs


def _record_path(iteration: int, name: str) -> str:
    return f"{CHECKPOINTS_ROOT}/{iteration_name(iteration)}/{name}"


def _links(io: Sequence[IoRecord], path: str) -> list[int]:
    """Indexes of the operations that linked a file into ``path`` (an exclusive create)."""
    return [r.index for r in io if r.op == "link" and touched_paths(r)[-1] == path]


def _describe(records: Sequence[IoRecord]) -> str:
    return "; ".join(f"#{r.index} {r.op} {r.target}" for r in records)


# ------------------------------------------------------------------------- validation spec
def never_published_early(ctx: CheckContext) -> None:
    """VALIDATION-NOT-EARLY: a checkpoint reads publication-pending or published only after
    its evaluation succeeded: every evaluated record was created after an evaluation of that
    run returned, every published record after a valid evaluated record existed, and a
    record on disk was created by one of the runs (or was there before)."""
    scenario = scenario_of(ctx)
    target = scenario.target
    evaluated, published = _record_path(target, EVALUATED), _record_path(target, PUBLISHED)
    before = _stage(ctx, "before", _view(ctx, "before", ctx.before))
    created = before.at_least("publication_pending")
    for run in _runs(ctx):
        had = _stage(ctx, f"seen:{run.who}", run.seen).at_least("publication_pending")
        e_links, p_links = _links(run.io, evaluated), _links(run.io, published)
        if e_links or p_links:
            ctx.exercised()
        returns = run.evaluator.returned_at if run.evaluator is not None else []
        for link in e_links:
            if not any(r <= link for r in returns):
                raise GuaranteeViolation(
                    f"{run.who} created {iteration_name(target)}/{EVALUATED} (io#{link}) before "
                    f"any evaluation of it had returned (returns at io {returns}, calls "
                    f"{run.evaluator.calls if run.evaluator else []})"
                )
        for link in p_links:
            if not had and not any(e < link for e in e_links):
                raise GuaranteeViolation(
                    f"{run.who} created {iteration_name(target)}/{PUBLISHED} (io#{link}) while no "
                    f"valid evaluated record existed (evaluated linked at {e_links})"
                )
        created = created or bool(e_links)
    now = _stage(ctx, "world", _view(ctx, "world", ctx.world))
    if now.at_least("publication_pending"):
        ctx.exercised()
        if not created:
            raise GuaranteeViolation(
                f"{iteration_name(target)} reads {now.stage}, but no run created its evaluated "
                "record after an evaluation returned"
            )
        if now.metrics != expected_metrics(target):
            raise GuaranteeViolation(
                f"{iteration_name(target)} records metrics {now.metrics}, not what the "
                f"evaluation returned ({expected_metrics(target)})"
            )


def evaluation_reruns_iff_not_durable(ctx: CheckContext) -> None:
    """VALIDATION-RETRY-STAGE: a run calls the evaluation exactly once when no valid evaluated
    record was durable when it started, and never when one was (a completed evaluation is
    never re-run); the crashed run never calls it more than once."""
    scenario = scenario_of(ctx)
    for run in _runs(ctx):
        if run.evaluator is None:
            continue
        durable = _stage(ctx, f"seen:{run.who}", run.seen).at_least("publication_pending")
        calls = run.evaluator.calls
        if run.who == "the run" and not durable:
            if calls:
                ctx.exercised()
            if len(calls) > 1:
                raise GuaranteeViolation(f"the run called the evaluation {len(calls)} times")
            continue
        ctx.exercised()
        expected = [] if durable else [scenario.target]
        if calls != expected:
            why = "an evaluated record was durable" if durable else "no evaluated record was"
            raise GuaranteeViolation(
                f"{run.who} called the evaluation for steps {calls} although {why} when it "
                f"started (expected {expected})"
            )


def resume_adopts_pending_or_previous(ctx: CheckContext) -> None:
    """VALIDATION-RESUME: after any crash, resume=auto adopts the target (complete, with its
    validation stage, on the disk as resume found it) or the previous complete checkpoint,
    never a partial one, and loads exactly its state."""
    scenario = scenario_of(ctx)
    recovery = recovery_of(ctx)
    ctx.exercised()
    before = _view(ctx, "before", ctx.before)
    verified = before.verified(scenario.plan_files)
    previous = max((i for i in verified if i != scenario.target), default=0)
    resume = recovery.first.result
    allowed = sorted({previous, scenario.target})
    if resume.step not in allowed:
        raise GuaranteeViolation(f"resume=auto adopted step {resume.step}; allowed: {allowed}")
    if resume.step == scenario.target:
        stage = oracle_stage(recovery.first.seen, scenario.target, scenario.plan_files)
        if not stage.at_least("evaluation_pending"):
            raise GuaranteeViolation(
                f"resume=auto adopted {iteration_name(scenario.target)}, which read "
                f"{stage.stage} on the disk it found"
            )
    loaded = recovery.first.loaded
    if resume.resumed:
        weight = None if loaded is None else loaded.model["weight"].flatten().tolist()
        if weight is None or any(w != float(resume.step) for w in weight):
            raise GuaranteeViolation(f"resumed step {resume.step} but loaded weights {weight}")


def _committed_with_records(view: DiskView) -> set[str]:
    """Committed names of ``view`` plus the validation records beside each manifest."""
    names = committed_files(view)
    for iteration in view.iterations():
        name = iteration_name(iteration)
        if f"{name}/{MANIFEST}" in view.files:
            names |= {
                f"{CHECKPOINTS_ROOT}/{name}/{r}" for r in RECORDS if f"{name}/{r}" in view.files
            }
    return names


def committed_files_append_only(ctx: CheckContext) -> None:
    """VALIDATION-APPEND-ONLY: every committed file (and every record) a run found is
    byte-identical afterwards and no operation of the run touched it; records are only ever
    published by link (exclusive create), never renamed onto or opened."""
    prefix = CHECKPOINTS_ROOT + "/"
    after = _view(ctx, "world", ctx.world)
    for run in _runs(ctx):
        committed = _committed_with_records(run.seen)
        for path in sorted(committed):
            rel = path[len(prefix) :]
            if "/" not in rel:
                continue  # an iteration directory
            ctx.exercised()
            if after.files.get(rel) != run.seen.files[rel]:
                raise GuaranteeViolation(f"{rel}, committed when {run.who} started, changed")
        touched = ops_on(run.io, committed)
        if touched:
            raise GuaranteeViolation(f"{run.who} touched committed names: {_describe(touched)}")
        onto = [
            r
            for r in run.io
            if r.op in ("link", "rename", "open_write", "unlink")
            and touched_paths(r)
            and touched_paths(r)[-1].rsplit("/", 1)[-1] in RECORDS
        ]
        if onto:
            ctx.exercised()
        linked: set[str] = set()
        for r in onto:
            path = touched_paths(r)[-1]
            if r.op == "link":
                linked.add(path)
            elif r.op != "unlink" or path not in linked:
                raise GuaranteeViolation(
                    f"{run.who} wrote or removed a validation record other than by exclusive "
                    f"link (or the withdrawal of its own unacknowledged link): {_describe([r])}"
                )


def recovery_finishes_published(ctx: CheckContext) -> None:
    """VALIDATION-FINISHES: after recovery the target is complete and reads published, with
    the evaluation's metrics, and no record temporaries remain."""
    scenario = scenario_of(ctx)
    recovery = recovery_of(ctx)
    ctx.exercised()
    now = _view(ctx, "world", ctx.world)
    stage = _stage(ctx, "world", now)
    if stage.stage != "published":
        problem = now.problem(scenario.target, scenario.plan_files)
        raise GuaranteeViolation(
            f"after recovery ({recovery.path}) {iteration_name(scenario.target)} reads "
            f"{stage.stage}" + (f" ({problem})" if problem else "")
        )
    if stage.metrics != expected_metrics(scenario.target):
        raise GuaranteeViolation(f"published with metrics {stage.metrics}")
    name = iteration_name(scenario.target)
    leftovers = [
        p
        for p in now.files
        if p.startswith(name + "/") and ".tmp-" in p and any(r in p for r in RECORDS)
    ]
    if leftovers:
        raise GuaranteeViolation(f"record temporaries left after recovery: {leftovers}")


def acknowledged_validation_is_published(ctx: CheckContext) -> None:
    """VALIDATION-DURABLE: once the validation returned successfully, the target reads
    published whatever crash follows."""
    if not ctx.acknowledged:
        return
    ctx.exercised()
    scenario = scenario_of(ctx)
    stage = _stage(ctx, "world", _view(ctx, "world", ctx.world))
    if stage.stage != "published":
        raise GuaranteeViolation(
            f"the validation of {iteration_name(scenario.target)} returned, yet after the crash "
            f"it reads {stage.stage}"
        )
