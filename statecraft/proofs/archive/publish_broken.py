"""The deliberately wrong publish transactions ``specs/publish.toml`` declares (``[[broken]]``):
each returns the scenarios that run one wrong variant, and ``statecraft crashcheck --broken``
fails unless exploring them violates the guarantees the spec says it must."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from statecraft.checkpoint.archive import publish_bindings as publish
from statecraft.checkpoint.archive.declaration import DECLARATION_NAME
from statecraft.checkpoint.kernel.layout import ARTIFACT_MANIFEST_NAME
from statecraft.checkpoint.kernel.machines import load_machine, machine_bindings
from statecraft.engine import Bindings, Machine
from statecraft.proofs.archive.publish_scenarios import PublishScenario, publish_scenarios

__all__ = [
    "declaration_put_unconditionally",
    "declared_taken_for_uncommitted",
    "local_payload_removed",
    "manifest_before_payloads",
    "receipt_before_payloads",
]


def _with(**bindings: Callable[..., Any]) -> Callable[[], Machine]:
    effects = {k: v for k, v in bindings.items() if not k.startswith("observe")}
    observers = {k: v for k, v in bindings.items() if k.startswith("observe")}

    def build() -> Machine:
        merged = machine_bindings("publish").merged(Bindings(effects=effects, observers=observers))
        return Machine(load_machine("publish").table, merged)

    return build


def _scenario(name: str, machine: Callable[[], Machine]) -> list[PublishScenario]:
    base = next(s for s in publish_scenarios() if s.name == name)
    return [attrs.evolve(base, name=f"broken-{name}", machine_factory=machine)]


def _nothing(ctx: Any) -> None:
    """An effect moved elsewhere by the broken variant."""


def receipt_before_payloads() -> list[PublishScenario]:
    """``.uploaded`` written before the payloads are uploaded and verified: a crash in between
    leaves a receipt of an incomplete archive."""

    def receipt_first(ctx: Any) -> None:
        publish.write_receipt(ctx)
        publish.upload_payloads(ctx)

    machine = _with(upload_payloads=receipt_first, write_receipt=_nothing)
    return _scenario("publish-model-artifact", machine)


def manifest_before_payloads() -> list[PublishScenario]:
    """The remote artifact manifest committed before the payloads."""

    def manifest_first(ctx: Any) -> None:
        ctx.destination.bucket.put(ctx.key(ARTIFACT_MANIFEST_NAME), ctx.manifest_bytes)
        publish.upload_payloads(ctx)

    return _scenario("publish-model-artifact", _with(upload_payloads=manifest_first))


def declaration_put_unconditionally() -> list[PublishScenario]:
    """The conditional create dropped: declare PUTs its inventory unconditionally, over a
    different declaration."""

    def overwrite(ctx: Any) -> None:
        ctx.destination.bucket.put(ctx.key(DECLARATION_NAME), ctx.declared.encode())

    return _scenario("different-inventory-declared", _with(declare=overwrite))


def local_payload_removed() -> list[PublishScenario]:
    """A publish that "moves" the artifact: it removes a local payload once archived."""

    def receipt_and_prune(ctx: Any) -> None:
        publish.write_receipt(ctx)
        ctx.artifacts.delete(f"{ctx.iter_dir}/model.pt")

    return _scenario("publish-model-artifact", _with(write_receipt=receipt_and_prune))


def declared_taken_for_uncommitted() -> list[PublishScenario]:
    """An observation that takes a declared (crashed) publish for an uncommitted artifact, so
    the retry refuses instead of resuming."""

    def observe(ctx: Any) -> str:
        label = publish.observe_publish(ctx)
        return "uncommitted" if label == "declared" else label

    return _scenario("publish-model-artifact", _with(observe_publish=observe))
