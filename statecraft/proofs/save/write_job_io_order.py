"""The order of a write job's store operations, read from the crash gate's log: which
operation made a save durable, which belong to its retention or its upload, and the first
operation that comes too early (the checks ``WRITE-JOB-ORDER`` and ``WRITE-JOB-UPLOAD-ORDER``
of :mod:`statecraft.proofs.save.write_job_checks`). Each ``*_problem`` function returns one
line naming the operation (``#index op target``), or ``None``."""

from __future__ import annotations

from collections.abc import Sequence

from statecraft.engine.crash import IoRecord
from statecraft.proofs.oracle import CHECKPOINTS_ROOT, POINTER, iteration_name
from statecraft.proofs.save.write_job_scenarios import JobRun

__all__ = [
    "is_retention_op",
    "iteration_of",
    "paths",
    "retention_order_problem",
    "upload_order_problem",
]

_ROOT = CHECKPOINTS_ROOT + "/"
_DECISION = ".retention-decision.json"


def iteration_of(path: str) -> str | None:
    """``iter_<9 digits>`` a path lies in (or is), relative to the checkpoints root."""
    if not path.startswith(_ROOT):
        return None
    head = path[len(_ROOT) :].split("/", 1)[0]
    return head if head.startswith("iter_") else None


def paths(record: IoRecord) -> tuple[str, ...]:
    if record.op in ("rename", "link"):
        src, _, dst = record.target.partition(" -> ")
        return (src, dst)
    if record.target.startswith("/"):
        return (record.target,)
    return ()  # write / fsync of a handle


def is_retention_op(record: IoRecord, target: int) -> bool:
    """The operation marks, prunes or removes a name of another iteration than ``target``,
    or writes the decision record (or its temporary). Removing a temporary a crashed writer
    left in the root is the save's sweep, not retention."""
    for path in paths(record):
        name = path[len(_ROOT) :] if path.startswith(_ROOT) else ""
        if record.op == "unlink" and "/" not in name and ".tmp-" in name:
            continue
        if name.startswith((_DECISION, "." + _DECISION)):
            return True
        where = iteration_of(path)
        if where is not None and where != iteration_name(target):
            return True
    return False


def _durable_point(log: Sequence[IoRecord], target: int) -> int | None:
    """Index (in ``log``) just past the operation that made the save of ``target`` durable:
    the fsync of the checkpoints directory after the rename onto ``latest_checkpoint.txt``
    (``None`` when the log holds no such pair: the save did not publish the pointer)."""
    pointer = _ROOT + POINTER
    renamed = None
    for k, record in enumerate(log):
        if record.op == "rename" and record.target.endswith(" -> " + pointer):
            renamed = k
        elif renamed is not None and record.op == "fsync_dir" and record.target == CHECKPOINTS_ROOT:
            return k + 1
    return None


def retention_order_problem(log: Sequence[IoRecord], run: JobRun, who: str) -> str | None:
    for k, target in enumerate(run.targets):
        start = run.starts[k]
        end = run.starts[k + 1] if k + 1 < len(run.starts) else None
        window = [r for r in log if r.index >= start and (end is None or r.index < end)]
        first = next((j for j, r in enumerate(window) if is_retention_op(r, target)), None)
        if first is None:
            continue
        durable = _durable_point(window, target)
        saved_ops = [j for j, r in enumerate(window) if not is_retention_op(r, target)]
        if durable is None:
            # The save found iter_N committed with latest naming it (a redone job): its
            # reconcile made it durable; retention must still follow every save operation.
            touching = [
                j
                for j in saved_ops
                if any(iteration_of(p) == iteration_name(target) for p in paths(window[j]))
            ]
            durable = (touching[-1] + 1) if touching else 0
            if run.durable_at[k] is None:
                return (
                    f"{who}: the job of iter {target} ran retention (#{window[first].index} "
                    f"{window[first].op} {window[first].target}) but never reported durable"
                )
        if first < durable:
            r = window[first]
            return (
                f"{who}: the job of iter {target} ran retention operation #{r.index} {r.op} "
                f"{r.target} before its save was durable (latest durably naming iter {target})"
            )
    return None


def _is_upload_op(record: IoRecord, target: int) -> bool:
    """A bucket request, or a write of ``iter_N/.uploaded`` (the receipt or its temporary;
    the save's sweep of a dead writer's temporary is the save's)."""
    if record.op in ("put", "delete"):
        return True
    if record.op not in ("open_write", "rename", "link"):
        return False
    inside = _ROOT + iteration_name(target) + "/"
    return any(p.startswith(inside) and ".uploaded" in p[len(inside) :] for p in paths(record))


def upload_order_problem(log: Sequence[IoRecord], run: JobRun, who: str) -> str | None:
    for k, target in enumerate(run.targets):
        start = run.starts[k]
        end = run.starts[k + 1] if k + 1 < len(run.starts) else None
        window = [r for r in log if r.index >= start and (end is None or r.index < end)]
        uploads = [r for r in window if _is_upload_op(r, target)]
        if not uploads:
            continue
        durable_at = run.durable_at[k]
        if durable_at is None or uploads[0].index < durable_at:
            r = uploads[0]
            return (
                f"{who}: the job of iter {target} sent #{r.index} {r.op} {r.target} before its "
                "save was durable"
            )
        retention = [r for r in window if is_retention_op(r, target)]
        early = [r for r in retention if r.index < uploads[-1].index]
        if early:
            r = early[0]
            return (
                f"{who}: the job of iter {target} ran retention operation #{r.index} {r.op} "
                f"{r.target} before its upload finished (#{uploads[-1].index})"
            )
    return None
