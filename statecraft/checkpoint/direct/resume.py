"""Resume from a direct object-store primary (``checkpoint_store.backend=object_store``), on
every rank: the iteration latest names in the root (``resume=auto``) or an explicit one
(``resume=s3://bucket/prefix/iter_N``, a copied tree included: every path in a manifest is
relative).

Order (nothing is loaded into a tracked object before every check passed):

1. rank 0 picks the iteration (latest, or the explicit one) and every rank learns it;
2. the manifest is read and checked (schema, iteration); every object it names is HEADed
   (present, its size); the control files of the active generation are read whole and checked
   against their recorded digests (``trainer.pt``, ``data.pt``);
3. the DCP components are read IN PLACE by ranged GETs through ``StoreStorageReader`` (each
   item's xxh3 digest verified; nothing is downloaded to a local cache), into scratch targets
   shaped by the live objects (``dcp_state``; DCP's load planner reshards when the world size
   differs; a pristine optimizer is reset and given its saved group options first);
4. everything lands all or nothing
   (:func:`~statecraft.checkpoint.kernel.loading.load_all_or_nothing`:
   fit checks, then model, optimizer, scheduler, RNG, clocks, loop state; a failure restores
   every object loaded before it).

::

    result = load_direct_checkpoint(tracked, root.store, collective=c, location=root.uri)
    result.step     # the resumed iteration (0: the root holds no latest -> fresh start)

    ckpt.resume()   # Checkpointer with backend=object_store: run_resume -> resume_direct(ckpt)

Failure modes (nothing is loaded): ``ResumeError`` (an explicit ``s3://`` path holds no
manifest, a component does not fit), ``CheckpointCorruptError`` (a malformed manifest, a
missing ``.metadata``, a missing generation or object, a truncated or bit-flipped shard named
with its item, a control file of another digest), ``ObjectRequestError`` (the bucket did not
answer; wrong credentials are refused when the root is opened).
"""

from __future__ import annotations

import copy
import io
import logging
from typing import Any

import torch
import torch.distributed.checkpoint as dcp

from statecraft.checkpoint.direct.bindings import read_latest
from statecraft.checkpoint.direct.manifest import DirectManifest, decode_direct_manifest
from statecraft.checkpoint.kernel.layout import MANIFEST_NAME, iter_dirname
from statecraft.checkpoint.kernel.loading import Components, _pristine_groups, load_all_or_nothing
from statecraft.checkpoint.resume.records import ResumeResult
from statecraft.checkpoint.state import DataState, TrainerState
from statecraft.checkpoint.state.scheduler_identity import check_scheduler_identity
from statecraft.errors import CheckpointCorruptError, ResumeError
from statecraft.parallel.collectives import Collective
from statecraft.parallel.rank0 import on_rank_zero
from statecraft.storage.base import Store
from statecraft.storage.digest import Digest
from statecraft.writers.dcp_failures import unwrap_checkpoint_exception
from statecraft.writers.dcp_store_reader import StoreStorageReader

__all__ = [
    "DirectCheckpoint",
    "ObjectRootLease",
    "load_direct_checkpoint",
    "open_explicit_root",
    "read_direct_checkpoint",
    "refuse_local_only_features",
    "resume_direct",
]

log = logging.getLogger("statecraft")


class DirectCheckpoint:
    """One verified direct checkpoint: its manifest, trainer state and data state (read and
    checked; the DCP shards are read later, in place).

    Attributes:
        store: the root; iteration; location (``s3://.../iter_N``); manifest (the document);
        trainer; data (``None`` when the save tracked no data source).
    """

    def __init__(
        self,
        store: Store,
        iteration: int,
        location: str,
        manifest: DirectManifest,
        trainer: TrainerState,
        data: DataState | None,
    ) -> None:
        self.store = store
        self.iteration = iteration
        self.location = location
        self.manifest = manifest
        self.trainer = trainer
        self.data = data

    def component(self, name: str) -> str | None:
        """The DCP directory of component ``name`` (store path), ``None`` when not saved."""
        folder = self.manifest.components.get(name)
        return None if folder is None else f"{iter_dirname(self.iteration)}/{folder}"


def _load_torch(data: bytes, where: str) -> Any:
    try:
        return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as exc:
        raise CheckpointCorruptError(
            where, f"is not a loadable torch.save archive ({type(exc).__name__}: {exc})"
        ) from None


def read_direct_checkpoint(
    store: Store, iteration: int, *, location: str, explicit: bool = False
) -> DirectCheckpoint:
    """Read and check iteration ``iteration`` of the root ``store`` (reads only).

    Raises:
        ResumeError: ``explicit`` and the iteration holds no manifest (the path is not a
            committed direct checkpoint).
        CheckpointCorruptError: no manifest (latest names it), a malformed one, a named
            object missing or of another size, a control file of another digest, a missing
            control generation.
    """
    iter_dir = iter_dirname(iteration)
    where = f"{location}/{MANIFEST_NAME}"
    if store.stat(f"{iter_dir}/{MANIFEST_NAME}") is None:
        if explicit:
            raise ResumeError(
                f"{location}: holds no {MANIFEST_NAME}, so it is not a committed direct "
                "checkpoint (absent, or a save that crashed before its commit); nothing was "
                "loaded. Point resume= at an iter_N that holds a manifest (statecraft inspect "
                "the root), or use resume=auto",
                path=location,
            )
        raise CheckpointCorruptError(
            where, "is absent although latest names this iteration",
            "Inspect the root; resume explicitly from an older committed iter_N.",
        )  # fmt: skip
    manifest = decode_direct_manifest(
        store.read_bytes(f"{iter_dir}/{MANIFEST_NAME}"), source=where, iteration=iteration
    )
    for component in manifest.components.values():
        if manifest.files and f"{component}/.metadata" not in manifest.files:
            raise CheckpointCorruptError(where, f"names no {component}/.metadata")
    for path, entry in manifest.files.items():
        stat = store.stat(f"{iter_dir}/{path}")
        if stat is None or stat.is_dir or stat.size != entry.size:
            found = "absent" if stat is None else f"{stat.size} bytes"
            raise CheckpointCorruptError(
                f"{location}/{path}",
                f"is {found}; the manifest names {entry.size} bytes",
                "The checkpoint is damaged: resume explicitly from an older iter_N.",
            )
    payloads: dict[str, bytes] = {}
    for name, entry in manifest.control.items():
        path = manifest.control_path(name)
        shown = f"{location}/{path[len(iter_dir) + 1 :]}"
        if store.stat(path) is None:
            raise CheckpointCorruptError(
                shown,
                f"is absent: the manifest names control generation "
                f"{manifest.control_generation}, which does not hold it",
                "The checkpoint is damaged: resume explicitly from an older iter_N.",
            )
        data = store.read_bytes(path)
        if len(data) != entry.size or Digest.of(data, entry.digest.algorithm) != entry.digest:
            raise CheckpointCorruptError(
                shown,
                f"holds {len(data)} bytes that do not match the manifest's {entry.size} bytes "
                f"/ {entry.digest}",
                "The checkpoint is damaged: resume explicitly from an older iter_N.",
            )
        payloads[name] = data
    if "trainer.pt" not in payloads:
        raise CheckpointCorruptError(where, "names no trainer.pt")
    source = f"{location}/trainer.pt"
    trainer = TrainerState.from_payload(_load_torch(payloads["trainer.pt"], source), source=source)
    data_state = None
    if "data.pt" in payloads:
        shown = f"{location}/data.pt"
        data_state = DataState.from_payload(_load_torch(payloads["data.pt"], shown), source=shown)
    return DirectCheckpoint(store, iteration, location, manifest, trainer, data_state)


def _dcp_load(store: Store, path: str, target: dict[str, Any]) -> None:
    try:
        dcp.load(target, storage_reader=StoreStorageReader(store, path))
    except BaseException as exc:  # DCP wraps every rank's error in its own
        raise unwrap_checkpoint_exception(exc) from None


def _dcp_components(
    tracked: Any, checkpoint: DirectCheckpoint, data: DataState | None
) -> Components:
    """Every rank: the DCP components read in place into scratch targets shaped by the live
    objects (:mod:`statecraft.checkpoint.state.dcp_state`, the rules of the local DCP resume;
    DCP's load planner reshards at another world size). No live tensor changes here, except
    the one the reference prescribes: a pristine optimizer is reset to never-stepped with the
    saved param-group options applied before any target is shaped."""
    from statecraft.checkpoint.state import dcp_state

    where, store, trainer = checkpoint.location, checkpoint.store, checkpoint.trainer
    model = optim = None
    model_path = checkpoint.component("model")
    if tracked.model is not None:
        if model_path is None:
            raise ResumeError(f"{where}: the checkpoint saved no model for the tracked model")
        model = dcp_state.model_load_target(tracked.model)
        _dcp_load(store, model_path, model)
    optim_path = checkpoint.component("optim")
    if tracked.optimizer is not None:
        if optim_path is None:
            raise ResumeError(f"{where}: the checkpoint saved no optimizer state")
        groups: tuple[dict[str, Any], ...] = ()
        if trainer.optimizer_pristine:
            groups = _pristine_groups(store, optim_path, where)
        optim = dcp_state.optimizer_load_target(
            tracked.model, tracked.optimizer, pristine=trainer.optimizer_pristine, groups=groups
        )
        if optim is not None:
            _dcp_load(store, optim_path, optim)
    return Components(model, optim, data, dcp=True)


def load_direct_checkpoint(
    tracked: Any,
    store: Store,
    *,
    collective: Collective,
    location: str,
    iteration: int | None = None,
    cursor_resume: str = "strict",
) -> ResumeResult:
    """Resume ``tracked`` from the direct root ``store`` (every rank calls it).

    Args:
        store: the root (``s3://<bucket>/<prefix>``, the checkpoints prefix).
        location: the root's URI, for messages and the result.
        iteration: an explicit ``iter_N`` (``resume=s3://.../iter_N``); ``None``: latest
            (absent: a fresh start, ``step == 0``).
        cursor_resume: ``data.cursor_resume`` (``off``: the data source is not restored).

    Raises:
        see the module docstring.
    """
    explicit = iteration is not None
    chosen = on_rank_zero(collective, lambda: iteration if explicit else read_latest(store))
    if chosen is None:
        reason = f"fresh start: {location} holds no latest_checkpoint.txt"
        log.info(reason)
        return ResumeResult(0, None, reason)
    where = f"{location.rstrip('/')}/{iter_dirname(chosen)}"
    checkpoint = read_direct_checkpoint(store, chosen, location=where, explicit=explicit)
    trainer = checkpoint.trainer
    check_scheduler_identity(
        trainer.scheduler_identity, tracked.scheduler_identity, source=f"{where}/trainer.pt"
    )
    data = checkpoint.data if cursor_resume != "off" else None
    parts = _dcp_components(tracked, checkpoint, data)
    rng = load_all_or_nothing(
        tracked,
        trainer,
        parts,
        location=where,
        rank=collective.rank,
        world_size=collective.world_size,
        log=log,
    )
    data_status = "fresh" if data is None or tracked.data is None else "restored"
    reason = f"resumed from {where} (iter {chosen}, shards read in place)"
    log.info(reason)
    return ResumeResult(
        chosen, where, reason, (), rng, data_status, (), copy.deepcopy(trainer.extra)
    )


# ----------------------------------------------------------------------------- the facade
class ObjectRootLease:
    """The facade's writer lease under ``backend=object_store`` (rank 0): the local attempt's
    :class:`~statecraft.checkpoint.fencing.lease.WriterLease` (the run directory, resolved config
    and
    RUN_TS stay local) plus the direct root's ``ObjectStoreLease``. :meth:`check` checks both;
    :meth:`release` releases the object lease first (the next job on the root may start at
    once), then the local one."""

    def __init__(self, local: Any, remote: Any) -> None:
        self.local = local
        self.remote = remote

    @property
    def where(self) -> str:
        return f"{self.local.where} and {self.remote.where}"

    def check(self) -> None:
        self.local.check()
        self.remote.check()

    def release(self) -> None:
        try:
            self.remote.release()
        finally:
            self.local.release()


def open_explicit_root(root: Any, uri: str, *, config: Any, attempt: Any) -> tuple[Store, str, int]:
    """The store, root URI and iteration of an explicit ``resume=s3://bucket/prefix/iter_N``
    (a copied tree included): the configured root's bucket client when the bucket is the
    same, else that bucket opened with the configured credentials.

    Raises:
        ConfigError: not an ``s3://.../iter_<9 digits>`` URI (from ``parse_direct_uri``).
        ResumeError: the URI names no iteration.
        ObjectRequestError: the other bucket cannot be used with these credentials.
    """
    import attrs

    from statecraft.checkpoint.direct.root import open_direct_root, parse_direct_uri
    from statecraft.storage.objects import ObjectStore

    bucket, prefix, iteration = parse_direct_uri(uri)
    if iteration is None:
        raise ResumeError(
            f"resume={uri!r} names no iteration; give s3://<bucket>/<prefix>/iter_<9 digits> "
            "(or resume=auto to take the latest of the configured root)",
            path=uri,
        )
    if bucket == getattr(root.store, "name", None):
        return (
            ObjectStore(root.store.client, prefix=prefix, name=bucket),
            f"s3://{bucket}/{prefix}",
            iteration,
        )
    other = open_direct_root(attrs.evolve(config, bucket=bucket, prefix=prefix), attempt)
    return other.store, other.uri, iteration


def refuse_local_only_features(config: Any) -> None:
    """Refuse, before anything is created, the knobs whose writes exist only for a local
    primary: a durable validation checkpoint (``validation.save_checkpoint=true``) and partial
    artifacts (a partial ``checkpoint_components`` plan). Under the direct primary they would
    write a local checkpoint beside the bucket's.

    Raises:
        NotSupportedYetError: naming the knob and the fix.
    """
    from statecraft.errors import NotSupportedYetError

    if config.validation.save_checkpoint:
        raise NotSupportedYetError(
            "validation.save_checkpoint",
            True,
            "with checkpoint_store.backend=object_store set validation.save_checkpoint=false "
            "(durable validation checkpoints are written to a local primary only; ephemeral "
            "validation with validation.every still runs)",
        )
    if not config.is_full_plan:
        raise NotSupportedYetError(
            "checkpoint_components",
            list(config.checkpoint_components),
            "with checkpoint_store.backend=object_store keep the full plan (partial artifacts "
            "are written to a local primary only)",
        )


def resume_direct(ckpt: Any) -> ResumeResult:
    """``Checkpointer.resume()`` under ``checkpoint_store.backend=object_store`` (every rank;
    called by ``run_resume``): resolve the local attempt (run directory, resolved config,
    RUN_TS and the local writer lease stay under the output root), open the direct root
    (wrong credentials, an unknown bucket or a dead endpoint fail here, nothing written),
    take its object-store lease on rank 0 (a live owner refuses, named), then load latest of
    the root (``resume=auto``), nothing (``resume=off``: a fresh start) or the explicit
    ``resume=s3://.../iter_N``. The boundary runner then saves into the root.

    Raises:
        WriterLeaseError: another job holds the root's lease (named); nothing was loaded.
        and what :func:`load_direct_checkpoint` raises.
    """
    from statecraft.checkpoint.direct.root import open_direct_root
    from statecraft.checkpoint.fencing.object_lease import acquire_object_lease

    config = ckpt.config
    store_config = config.checkpoint_store
    refuse_local_only_features(config)
    ckpt._ensure_attempt()
    collective = ckpt.collective
    root = open_direct_root(store_config, ckpt.attempt, run=ckpt.run)

    held: list[Any] = []  # rank 0's lease stays on rank 0; its outcome (an error) reaches all

    def take() -> None:
        held.append(
            acquire_object_lease(
                root.store, ttl_s=store_config.lease_ttl_s, takeover=store_config.lease_takeover
            )
        )

    on_rank_zero(collective, take)
    remote = held[0] if held else None
    boundaries = ckpt._boundaries
    boundaries.direct_root = root
    boundaries.direct_lease = remote
    if remote is not None and ckpt.lease is not None:
        ckpt.lease = ObjectRootLease(ckpt.lease, remote)
    mode = config.resume
    if mode == "off":
        result = ResumeResult(0, None, f"resume=off: starting fresh into {root.uri}")
        log.info("fresh start: %s", result.reason)
    elif mode == "auto":
        result = load_direct_checkpoint(
            ckpt.tracked,
            root.store,
            collective=collective,
            location=root.uri,
            cursor_resume=config.data.cursor_resume,
        )
    else:
        store, uri, iteration = open_explicit_root(
            root, mode, config=store_config, attempt=ckpt.attempt
        )
        result = load_direct_checkpoint(
            ckpt.tracked,
            store,
            collective=collective,
            location=uri,
            iteration=iteration,
            cursor_resume=config.data.cursor_resume,
        )
    ckpt.last_saved_step = result.step if result.source is not None else None
    if config.termination.enabled:
        ckpt.termination.install()
    return result
