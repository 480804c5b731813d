"""The loop's evaluation callable, and how a validation transaction calls it.

The training loop registers ``evaluate(step) -> Mapping[str, float]``; statecraft decides
when it runs (``validation.every``, the final step) and in which order relative to the save
(the ``validation`` and ``artifact`` tables). An exception from the callable, or a return
value that is not a mapping of metric names to finite numbers, is a failed evaluation:
:class:`~statecraft.errors.ValidationFailedError`, chained to the cause.

Example:
    >>> run_evaluation(Evaluation(lambda step: {"loss": 0.5}, source="heldout"), 10)
    {'loss': 0.5}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import attrs

from statecraft.checkpoint.kernel.validation_records import metrics_problems
from statecraft.errors import TrackingError, ValidationFailedError

__all__ = ["Evaluation", "Evaluator", "format_metrics", "run_evaluation"]

#: the loop's evaluation: gets the step, returns metric name -> number; raising is failure.
Evaluator = Callable[[int], Mapping[str, float]]


def _callable(_: object, attribute: attrs.Attribute[Evaluator], value: Evaluator) -> None:
    if not callable(value):
        raise TrackingError(
            f"the evaluation must be callable as evaluate(step) -> {{name: number}}; got "
            f"{type(value).__name__}"
        )


def _source(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    if type(value) is not str or not value:
        raise TrackingError(
            f"the evaluation's source must be a non-empty str naming the held-out data; got "
            f"{value!r}"
        )


@attrs.frozen
class Evaluation:
    """A registered evaluation: the callable and the name of what it evaluates on (part of
    the validation identity recorded in ``trainer.pt``)."""

    evaluate: Evaluator = attrs.field(validator=_callable)
    source: str = attrs.field(validator=_source)

    @classmethod
    def of(cls, evaluate: Evaluator, source: str | None = None) -> Evaluation:
        """``source`` defaults to the callable's ``module.qualname``."""
        if source is None:
            module = getattr(evaluate, "__module__", None) or ""
            name = getattr(evaluate, "__qualname__", None) or type(evaluate).__qualname__
            source = f"{module}.{name}" if module else name
        return cls(evaluate, source)


def run_evaluation(
    evaluation: Evaluation, step: int, *, iteration: int | None = None
) -> dict[str, float]:
    """Call the evaluation for ``step`` and return its metrics as a plain dict.

    Args:
        iteration: the pending checkpoint this evaluation decides, for the error.

    Raises:
        ValidationFailedError: the callable raised (chained) or returned bad metrics.
    """
    where = f" of the pending checkpoint iter {iteration}" if iteration is not None else ""
    try:
        metrics = evaluation.evaluate(step)
    except Exception as exc:
        raise ValidationFailedError(
            f"evaluation {evaluation.source!r} at step {step}{where} failed: "
            f"{type(exc).__name__}: {exc}",
            step=step,
            iteration=iteration,
            cause=f"{type(exc).__name__}: {exc}",
        ) from exc
    problems = metrics_problems(metrics)
    if problems:
        raise ValidationFailedError(
            f"evaluation {evaluation.source!r} at step {step}{where} returned bad metrics: "
            + "; ".join(problems)
            + "; return a dict such as {'val_loss': 0.41}",
            step=step,
            iteration=iteration,
            cause="; ".join(problems),
        )
    return dict(metrics)


def format_metrics(metrics: Mapping[str, float] | None) -> str:
    """``name=value, ...`` sorted by name (``%g``-style values), for log lines."""
    return ", ".join(f"{k}={v:.6g}" for k, v in sorted((metrics or {}).items()))
