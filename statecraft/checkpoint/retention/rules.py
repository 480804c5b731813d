"""The retention plan and the pure decision: which committed full checkpoints stay whole,
which lose their optimizer state, which are deleted.

The policies (:mod:`statecraft.checkpoint.retention.policies`) only say what they would keep;
:func:`decide_retention` applies the rules that make a prune safe whatever a policy says:

- the newest committed checkpoint, the newest one that still holds its optimizer, the one
  ``latest_checkpoint.txt`` names and (with ``require_uploaded``) every one without
  ``iter_N/.uploaded`` are kept whole (never pruned, never deleted);
- the model policy picks which iterations survive at all (``DELETE`` the rest);
- among the survivors that still hold their optimizer, the optimizer policy picks which keep
  it (``WEIGHTS_ONLY`` the rest); a weights-only survivor stays weights-only (a marker is
  never withdrawn).

Nothing here reads or writes storage; the retention transaction
(:mod:`statecraft.checkpoint.retention.bindings`) scans the disk, calls it and acts.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

import attrs

from statecraft.checkpoint.kernel.retention_records import DecisionRow, RetentionAction
from statecraft.checkpoint.retention.policies import (
    AnyOf,
    LatestN,
    RetentionCandidate,
    RetentionPolicy,
)
from statecraft.errors import ConfigError, ConfigIssue

if TYPE_CHECKING:
    from statecraft.checkpoint.config import CheckpointConfig

__all__ = [
    "DEFAULT_OPTIMIZER_NOTICE",
    "KEPT_AS_LATEST",
    "KEPT_AS_NEWEST",
    "KEPT_AS_NEWEST_RESUMABLE",
    "KEPT_NOT_UPLOADED",
    "RetentionPlan",
    "decide_retention",
]

KEPT_AS_NEWEST = "newest committed"
KEPT_AS_NEWEST_RESUMABLE = "newest with optimizer"
KEPT_AS_LATEST = "named by latest"
KEPT_NOT_UPLOADED = "not uploaded"

#: what the first retention pass of a run says when ``keep_optim_last`` is left at its default
DEFAULT_OPTIMIZER_NOTICE = (
    "retention: by default only the newest checkpoint keeps its optimizer state; every older "
    "one becomes weights-only (optim.pt removed: it still loads with load_weights, it is no "
    "longer a resume source). This is keep_optim_last=null (resolves to 1); set "
    "keep_optim_last=0 to keep every optimizer, or keep_optim_last=N to keep the newest N"
)


def _policy_or_none(field: str, value: object) -> RetentionPolicy | None:
    if value is not None and not isinstance(value, RetentionPolicy):
        raise ConfigError(
            [ConfigIssue(field, value, "a retention policy (keep and describe) or None")],
            source="RetentionPlan",
        )
    return value


@attrs.frozen
class RetentionPlan:
    """What one retention pass applies after a save is durable.

    Attributes:
        optimizer: which committed iterations keep their optimizer state (``None``: all).
        model: which committed iterations survive at all (``None``: all).
        require_uploaded: only iterations holding ``iter_N/.uploaded`` are pruned or deleted
            (the only copy is never removed).
        notice: said once, at the first pass of a run over a checkpoints root (``""``: none);
            :meth:`from_config` sets it when the default ``keep_optim_last=null`` resolves to
            1, so a run learns that older checkpoints lose their optimizer state, and the knob.

    Raises:
        ConfigError: a policy is not a :class:`RetentionPolicy`, or ``require_uploaded`` is
            not a bool.

    Example:
        >>> RetentionPlan(optimizer=LatestN(1)).describe()
        'optimizer: latest 1; model: keep all'
    """

    optimizer: RetentionPolicy | None = None
    model: RetentionPolicy | None = None
    require_uploaded: bool = False
    notice: str = attrs.field(default="", kw_only=True, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        _policy_or_none("optimizer", self.optimizer)
        _policy_or_none("model", self.model)
        if type(self.require_uploaded) is not bool:
            raise ConfigError(
                [ConfigIssue("require_uploaded", self.require_uploaded, "true or false")],
                source="RetentionPlan",
            )

    @classmethod
    def from_config(cls, config: CheckpointConfig) -> RetentionPlan:
        """The plan of the knobs: ``keep_optim_last`` (``null`` resolves to 1 for a local
        primary; 0 keeps all), ``keep_model_last`` (0 keeps all) and ``upload.enabled``
        (``require_uploaded``)."""
        optim = config.resolved_keep_optim_last()
        model = config.keep_model_last
        by_default = config.keep_optim_last is None and optim == 1
        return cls(
            optimizer=LatestN(optim) if optim > 0 else None,
            model=LatestN(model) if model > 0 else None,
            require_uploaded=bool(config.upload.enabled),
            notice=DEFAULT_OPTIMIZER_NOTICE if by_default else "",
        )

    @property
    def active(self) -> bool:
        """Some policy may prune (a plan with neither policy never removes a committed file)."""
        return self.optimizer is not None or self.model is not None

    def describe(self) -> str:
        """One line for logs, the decision record and ``inspect``."""
        optim = self.optimizer.describe() if self.optimizer is not None else "keep all"
        model = self.model.describe() if self.model is not None else "keep all"
        text = f"optimizer: {optim}; model: {model}"
        return text + ("; require uploaded" if self.require_uploaded else "")


def _keepers(
    policy: RetentionPolicy, candidates: Sequence[RetentionCandidate]
) -> dict[int, list[str]]:
    """Iteration -> the descriptions of the policies that keep it (an ``AnyOf`` names each
    member that keeps it, so ``inspect`` says which one)."""
    out: dict[int, list[str]] = {}
    if isinstance(policy, AnyOf):
        for member in policy.policies:
            for iteration, labels in _keepers(member, candidates).items():
                out.setdefault(iteration, []).extend(labels)
        return out
    known = {c.iteration for c in candidates}
    for iteration in policy.keep(candidates):
        if iteration in known:  # a policy naming a non-candidate is ignored
            out.setdefault(iteration, []).append(policy.describe())
    return out


def decide_retention(
    candidates: Sequence[RetentionCandidate],
    plan: RetentionPlan,
    *,
    newest: int,
    latest: int | None,
    weights_only: Collection[int] = (),
) -> tuple[DecisionRow, ...]:
    """One row per candidate (newest first): keep it whole, remove its optimizer state, or
    delete it (see the module docstring for the rules). Pure: no I/O.

    Args:
        candidates: every committed full checkpoint that counts (``COMMITTED`` /
            ``PUBLISHED`` / ``WEIGHTS_ONLY``; never a pending validation, a corrupt or a
            partial one), in any order.
        newest: the newest committed iteration (normally the save just made durable); kept
            whole whether or not it is a candidate (the newest candidate is kept too).
        latest: the iteration ``latest_checkpoint.txt`` names (``None``: absent or garbage);
            kept whole.
        weights_only: candidates whose optimizer state is already removed (their marker is
            present): judged by the model policy only.

    Raises:
        ConfigError: a policy's ``keep`` refused its result (a ``KeepFn`` returning something
            other than a set of names).
    """
    ordered = sorted(candidates, key=lambda c: c.iteration, reverse=True)
    if not ordered:
        return ()
    marked = set(weights_only)
    protections: dict[int, list[str]] = {}

    def protect(iteration: int | None, label: str) -> None:
        if iteration is not None:
            protections.setdefault(iteration, []).append(label)

    protect(newest, KEPT_AS_NEWEST)
    if ordered[0].iteration != newest:  # the newest candidate is never removed either
        protect(ordered[0].iteration, KEPT_AS_NEWEST)
    resumable = [c.iteration for c in ordered if c.iteration not in marked]
    protect(resumable[0] if resumable else None, KEPT_AS_NEWEST_RESUMABLE)
    protect(latest, KEPT_AS_LATEST)
    if plan.require_uploaded:
        for c in ordered:
            if not c.uploaded:
                protect(c.iteration, KEPT_NOT_UPLOADED)

    model_keep = _keepers(plan.model, ordered) if plan.model is not None else {}
    survivors = [
        c
        for c in ordered
        if plan.model is None or c.iteration in model_keep or c.iteration in protections
    ]
    holders = [c for c in survivors if c.iteration not in marked]
    optim_keep = _keepers(plan.optimizer, holders) if plan.optimizer is not None else {}
    survived = {c.iteration for c in survivors}
    model_text = plan.model.describe() if plan.model is not None else ""

    rows = []
    for c in ordered:
        it = c.iteration
        guards = protections.get(it, [])
        if it not in survived:  # only the model policy deletes
            rows.append(DecisionRow(it, RetentionAction.DELETE, (), f"not kept by {model_text}"))
            continue
        kept_model = model_keep.get(it, [])
        if it in marked:
            kept_by = tuple(guards + kept_model) or ("no model policy",)
            rows.append(
                DecisionRow(
                    it, RetentionAction.WEIGHTS_ONLY, kept_by, "optimizer state already removed"
                )
            )
            continue
        kept_optim = optim_keep.get(it, [])
        if plan.optimizer is None or guards or kept_optim:
            kept_by = tuple(dict.fromkeys(guards + kept_optim + kept_model))
            rows.append(
                DecisionRow(
                    it, RetentionAction.KEEP, kept_by or ("no policy prunes it",), "kept whole"
                )
            )
            continue
        rows.append(
            DecisionRow(
                it,
                RetentionAction.WEIGHTS_ONLY,
                tuple(kept_model) or ("no model policy",),
                f"optimizer state not kept by {plan.optimizer.describe()}",
            )
        )
    return tuple(rows)
