"""``statecraft bench validation``: what a durable validation and a partial artifact cost at
one step boundary, against a plain full save of the same step in the same process.

Each repeat runs three real ``Checkpointer.step_end()`` calls (interleaved in a rotating
order, each into a fresh output root, the same model: float32 parameters plus an SGD
optimizer with momentum state):

- **save**: ``save_every=1``: one full checkpoint (the baseline);
- **durable validation**: ``save_every=1``, ``validation.every=1``,
  ``validation.save_checkpoint=true`` and a no-op evaluation: the evaluation-pending
  checkpoint, the evaluated record and the published record (the validation machine);
- **model-only artifact**: ``save_every=1``, ``checkpoint_components=[model]``: the artifact
  machine (the optimizer state is not written).

Reported: the median seconds of each, the ratios to the save, and the durable validation's
extra milliseconds (its two exclusive-create records and the stage reads). Nothing asserts a
speed; ``tests/cli/test_bench.py`` checks the shape of the output.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

from statecraft.cli.bench.common import MIB, bench_root, build_model, check_positive, scratch
from statecraft.cli.bench.figures import Figure, FigureRun, Measured, paired, size_text

__all__ = ["measure_validation", "run_bench_validation"]

_KNOBS: dict[str, dict[str, Any]] = {
    "save": {},
    "durable_validation": {"validation": {"every": 1, "save_checkpoint": True}},
    "artifact_model": {"checkpoint_components": ["model"]},
}


def _one_boundary(output_root: str, size_mib: int, knobs: dict[str, Any]) -> float:
    """Seconds of the first ``step_end()`` (a due save) of a fresh run with ``knobs``."""
    import torch

    from statecraft import CheckpointConfig, Checkpointer, Outcome, RunIdentity

    model = build_model(size_mib, fill=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _touch(model)
    optimizer.step()  # momentum buffers: the optimizer state is as large as the model
    config = CheckpointConfig.from_dict(
        {"resume": "off", "save_every": 1, "save_async": False, "keep_optim_last": 0, **knobs}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the partial plan's warning
        ckpt = Checkpointer(
            config, run=RunIdentity("bench", "validation", "run"), output_root=output_root
        )
    ckpt.track(model=model, optimizer=optimizer)
    ckpt.validate_with(lambda step: {"val_loss": 0.0}, source="bench")
    ckpt.resume()
    ckpt.record(Outcome.APPLIED)
    started = time.perf_counter()
    end = ckpt.step_end()
    seconds = time.perf_counter() - started
    ckpt.close()
    if end.saved is None and end.artifact is None:  # pragma: no cover - every knob set saves
        raise RuntimeError(f"bench validation: step_end saved nothing with {knobs}")
    return seconds


def _touch(model: Any) -> None:
    """Give every parameter a gradient (the momentum buffers then exist after one step)."""
    for p in model.parameters():
        p.grad = p.detach().clone()


def measure_validation(
    *, size_mib: int, repeat: int, directory: str | None = None
) -> dict[str, Any]:
    """Interleave ``repeat`` runs of each boundary kind; medians, ratios to the plain save.

    Raises:
        StatecraftError: ``size_mib`` or ``repeat`` is not positive.
    """
    check_positive("bench validation", size_mib=size_mib, repeat=repeat)
    samples: dict[str, list[float]] = {name: [] for name in _KNOBS}
    with bench_root(directory) as root:
        names = list(_KNOBS)
        for run in range(repeat):  # the order rotates: none always follows another's writeback
            for name in names[run % len(names) :] + names[: run % len(names)]:
                with scratch(root, f"{name}-{run}") as where:
                    samples[name].append(_one_boundary(where, size_mib, _KNOBS[name]))
    median: Callable[[list[float]], float] = statistics.median
    seconds = {name: median(values) for name, values in samples.items()}
    return {
        "size_mib": size_mib,
        "state_bytes": 2 * size_mib * MIB,
        "repeat": repeat,
        "seconds": seconds,
        "samples": samples,
        "ratios": {
            "durable_validation/save": seconds["durable_validation"] / seconds["save"],
            "artifact_model/save": seconds["artifact_model"] / seconds["save"],
        },
        "durable_validation_extra_ms": 1000 * (seconds["durable_validation"] - seconds["save"]),
    }


def format_validation(data: dict[str, Any]) -> str:
    """The human table of :func:`measure_validation`'s result."""
    s, r = data["seconds"], data["ratios"]
    lines = [
        f"model {data['size_mib']} MiB + SGD momentum {data['size_mib']} MiB, median of "
        f"{data['repeat']} interleaved runs",
        "",
        f"{'one step_end() that saves':<44}{'seconds':>9}{'x save':>9}",
        f"{'full checkpoint (save_every)':<44}{s['save']:>9.3f}{1.0:>9.2f}",
        f"{'durable validation (pending -> published)':<44}{s['durable_validation']:>9.3f}"
        f"{r['durable_validation/save']:>9.2f}",
        f"{'model-only artifact':<44}{s['artifact_model']:>9.3f}{r['artifact_model/save']:>9.2f}",
        "",
        f"durable validation adds {data['durable_validation_extra_ms']:.1f} ms to the save",
    ]
    return "\n".join(lines)


def run_bench_validation(args: argparse.Namespace) -> int:
    """``statecraft bench validation``: print :func:`measure_validation` as a table or JSON."""
    from statecraft.cli.envelope import emit

    data = measure_validation(size_mib=args.size_mib, repeat=args.repeat, directory=args.dir)
    return emit("bench validation", as_json=args.json, data=data, text=format_validation(data))


def _versus_save(name: str) -> Callable[[FigureRun], Measured]:
    """Per round: the ``name`` boundary's seconds / the plain save's (one run serves both)."""

    def run(ctx: FigureRun) -> Measured:
        mib = ctx.size_mib(4, 64)
        data = ctx.once(
            f"validation:{mib}",
            lambda: measure_validation(size_mib=mib, repeat=ctx.repeat, directory=ctx.root),
        )
        samples = data["samples"]
        return Measured(paired(samples[name], samples["save"]), size_text(mib))

    return run


FIGURES = [  # no bar is declared for these: reported, not judged
    Figure("durable validation", "a full save", None, "lower", _versus_save("durable_validation")),
    Figure("model-only artifact", "a full save", None, "lower", _versus_save("artifact_model")),
]
