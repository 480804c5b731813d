"""What is stored with the data cursor: the source's identity (:class:`SourceIdentity`, a
versioned record), built from the tracked data source and what the loop declares
(:class:`DataIdentity`).

A tracked data source is one of three kinds:

``stateful_dataloader``
    a ``torchdata.stateful_dataloader.StatefulDataLoader``: its ``state_dict`` is the exact
    cursor (multi-worker, sampler and generator included); its batch size, and a
    ``DistributedSampler``'s seed and sharding, are read from it.
``state_dict``
    any other object with ``state_dict`` / ``load_state_dict`` (your own cursor).
``no_cursor``
    an iterable without them (a plain ``torch.utils.data.DataLoader``, an ``IterableDataset``):
    nothing can say where it was, so a resume restarts it (``data.cursor_resume=auto``) or the
    first save is refused (``strict``).

The fingerprint comes from ``fingerprint()`` on the source, or on its ``dataset`` (a loader's);
it returns a :class:`~statecraft.checkpoint.data.fingerprint.Fingerprint` or an opaque ``str``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from statecraft.checkpoint.data.fingerprint import Fingerprint

__all__ = [
    "IDENTITY_VERSION",
    "NO_CURSOR_FIX",
    "DataIdentity",
    "SourceIdentity",
    "describe_source",
    "has_cursor",
]

IDENTITY_VERSION = 1
NO_CURSOR_FIX = (
    "wrap the dataset in torchdata.stateful_dataloader.StatefulDataLoader (a drop-in "
    "DataLoader with state_dict/load_state_dict), or track a data source with state_dict() "
    "and load_state_dict()"
)
_KEYS = frozenset({"version", "kind", "exact", "mode", "fingerprint", "seed", "sharding",
                   "world_size", "batch_size", "grad_accum"})  # fmt: skip
MODES = ("auto", "strict", "off")


def has_cursor(source: Any) -> bool:
    """``source`` has callable ``state_dict`` and ``load_state_dict``."""
    return all(callable(getattr(source, m, None)) for m in ("state_dict", "load_state_dict"))


@attrs.frozen(kw_only=True)
class DataIdentity:
    """What the loop declares about its data source, beyond what statecraft reads from it
    (``Checkpointer.track(data=..., data_identity=DataIdentity(...))``). A field left ``None``
    is read from the source where it can be (a loader's batch size, a ``DistributedSampler``'s
    seed).

    Attributes:
        grad_accum: micro-batches per optimizer step (geometry: changing it changes which
            sample the next step starts at).
        batch_size: samples per micro-batch.
        seed: the data order's seed.
        sharding: how ranks split the data (a short name, e.g. ``"rank-strided"``).
    """

    grad_accum: int | None = None
    batch_size: int | None = None
    seed: int | None = None
    sharding: str | None = None

    def __attrs_post_init__(self) -> None:
        for name in ("grad_accum", "batch_size", "seed"):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value < 0):
                raise TypeError(f"DataIdentity({name}=...): expected an int >= 0; got {value!r}")
        if self.sharding is not None and not isinstance(self.sharding, str):
            raise TypeError(f"DataIdentity(sharding=...): expected a str; got {self.sharding!r}")


@attrs.frozen(kw_only=True)
class SourceIdentity:
    """The identity stored with the cursor in ``data.pt`` (rank 0's source; every rank's
    fingerprint must agree).

    Attributes:
        kind: ``stateful_dataloader``, ``state_dict`` or ``no_cursor``.
        exact: the cursor can resume at the exact next item (the source has a cursor).
        mode: ``data.cursor_resume`` of the run that saved it.
        fingerprint: the source's semantic identity, ``None`` when it declares none.
        seed / sharding / world_size / batch_size / grad_accum: the order and geometry.
    """

    kind: str
    exact: bool
    mode: str
    fingerprint: Fingerprint | None
    seed: int | None
    sharding: str | None
    world_size: int
    batch_size: int | None
    grad_accum: int | None

    def to_payload(self) -> dict[str, Any]:
        """The ``weights_only``-safe payload (the ``source`` key of ``data.pt``)."""
        return {
            "version": IDENTITY_VERSION,
            "kind": self.kind,
            "exact": self.exact,
            "mode": self.mode,
            "fingerprint": None if self.fingerprint is None else self.fingerprint.to_payload(),
            "seed": self.seed,
            "sharding": self.sharding,
            "world_size": self.world_size,
            "batch_size": self.batch_size,
            "grad_accum": self.grad_accum,
        }

    @classmethod
    def from_payload(cls, payload: object) -> tuple[SourceIdentity | None, list[str]]:
        """The identity in ``payload``, or ``None`` and the problem lines (each ``source.``
        rooted)."""
        if not isinstance(payload, dict):
            return None, [f"source: expected a dict; got {type(payload).__name__}"]
        problems = [f"source: unexpected key {k!r}" for k in payload if k not in _KEYS]
        if payload.get("version") != IDENTITY_VERSION:
            problems.append(
                f"source.version: expected {IDENTITY_VERSION}; got {payload.get('version')!r}; a "
                "newer writer made this file, read it with the statecraft release that wrote it"
            )
        if payload.get("kind") not in ("stateful_dataloader", "state_dict", "no_cursor"):
            problems.append(f"source.kind: unknown kind {payload.get('kind')!r}")
        if payload.get("mode") not in MODES:
            problems.append(f"source.mode: expected one of {MODES}; got {payload.get('mode')!r}")
        if type(payload.get("exact")) is not bool:
            problems.append(f"source.exact: expected a bool; got {payload.get('exact')!r}")
        world_size = payload.get("world_size")
        if type(world_size) is not int or world_size < 1:
            problems.append(f"source.world_size: expected an int >= 1; got {world_size!r}")
        for key in ("seed", "batch_size", "grad_accum"):
            value = payload.get(key)
            if value is not None and type(value) is not int:
                problems.append(f"source.{key}: expected an int or None; got {value!r}")
        if payload.get("sharding") is not None and not isinstance(payload.get("sharding"), str):
            problems.append(f"source.sharding: expected a str or None; got {payload['sharding']!r}")
        fingerprint = None
        if payload.get("fingerprint") is not None:
            fingerprint, bad = Fingerprint.from_payload(payload["fingerprint"])
            problems += [f"source.fingerprint: {line}" for line in bad]
        if problems:
            return None, problems
        return cls(
            kind=payload["kind"],
            exact=payload["exact"],
            mode=payload["mode"],
            fingerprint=fingerprint,
            seed=payload.get("seed"),
            sharding=payload.get("sharding"),
            world_size=payload["world_size"],
            batch_size=payload.get("batch_size"),
            grad_accum=payload.get("grad_accum"),
        ), []

    def geometry(self) -> Mapping[str, Any]:
        """The fields whose change changes what "the next sample" means, by name."""
        return {
            "batch_size": self.batch_size,
            "grad_accum": self.grad_accum,
            "seed": self.seed,
            "sharding": self.sharding,
        }


def describe_source(
    source: Any, *, declared: DataIdentity | None, world_size: int, mode: str = "auto"
) -> SourceIdentity:
    """The identity of the tracked ``source`` at ``world_size`` under ``mode``.

    Raises:
        TypeError: ``fingerprint()`` returned something other than a ``Fingerprint`` or str.
    """
    declared = declared or DataIdentity()
    kind = _kind(source)
    loader_batch, loader_seed, loader_sharding = _loader_facts(source)
    return SourceIdentity(
        kind=kind,
        exact=kind != "no_cursor",
        mode=mode,
        fingerprint=_fingerprint(source),
        seed=declared.seed if declared.seed is not None else loader_seed,
        sharding=declared.sharding if declared.sharding is not None else loader_sharding,
        world_size=world_size,
        batch_size=declared.batch_size if declared.batch_size is not None else loader_batch,
        grad_accum=declared.grad_accum,
    )


def _kind(source: Any) -> str:
    if not has_cursor(source):
        return "no_cursor"
    module = type(source).__module__
    if module.startswith("torchdata.stateful_dataloader"):
        return "stateful_dataloader"
    return "state_dict"


def _loader_facts(source: Any) -> tuple[int | None, int | None, str | None]:
    """A loader's batch size, its sampler's configured seed and its sharding (``None`` where
    unknown). Only a seed that the saved cursor does not carry counts: a
    ``DistributedSampler``'s ``seed`` (its order is ``seed + epoch``, not state). A generator's
    seed is not read: its state is part of the cursor a ``StatefulDataLoader`` restores, so an
    unseeded loader still resumes exactly."""
    batch = getattr(source, "batch_size", None)
    sampler = getattr(source, "sampler", None)
    seed: int | None = None
    sharding: str | None = None
    if sampler is not None and type(getattr(sampler, "num_replicas", None)) is int:
        if type(getattr(sampler, "seed", None)) is int:
            seed = sampler.seed
        sharding = f"{type(sampler).__name__}(shuffle={getattr(sampler, 'shuffle', None)})"
    return (batch if type(batch) is int else None), seed, sharding


def _fingerprint(source: Any) -> Fingerprint | None:
    for owner in (source, getattr(source, "dataset", None)):
        declare = getattr(owner, "fingerprint", None)
        if owner is None or not callable(declare):
            continue
        value = declare()
        if isinstance(value, Fingerprint):
            return value
        if isinstance(value, str):
            return Fingerprint.opaque(value)
        raise TypeError(
            f"{type(owner).__name__}.fingerprint() returned {type(value).__name__}; return a "
            "statecraft.checkpoint.data.Fingerprint or a str"
        )
    return None
