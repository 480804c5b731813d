"""The deliberately wrong remote prunes ``specs/archive_prune.toml`` declares (``[[broken]]``):
each returns the scenarios that run one wrong variant, and ``statecraft crashcheck --broken``
fails unless exploring them violates the guarantees the spec says it must."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from typing import Any

import attrs

from statecraft.checkpoint.archive.remote_prune_bindings import RemotePruneContext, _delete
from statecraft.checkpoint.kernel.machines import load_machine, machine_bindings
from statecraft.engine import Bindings, Machine, parse_table
from statecraft.proofs.archive.prune_scenarios import (
    ArchivePruneScenario,
    archive_prune_scenarios,
)
from statecraft.proofs.archive.upload_scenarios import REMOTE_PREFIX
from statecraft.resources import machine_path

__all__ = [
    "delete_by_substring",
    "payloads_before_the_commit_record",
    "rerun_takes_unpublished_for_done",
]


def _with(**effects: Callable[[Any], None]) -> Callable[[], Machine]:
    def build() -> Machine:
        bindings = machine_bindings("archive_prune").merged(Bindings(effects=effects))
        return Machine(load_machine("archive_prune").table, bindings)

    return build


def _scenario(name: str, machine: Callable[[], Machine]) -> list[ArchivePruneScenario]:
    base = next(s for s in archive_prune_scenarios() if s.name == name)
    return [attrs.evolve(base, name=f"broken-{name}", machine_factory=machine)]


def _payloads_first(ctx: RemotePruneContext) -> None:
    """Broken unpublish: every payload is deleted, then the commit record."""
    for key in ctx.object_keys():
        if key != ctx.manifest_key:
            _delete(ctx, key)
    _delete(ctx, ctx.manifest_key)


def payloads_before_the_commit_record() -> list[ArchivePruneScenario]:
    """A prune that deletes the payloads before the commit record: a crash in between leaves a
    published iteration naming missing objects."""
    return _scenario("prune-published-iteration", _with(unpublish=_payloads_first))


def _by_substring(ctx: RemotePruneContext) -> None:
    """Broken delete_objects: every key of the archive whose path contains ``/iter_N/``."""
    name = ctx.key_prefix.rpartition("/")[2]
    for key in ctx.bucket.list(f"{REMOTE_PREFIX}/"):
        if f"/{name}/" in key:
            _delete(ctx, key)


def delete_by_substring() -> list[ArchivePruneScenario]:
    """A prune that finds the iteration's keys by substring takes the artifact of the same
    iteration (``checkpoint_artifacts/iter_N/``) and other trees with it."""
    return _scenario("prune-published-iteration", _with(delete_objects=_by_substring))


def _recover_unpublished_as_done() -> Machine:
    data: dict[str, Any] = tomllib.loads(machine_path("archive_prune").read_text())
    data["recover"]["unpublished"] = "deleted"
    table = parse_table(data, source="broken archive_prune table")
    return Machine(table, machine_bindings("archive_prune"))


def rerun_takes_unpublished_for_done() -> list[ArchivePruneScenario]:
    """A rerun that finds the commit record gone takes the prune for finished: the objects a
    crashed prune left after unpublishing stay forever."""
    return _scenario("collect-unpublished-remainder", _recover_unpublished_as_done)
