"""The deliberately wrong fetch transactions ``specs/fetch.toml`` declares (``[[broken]]``): each
returns the scenarios that run one wrong variant, and ``statecraft crashcheck --broken`` fails
unless exploring them violates the guarantees the spec says it must."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from typing import Any

import attrs

from statecraft.checkpoint.archive import fetch_bindings as fetch
from statecraft.checkpoint.archive.fetch_bindings import FetchContext
from statecraft.checkpoint.kernel.machines import load_machine, machine_bindings
from statecraft.engine import Bindings, Machine, parse_table
from statecraft.errors import ArchiveError
from statecraft.proofs.archive.fetch_scenarios import FetchScenario, fetch_scenarios
from statecraft.resources import machine_path

__all__ = [
    "existing_destination_replaced",
    "placed_before_verified",
    "sha256_check_skipped",
    "writes_beside_the_destination",
]


def _scenario(name: str, machine: Callable[[], Machine]) -> list[FetchScenario]:
    base = next(s for s in fetch_scenarios() if s.name == name)
    return [attrs.evolve(base, name=f"broken-{name}", machine_factory=machine)]


def _with(
    effects: dict[str, Callable[..., Any]], observers: dict[str, Callable[..., Any]] | None = None
) -> Callable[[], Machine]:
    def build() -> Machine:
        bindings = machine_bindings("fetch").merged(
            Bindings(effects=effects, observers=observers or {})
        )
        return Machine(load_machine("fetch").table, bindings)

    return build


def _swapped() -> Machine:
    data = tomllib.loads(machine_path("fetch").read_text())
    verify = next(t for t in data["transitions"] if t["do"] == "verify_staged")
    place = next(t for t in data["transitions"] if t["do"] == "place_fetched")
    verify["do"], place["do"] = place["do"], verify["do"]
    return Machine(parse_table(data, source="broken fetch table"), machine_bindings("fetch"))


def placed_before_verified() -> list[FetchScenario]:
    """The staged copy renamed into place before it is proven: a tampered payload lands at
    the destination, and the retry finds it placed (refused) instead of failing with no
    destination."""
    return _scenario("tampered-artifact-payload", _swapped)


def _size_only(ctx: FetchContext) -> None:
    for entry in ctx.entries:
        stat = ctx.dst.stat(ctx.staged(entry.path))
        if stat is None or stat.size != entry.size:
            raise ArchiveError(ctx.source(entry.path), "wrong size")


def sha256_check_skipped() -> list[FetchScenario]:
    """A proof that checks sizes only: the same-size tampered payload is placed."""
    return _scenario("tampered-artifact-payload", _with({"verify_staged": _size_only}))


def _replace_existing(ctx: FetchContext) -> None:
    if ctx.dst.stat(ctx.name) is not None:
        ctx.dst.delete_tree(ctx.name)
    ctx.dst.rename_dir(ctx.staged(), ctx.name)


def existing_destination_replaced() -> list[FetchScenario]:
    """An existing destination taken for absent and replaced."""
    machine = _with({"place_fetched": _replace_existing}, {"observe_fetch": lambda ctx: "absent"})
    return _scenario("existing-destination", machine)


def _place_and_note(ctx: FetchContext) -> None:
    fetch.place_fetched(ctx)
    ctx.dst.write_atomic("fetched.txt", f"{ctx.name}\n".encode())


def writes_beside_the_destination() -> list[FetchScenario]:
    """A fetch that also writes a note beside ``dst/<name>`` (a name it does not own)."""
    return _scenario(fetch_scenarios()[0].name, _with({"place_fetched": _place_and_note}))
