"""The checks named by ``specs/artifact.toml``.

They judge with the independent oracles (:mod:`statecraft.proofs.artifacts.oracle` for
``checkpoint_artifacts/``, :mod:`statecraft.proofs.oracle` for ``checkpoints/``) and with the
store operations the runs performed (the gate's log). Each raises
:class:`~statecraft.proofs.GuaranteeViolation` with what it found and calls
``ctx.exercised()`` only when it asserted something in the state it was given.
"""

from __future__ import annotations

from collections.abc import Iterable

from statecraft.engine.crash import IoRecord
from statecraft.errors import (
    ArtifactCommittedError,
    CheckpointCorruptError,
    ValidationFailedError,
)
from statecraft.proofs.artifacts.oracle import (
    ARTIFACT_MANIFEST,
    ARTIFACTS_ROOT,
    ArtifactView,
    tree_of,
)
from statecraft.proofs.artifacts.scenarios import (
    ArtifactRecovery,
    ArtifactScenario,
    expected_metrics,
)
from statecraft.proofs.oracle import (
    CHECKPOINTS_ROOT,
    MANIFEST,
    DiskView,
    iteration_name,
    touched_paths,
)
from statecraft.proofs.scenario import CheckContext, GuaranteeViolation

__all__ = [
    "artifact_commit_only_by_exclusive_create",
    "cadence_artifact_kept_when_validation_ran",
    "committed_artifacts_never_recommitted",
    "manifest_names_complete_artifact",
    "never_touches_checkpoints",
    "resume_never_adopts_an_artifact",
    "retry_finishes_the_artifact",
    "validation_artifact_only_after_success",
]

_RUN_DIR = CHECKPOINTS_ROOT.rsplit("/", 1)[0]


def _recovery(ctx: CheckContext) -> ArtifactRecovery:
    if not isinstance(ctx.recovery, ArtifactRecovery):
        raise GuaranteeViolation(f"recovery did not complete: {ctx.recovery!r}")
    return ctx.recovery


def _scenario(ctx: CheckContext) -> ArtifactScenario:
    return ctx.scenario


def _now(ctx: CheckContext) -> ArtifactView:
    view: ArtifactView = ctx.memo("artifacts", lambda: ArtifactView.of(ctx.world))
    return view


def _before(ctx: CheckContext) -> ArtifactView:
    view: ArtifactView = ctx.memo("artifacts_before", lambda: ArtifactView.of(ctx.before))
    return view


def _logs(ctx: CheckContext) -> list[tuple[str, tuple[IoRecord, ...], ArtifactView]]:
    """(who, store operations, the artifacts as it found them) of the run and the retry."""
    runs = [("the save", ctx.io_log, _before(ctx))]
    if ctx.phase == "recovered":
        recovery = _recovery(ctx)
        runs.append(("the retry", recovery.retry_io, recovery.retry_seen))
    return runs


def _changing(log: Iterable[IoRecord]) -> list[IoRecord]:
    """Operations that create, replace or remove a name (fsyncs change neither)."""
    return [r for r in log if touched_paths(r)]


def _artifact_writes(log: Iterable[IoRecord]) -> list[IoRecord]:
    """Operations that create, replace or remove a name inside ``checkpoint_artifacts/``
    (the store's creating its own empty root, when it opens it, is not an artifact write)."""
    inside = ARTIFACTS_ROOT + "/"
    return [r for r in log if any(p.startswith(inside) for p in touched_paths(r))]


def _describe(records: Iterable[IoRecord]) -> str:
    return "; ".join(f"#{r.index} {r.op} {r.target}" for r in records)


def _damaged_before(ctx: CheckContext, iteration: int) -> bool:
    """The setup left a manifest at ``iteration`` that is not a valid artifact, untouched."""
    before, now = _before(ctx), _now(ctx)
    raw = before.manifest_raw(iteration)
    if raw is None or raw != now.manifest_raw(iteration):
        return False
    s = _scenario(ctx)
    return before.problem(iteration, s.components, s.plan_files) is not None


# ------------------------------------------------------------------------- the checks
def manifest_names_complete_artifact(ctx: CheckContext) -> None:
    """ART-COMMIT-LAST: every artifact manifest present names a complete, intact artifact of
    the plan (a damaged manifest the setup left, untouched, is not this save's)."""
    s, now = _scenario(ctx), _now(ctx)
    for iteration in now.iterations():
        if now.manifest_raw(iteration) is None or _damaged_before(ctx, iteration):
            continue
        ctx.exercised()
        problem = now.problem(iteration, s.components, s.plan_files)
        if problem is not None:
            raise GuaranteeViolation(f"an artifact manifest is present, but {problem}")


def artifact_commit_only_by_exclusive_create(ctx: CheckContext) -> None:
    """ART-EXCLUSIVE: an artifact manifest is only published by ``link``."""
    for who, log, _ in _logs(ctx):
        publishing = [
            r
            for r in log
            if r.op in ("link", "rename", "open_write")
            and touched_paths(r)[-1].endswith("/" + ARTIFACT_MANIFEST)
        ]
        if not publishing:
            continue
        ctx.exercised()
        bad = [r for r in publishing if r.op != "link"]
        if bad:
            raise GuaranteeViolation(f"{who} published an artifact manifest by {_describe(bad)}")


def never_touches_checkpoints(ctx: CheckContext) -> None:
    """ART-NEVER-CHECKPOINT: nothing outside ``checkpoint_artifacts/`` changes, and no
    full-checkpoint manifest is written."""
    inside = ARTIFACTS_ROOT + "/"
    for who, log, _ in _logs(ctx):
        ctx.exercised()
        outside = [
            r
            for r in _changing(log)
            if any(p != ARTIFACTS_ROOT and not p.startswith(inside) for p in touched_paths(r))
        ]
        full = [r for r in _changing(log) if touched_paths(r)[-1].endswith("/" + MANIFEST)]
        if outside or full:
            raise GuaranteeViolation(
                f"{who} wrote outside its artifact: {_describe(outside + full)}"
            )
    ctx.exercised()
    before = tree_of(ctx.before, CHECKPOINTS_ROOT)
    if tree_of(ctx.world, CHECKPOINTS_ROOT) != before:
        raise GuaranteeViolation("checkpoints/ (or latest_checkpoint.txt) changed")
    stray = sorted(set(tree_of(ctx.world, _RUN_DIR)) - set(tree_of(ctx.before, _RUN_DIR)))
    stray = [p for p in stray if not p.startswith("checkpoint_artifacts/")]
    if stray:
        raise GuaranteeViolation(f"files appeared outside checkpoint_artifacts/: {stray}")


def committed_artifacts_never_recommitted(ctx: CheckContext) -> None:
    """ART-NEVER-RECOMMITTED: committed artifacts keep their bytes; a save or retry that finds
    its step committed refuses with ArtifactCommittedError and changes no name."""
    s, now = _scenario(ctx), _now(ctx)
    for who, log, seen in _logs(ctx):
        for iteration in seen.iterations():
            if not seen.committed(iteration):
                continue
            ctx.exercised()
            for path, data in seen.committed_files(iteration).items():
                if data is not None and now.files.get(path) != data:
                    raise GuaranteeViolation(f"committed artifact file {path} changed or vanished")
            where = f"{ARTIFACTS_ROOT}/{iteration_name(iteration)}"
            touched = [
                r
                for r in _changing(log)
                if any(p == where or p.startswith(where + "/") for p in touched_paths(r))
            ]
            if touched:
                raise GuaranteeViolation(
                    f"{who} touched committed artifact iter {iteration}: {_describe(touched)}"
                )
        if not seen.committed(s.target):
            continue
        result = s.last_run if who == "the save" else _recovery(ctx).retry
        if who == "the save" and result is None:
            continue  # crashed before it ended; the operations above were judged
        if result is None or not isinstance(result.error, ArtifactCommittedError):
            error = None if result is None else result.error
            raise GuaranteeViolation(
                f"{who} found iter {s.target} committed but did not refuse with "
                f"ArtifactCommittedError (ended {error!r})"
            )


def cadence_artifact_kept_when_validation_ran(ctx: CheckContext) -> None:
    """ART-CADENCE-KEPT: once the validation after a cadence artifact was called, the
    artifact is committed and intact."""
    s = _scenario(ctx)
    if s.validation != "after" or not s.calls:
        return
    ctx.exercised()
    ended = s.last_run
    failed_wrongly = ended is not None and (
        ended.final_state != "validation_failed"
        or not isinstance(ended.error, ValidationFailedError)
    )
    if "failed" in s.calls and ended is not None and failed_wrongly:
        raise GuaranteeViolation(
            f"the validation after the artifact failed, yet the save ended "
            f"{ended.final_state} ({ended.error!r}), not ValidationFailedError"
        )
    problem = _now(ctx).problem(s.target, s.components, s.plan_files)
    if problem is not None:
        raise GuaranteeViolation(
            f"the validation after the artifact ran ({s.calls}), yet the artifact is lost: "
            f"{problem}"
        )


def validation_artifact_only_after_success(ctx: CheckContext) -> None:
    """ART-EVALUATE-FIRST: an artifact requested by validation alone is committed only after
    its evaluation succeeded, with exactly its metrics; a failed evaluation writes nothing.
    Any other artifact records no metrics."""
    s, now = _scenario(ctx), _now(ctx)
    manifest = now.manifest(s.target)
    new = manifest is not None and not _before(ctx).committed(s.target)
    if s.validation != "first":
        if new and manifest is not None:
            ctx.exercised()
            if manifest.get("metrics") is not None:
                raise GuaranteeViolation(f"a non-validation artifact records {manifest['metrics']}")
        return
    runs = [("the save", tuple(s.calls), ctx.io_log)]
    if ctx.phase == "recovered":
        recovery = _recovery(ctx)
        runs.append(("the retry", recovery.retry_calls, recovery.retry_io))
    for who, calls, log in runs:
        if "failed" in calls:
            ctx.exercised()
            if _artifact_writes(log):
                raise GuaranteeViolation(
                    f"{who}'s evaluation failed, yet it wrote: {_describe(_artifact_writes(log))}"
                )
    if not new or manifest is None:
        return
    ctx.exercised()
    if not any("ok" in calls for _, calls, _ in runs):
        raise GuaranteeViolation("the artifact is committed, but no evaluation succeeded")
    if manifest.get("metrics") != expected_metrics(s.target):
        raise GuaranteeViolation(
            f"the manifest records {manifest.get('metrics')}, the evaluation returned "
            f"{expected_metrics(s.target)}"
        )


def resume_never_adopts_an_artifact(ctx: CheckContext) -> None:
    """ART-RESUME-NEVER-ADOPTS: resume=auto adopts the newest full checkpoint (or starts
    fresh without one), always one the setup committed, never an artifact; it refuses exactly
    when an artifact directory holding a manifest (committed, or damaged: fail closed) is newer
    than that checkpoint."""
    s = _scenario(ctx)
    for seen in _recovery(ctx).resumes:
        ctx.exercised()
        verified = seen.seen.verified(s.checkpoint_files)
        newest = max(verified) if verified else None
        marked = [
            i
            for i in seen.artifacts.iterations()
            if seen.artifacts.manifest_raw(i) is not None
            or f"{iteration_name(i)}/{MANIFEST}" in seen.artifacts.files
        ]
        must_refuse = bool(marked) and (newest is None or max(marked) > newest)
        if seen.refused is not None:
            if not must_refuse:
                raise GuaranteeViolation(
                    f"resume refused although no artifact holding a manifest is newer than the "
                    f"newest full checkpoint {newest}: {seen.refused}"
                )
            continue
        if must_refuse:
            raise GuaranteeViolation(
                f"resume=auto did not refuse although artifact iter {max(marked)} (holding a "
                f"manifest) is newer than the newest full checkpoint {newest}"
            )
        result = seen.result
        assert result is not None
        if result.source is not None and "checkpoint_artifacts" in result.source:
            raise GuaranteeViolation(f"resume=auto adopted the artifact {result.source}")
        expected = max(verified) if verified else 0
        committed: set[int] = ctx.memo(
            "setup_checkpoints", lambda: set(DiskView.of(ctx.before).verified(s.checkpoint_files))
        )
        if result.step and result.step not in committed:
            raise GuaranteeViolation(
                f"resume=auto adopted step {result.step}, which the setup never committed as a "
                f"full checkpoint (it committed {sorted(committed)})"
            )
        if result.step != expected:
            raise GuaranteeViolation(
                f"resume=auto adopted step {result.step}, expected the full checkpoint {expected}"
            )


def retry_finishes_the_artifact(ctx: CheckContext) -> None:
    """ART-RETRY-FINISHES: the retry commits the artifact, or refuses because it is
    committed (a damaged one found before the save is refused and left as it was)."""
    s, recovery, now = _scenario(ctx), _recovery(ctx), _now(ctx)
    ctx.exercised()
    seen, retry = recovery.retry_seen, recovery.retry
    if _damaged_before(ctx, s.target) or s.target in _foreign(seen):
        if not isinstance(retry.error, CheckpointCorruptError):
            raise GuaranteeViolation(f"the retry at a damaged artifact ended {retry.error!r}")
        if now.files != seen.files:
            raise GuaranteeViolation("the retry at a damaged artifact changed it")
        return
    if seen.committed(s.target):
        if not isinstance(retry.error, ArtifactCommittedError):
            raise GuaranteeViolation(f"the retry at a committed step ended {retry.error!r}")
    elif s.validation == "first" and s.retry_fails:
        if retry.final_state != "evaluation_failed" or now.manifest_raw(s.target) is not None:
            raise GuaranteeViolation(f"the failing retry ended {retry.final_state}")
        return
    elif retry.final_state not in ("committed", "validation_failed"):
        raise GuaranteeViolation(f"the retry ended {retry.final_state}: {retry.error!r}")
    problem = now.problem(s.target, s.components, s.plan_files)
    if problem is not None:
        raise GuaranteeViolation(f"after the retry, {problem}")
    if retry.final_state != "refused" and now.temporaries():
        raise GuaranteeViolation(f"writer temporaries left after the retry: {now.temporaries()}")


def _foreign(view: ArtifactView) -> set[int]:
    return {i for i in view.iterations() if f"{iteration_name(i)}/{MANIFEST}" in view.files}
