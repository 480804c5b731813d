"""The deliberately wrong variants ``specs/incremental_gc.toml`` declares (``[[broken]]``):
each returns the scenarios that run one wrong variant, and ``statecraft crashcheck --broken``
fails unless exploring them violates the guarantees the spec says it must."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import torch
import xxhash

from statecraft.checkpoint.incremental.gc_bindings import GcContext
from statecraft.checkpoint.kernel.machines import load_machine, machine_bindings
from statecraft.engine import Bindings, Machine
from statecraft.proofs.incremental.scenarios import (
    FROZEN_KEY,
    IncrementalScenario,
    incremental_gc_scenarios,
)
from statecraft.proofs.training import expected_payloads, preserved_rng
from statecraft.storage.base import Store
from statecraft.writers.base import Writer
from statecraft.writers.blobs import blob_path, blob_ref, tensor_bytes_view
from statecraft.writers.incremental import DurableBlobs, IncrementalWriter

__all__ = [
    "blob_published_before_durable",
    "gc_trusts_a_stale_reference_count",
    "version_counter_unchanged_check",
]


def _scenario(name: str, **changes: Any) -> list[IncrementalScenario]:
    base = next(s for s in incremental_gc_scenarios() if s.name == name)
    return [attrs.evolve(base, name=f"broken-{name}", **changes)]


# ------------------------------------------------------------------ a stale reference count
def _digests_of(iteration: int) -> list[str]:
    """The blobs iteration ``iteration``'s model.pt names (as its save digests them)."""
    with preserved_rng():
        model = dict(expected_payloads(iteration, with_data=False)["model.pt"]())
    model[FROZEN_KEY] = torch.arange(16, dtype=torch.float32)
    return [xxhash.xxh3_128_hexdigest(tensor_bytes_view(t).data) for t in model.values()]


def _stale_gc(pruned: int, counted: tuple[int, ...]) -> Callable[[], Machine]:
    """A collection that keeps per-blob reference counts in memory, counted when only
    ``counted`` were saved (the later saves' increments were lost), and deletes a blob when
    its count drops to zero as ``pruned`` goes."""
    counts: dict[str, int] = {}
    for iteration in counted:
        for digest in _digests_of(iteration):
            counts[digest] = counts.get(digest, 0) + 1
    for digest in _digests_of(pruned):
        counts[digest] = counts.get(digest, 0) - 1
    dead = sorted(d for d, c in counts.items() if c <= 0)

    def mark(ctx: GcContext) -> None:
        ctx.live = frozenset(counts)

    def sweep(ctx: GcContext) -> None:
        for digest in dead:
            if ctx.store.stat(blob_path(digest)) is not None:
                ctx.store.delete(blob_path(digest))
                ctx.deleted += 1

    def build() -> Machine:
        bindings = machine_bindings("incremental_gc").merged(
            Bindings(effects={"mark_live": mark, "sweep_unreferenced": sweep})
        )
        return Machine(load_machine("incremental_gc").table, bindings)

    return build


def gc_trusts_a_stale_reference_count() -> list[IncrementalScenario]:
    """A collection over reference counts kept in memory that missed the saves after
    iteration 1: pruning iteration 1 drops the shared blob's count to zero and deletes the
    blob iterations 2 and 3 still reference."""
    return _scenario("collect-after-pruning", gc_factory=_stale_gc(pruned=1, counted=(1,)))


# ------------------------------------------------------------------ published before durable
class _EagerWriter(IncrementalWriter):
    """Publishes each blob under its name before its bytes are durable (``defer_sync``: the
    rename may reach the disk before the data), and trusts a blob of the right size."""

    def _externalize(self, store: Store, value: Any, names: dict[str, int]) -> Any:
        if isinstance(value, torch.Tensor) and value.numel():
            data = tensor_bytes_view(value)
            digest = xxhash.xxh3_128_hexdigest(data.data)
            found = store.stat(blob_path(digest))
            if found is None or found.size != len(data):
                with store.open_atomic(blob_path(digest), defer_sync=True) as out:
                    out.write(data.data)
            names[digest] = len(data)
            return blob_ref(value, [(digest, len(data))])
        return super()._externalize(store, value, names)


def blob_published_before_durable() -> list[IncrementalScenario]:
    """Blobs published before they are durable: a power loss keeps the name with torn bytes,
    and the restarted save, finding a blob of the right size, references it."""

    def writer(durable: DurableBlobs) -> Writer:
        return _EagerWriter(min_blob_bytes=1, durable=durable)

    return _scenario("save-then-collect", writer_factory=writer)


# ------------------------------------------------------------------ a version-counter check
def _version_writer_factory() -> Callable[[DurableBlobs], Writer]:
    # the tensor is kept with its record, so its storage (and address) cannot be reused
    memo: dict[tuple[Any, ...], tuple[torch.Tensor, list[tuple[str, int]]]] = {}

    class _VersionWriter(IncrementalWriter):
        """Trusts ``_version`` + data pointer + shape: a tensor seen unchanged by them is
        not digested again and keeps its earlier blobs."""

        def _externalize(self, store: Store, value: Any, names: dict[str, int]) -> Any:
            if isinstance(value, torch.Tensor) and value.numel():
                key = (value.data_ptr(), value._version, tuple(value.shape), value.dtype)
                if key in memo:
                    chunks = memo[key][1]
                    names.update(chunks)
                    return blob_ref(value, chunks)
                ref = super()._externalize(store, value, names)
                memo[key] = (value, [(d, s) for d, s in ref["chunks"]])
                return ref
            return super()._externalize(store, value, names)

    def build(durable: DurableBlobs) -> Writer:
        return _VersionWriter(min_blob_bytes=1, durable=durable)

    return build


def version_counter_unchanged_check() -> list[IncrementalScenario]:
    """An unchanged-check that trusts the version counter: an update through ``.data``
    leaves it as it was, and iteration 3 references the frozen tensor's old blob."""
    return _scenario("in-place-update", writer_factory=_version_writer_factory())
