"""What to keep: retention policies, each one object with one method (Orbax's
``PreservationPolicy`` shape), validated when built.

A policy is asked once per retention pass with every committed full checkpoint that counts
(newest first) and answers which iterations it keeps. Policies only *say* what to keep; the
retention transaction (``machines/retention.toml``) decides what is safe to remove: the newest
committed checkpoint, the one ``latest`` names, pending validations and (with
``require_uploaded``) iterations without an ``.uploaded`` marker are kept whatever a policy says.

::

    LatestN(2)                                   the newest 2
    EveryNSteps(1000)                            every iteration that is a multiple of 1000
    BestN(3, metric="val_loss", mode="min")      the 3 with the lowest recorded val_loss
    AnyOf(LatestN(1), BestN(1, "val_loss"))      kept if any member keeps it
    KeepFn(fn)                                   the reference's keep_fn(iter_names) -> set

Bad values are refused when the policy is built (a negative or zero count, a zero interval, an
unknown mode, an empty metric name), as a :class:`~statecraft.errors.ConfigError` naming the
policy and the field: never at the first prune, hours into a run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol, runtime_checkable

import attrs

from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.errors import ConfigError, ConfigIssue

__all__ = [
    "AnyOf",
    "BestN",
    "EveryNSteps",
    "KeepFn",
    "LatestN",
    "RetentionCandidate",
    "RetentionPolicy",
]


@attrs.frozen
class RetentionCandidate:
    """One committed full checkpoint a policy judges.

    Attributes:
        iteration: its iteration (``iter_<9 digits>``).
        metrics: the validation metrics recorded for it (its evaluated record), or ``None``.
        uploaded: an ``.uploaded`` marker is beside it.
    """

    iteration: int
    metrics: Mapping[str, float] | None = None
    uploaded: bool = False

    @property
    def name(self) -> str:
        return iter_dirname(self.iteration)


@runtime_checkable
class RetentionPolicy(Protocol):
    """Which of ``candidates`` (newest first) to keep.

    Contract: ``keep`` is pure (no I/O, same answer for the same candidates), returns a subset
    of the candidates' iterations, and never raises for well-formed candidates. ``describe``
    is one short phrase (``"latest 2"``) used in logs, ``inspect`` and refusals.
    """

    def keep(self, candidates: Sequence[RetentionCandidate]) -> frozenset[int]: ...

    def describe(self) -> str: ...


def _refuse(policy: str, field: str, found: object, allowed: str) -> ConfigError:
    return ConfigError([ConfigIssue(field, found, allowed)], source=f"retention policy {policy}")


def _positive_int(policy: str, field: str, value: object) -> None:
    if type(value) is not int or value < 1:
        raise _refuse(policy, field, value, "an int >= 1")


@attrs.frozen
class LatestN:
    """Keep the newest ``n`` (``n >= 1``)."""

    n: int

    def __attrs_post_init__(self) -> None:
        _positive_int("LatestN", "n", self.n)

    def keep(self, candidates: Sequence[RetentionCandidate]) -> frozenset[int]:
        newest = sorted((c.iteration for c in candidates), reverse=True)
        return frozenset(newest[: self.n])

    def describe(self) -> str:
        return f"latest {self.n}"


@attrs.frozen
class EveryNSteps:
    """Keep every iteration that is a multiple of ``interval`` (``interval >= 1``)."""

    interval: int

    def __attrs_post_init__(self) -> None:
        _positive_int("EveryNSteps", "interval", self.interval)

    def keep(self, candidates: Sequence[RetentionCandidate]) -> frozenset[int]:
        return frozenset(c.iteration for c in candidates if c.iteration % self.interval == 0)

    def describe(self) -> str:
        return f"every {self.interval} steps"


@attrs.frozen
class BestN:
    """Keep the ``n`` with the best recorded validation ``metric`` (``mode`` ``"min"``: lowest
    is best, ``"max"``: highest). Candidates without the metric are not kept by this policy;
    ties go to the newer iteration."""

    n: int
    metric: str
    mode: str = "min"

    def __attrs_post_init__(self) -> None:
        _positive_int("BestN", "n", self.n)
        if not isinstance(self.metric, str) or not self.metric:
            raise _refuse("BestN", "metric", self.metric, "a non-empty metric name")
        if self.mode not in ("min", "max"):
            raise _refuse("BestN", "mode", self.mode, "'min' or 'max'")

    def keep(self, candidates: Sequence[RetentionCandidate]) -> frozenset[int]:
        scored = [
            (float(c.metrics[self.metric]), c.iteration)
            for c in candidates
            if c.metrics is not None and self.metric in c.metrics
        ]
        sign = 1.0 if self.mode == "min" else -1.0
        scored.sort(key=lambda item: (sign * item[0], -item[1]))
        return frozenset(iteration for _, iteration in scored[: self.n])

    def describe(self) -> str:
        return f"best {self.n} by {self.metric} ({self.mode})"


def _as_tuple(policies: Iterable[RetentionPolicy]) -> tuple[RetentionPolicy, ...]:
    return tuple(policies)


@attrs.frozen
class AnyOf:
    """Keep what any of ``policies`` keeps (at least one policy)."""

    policies: tuple[RetentionPolicy, ...] = attrs.field(converter=_as_tuple)

    def __attrs_post_init__(self) -> None:
        if not self.policies:
            raise _refuse("AnyOf", "policies", [], "at least one policy")
        for i, policy in enumerate(self.policies):
            if not isinstance(policy, RetentionPolicy):
                raise _refuse(
                    "AnyOf", f"policies[{i}]", policy, "a retention policy (keep and describe)"
                )

    def keep(self, candidates: Sequence[RetentionCandidate]) -> frozenset[int]:
        kept: frozenset[int] = frozenset()
        for policy in self.policies:
            kept |= policy.keep(candidates)
        return kept

    def describe(self) -> str:
        return "any of (" + ", ".join(p.describe() for p in self.policies) + ")"


@attrs.frozen
class KeepFn:
    """The reference's hook: ``fn(iter_names) -> set`` of the ``iter_<9 digits>`` names to keep
    (names it returns that are not candidates are ignored; anything but a set, frozenset,
    list or tuple of names is refused at the pass, naming the function)."""

    fn: Callable[[list[str]], object]
    label: str = "keep_fn"

    def __attrs_post_init__(self) -> None:
        if not callable(self.fn):
            raise _refuse("KeepFn", "fn", self.fn, "a callable keep_fn(iter_names) -> set")

    def keep(self, candidates: Sequence[RetentionCandidate]) -> frozenset[int]:
        by_name = {c.name: c.iteration for c in candidates}
        chosen = self.fn(sorted(by_name, reverse=True))
        if not isinstance(chosen, (set, frozenset, list, tuple)) or not all(
            isinstance(n, str) for n in chosen
        ):
            raise _refuse(
                "KeepFn",
                f"{self.label}(...) result",
                chosen,
                "a set of iter_<9 digits> names to keep",
            )
        return frozenset(by_name[n] for n in chosen if n in by_name)

    def describe(self) -> str:
        return self.label
