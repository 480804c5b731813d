"""Fixtures of the CLI tests."""

from __future__ import annotations

import gc
import importlib
from collections.abc import Iterator

import pytest

#: modules a first save imports on the way (seconds each, and most of the heap)
_LAZY_HEAVY_IMPORTS = ("statecraft.checkpoint.facade.checkpointer", "torch._dynamo")


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap(request: pytest.FixtureRequest) -> Iterator[None]:
    """The ``statecraft bench`` modules run the benchmarks in this process, and every figure
    calls ``gc.collect()`` between runs: over a test session's heap (torch, dynamo, sympy and
    every module imported so far) each such collection took about a second, most of the
    bench tests' time. Import what the first save imports lazily (the facade, hence
    torch.distributed.checkpoint; torch._dynamo, which the first optimizer imports), then
    move everything that exists to the permanent generation (``gc.freeze``) so those
    collections scan only what the benchmarks allocate; put it back after the module.
    Nothing is asserted about timings, so the figures' shape is unchanged."""
    if not request.module.__name__.rpartition(".")[2].startswith("test_bench"):
        yield
        return
    for name in _LAZY_HEAVY_IMPORTS:
        importlib.import_module(name)
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
