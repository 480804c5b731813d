"""``statecraft bench engine``: microseconds per transition of
:class:`~statecraft.engine.Machine` on chains of no-op effects, against a bare Python call loop,
and the engine's share of one full ``save`` machine run over an in-memory
:class:`~statecraft.storage.SimWorld`.

Example:
    >>> measure_engine(transitions=200)["chains"][0]["us_per_transition"] > 0
    True
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from statecraft.cli.bench.common import check_positive

__all__ = ["ENGINE_TRANSITION_TARGET_US", "measure_engine", "run_bench_engine"]

#: engine overhead per no-op transition, microseconds (issue 34: it was 10.6-18 before a
#: per-run ``transitions`` model was added, 49-76 with it)
ENGINE_TRANSITION_TARGET_US = 20.0

_CHAIN_LENGTHS = (4, 16, 64)  # engine chains: states per run


def _chain_machine(length: int) -> Any:
    from statecraft.engine import Bindings, Machine, parse_table

    states: dict[str, dict[str, Any]] = {f"s{i}": {} for i in range(length)}
    states[f"s{length}"] = {"terminal": True}
    transitions = [{"from": f"s{i}", "do": "noop", "to": f"s{i + 1}"} for i in range(length)]
    table = parse_table(
        {"name": f"chain{length}", "initial": "s0", "states": states, "transitions": transitions},
        source=f"<bench chain of {length}>",
    )
    return Machine(table, Bindings(effects={"noop": _noop}))


def _noop(ctx: Any) -> None:
    return None


def _call_loop(calls: int) -> float:
    """Seconds for ``calls`` bare calls of a no-op function in a Python loop."""
    fn, ctx = _noop, object()
    started = time.perf_counter()
    for _ in range(calls):
        fn(ctx)
    return time.perf_counter() - started


def _sim_save_runs(runs: int) -> dict[str, Any]:
    """Full ``save`` machine runs over an in-memory ``SimWorld`` with tiny payloads: the
    observation, then the run, whose time outside the effects is the engine's."""
    import torch

    from statecraft.checkpoint.kernel.machines import load_machine
    from statecraft.checkpoint.save.bindings import SaveContext, full_save_plan
    from statecraft.storage import SimWorld

    machine = load_machine("save")
    tiny = {"w": torch.zeros(4)}
    payloads: dict[str, Callable[[], Any]] = {
        "model.pt": lambda: tiny,
        "optim.pt": lambda: {"state": {}, "param_groups": []},
        "trainer.pt": lambda: {"optimizer_step": 1},
    }
    wall, observe, effects, transitions = 0.0, 0.0, 0.0, 0
    for _ in range(runs):
        ctx = SaveContext(
            store=SimWorld().local_store("/ckpt"),
            plan=full_save_plan(1, with_data=False),
            payloads=payloads,
        )
        started = time.perf_counter()
        label = machine.observe(ctx)  # what Machine.recover does, with the observation timed
        observed = time.perf_counter()
        result = machine.run(ctx, start=machine.table.recover[label], observed=label)
        ended = time.perf_counter()
        result.raise_for_failure()
        observe += observed - started
        wall += ended - observed
        effects += sum(e.duration_s for e in result.trace)
        transitions += len(result.trace)
    return {
        "runs": runs,
        "transitions_per_run": transitions // runs,
        "observe_us_per_run": 1e6 * observe / runs,
        "us_per_run": 1e6 * wall / runs,
        "effects_us_per_run": 1e6 * effects / runs,
        "engine_us_per_run": 1e6 * (wall - effects) / runs,
        "engine_us_per_transition": 1e6 * (wall - effects) / transitions,
        "engine_share": (wall - effects) / wall if wall > 0 else 0.0,
    }


def measure_engine(*, transitions: int = 20000, sim_runs: int | None = None) -> dict:
    """Engine overhead per transition (no-op chains) and per full simulated ``save`` run.

    Args:
        transitions: transitions to run per chain length.
        sim_runs: full ``save`` runs over a ``SimWorld`` (default: ``transitions // 100``,
            at least 3).

    Raises:
        ConfigError: ``transitions`` is not a positive integer.
    """
    check_positive("statecraft bench engine", transitions=transitions)
    sim_runs = sim_runs if sim_runs is not None else max(3, transitions // 100)
    bare_s = min(_call_loop(transitions) for _ in range(3))
    bare_us = 1e6 * bare_s / transitions
    chains = []
    for length in _CHAIN_LENGTHS:
        machine = _chain_machine(length)
        runs = max(1, transitions // length)
        ctx = object()
        machine.run(ctx)  # warm up
        started = time.perf_counter()
        for _ in range(runs):
            machine.run(ctx)
        seconds = time.perf_counter() - started
        done = runs * length
        us = 1e6 * seconds / done
        chains.append(
            {
                "states": length,
                "runs": runs,
                "transitions": done,
                "us_per_transition": us,
                "us_per_run": 1e6 * seconds / runs,
                "vs_bare_call": us / bare_us if bare_us > 0 else float("inf"),
            }
        )
    return {
        "transitions": transitions,
        "target_us_per_transition": ENGINE_TRANSITION_TARGET_US,
        "bare_call_us": bare_us,
        "chains": chains,
        "sim_save": _sim_save_runs(sim_runs),
    }


def run_bench_engine(args: argparse.Namespace) -> int:
    """``statecraft bench engine``: print :func:`measure_engine` as a table or JSON."""
    from statecraft.cli.bench.report import format_engine
    from statecraft.cli.envelope import emit

    data = measure_engine(transitions=args.transitions)
    return emit("bench engine", as_json=args.json, data=data, text=format_engine(data))
