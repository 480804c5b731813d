"""Checkpoint verification: prove that one ``iter_N`` of a store is a complete, intact,
exact-resume checkpoint. The catalog (:mod:`statecraft.checkpoint.kernel.catalog`) classifies a
whole
attempt with it; resume verifies its chosen candidate with it; ``statecraft inspect`` reports it.

Levels, each including the previous:

- ``"manifest"``: the manifest exists, parses and names this iteration (what the save
  transaction's observation needs; no file is opened);
- ``"size"``: the manifest records exactly the full plan (:func:`plan_problems`: the writer's
  format, every component, every required entry of
  :data:`~statecraft.checkpoint.kernel.plan.CHECKPOINT_PLAN` and no file outside it, and no
  entry of the plan on disk that it omits: :mod:`~statecraft.checkpoint.kernel.required_files`),
  every recorded file exists with its size, **every recorded file deserializes the way resume
  loads it** (through the writer, ``torch.load(weights_only=True)``, the model memory-mapped), and
  ``trainer.pt`` is well-formed and its ``optimizer_step`` equals the iteration;
- ``"digest"``: every file's digest, computed with the algorithm the manifest records
  (``xxh3_128`` for v2 manifests, ``sha256`` for v1), equals the recorded one too.

Parsing is part of verification because a file whose digest matches can still be one that
resume cannot load (a ``numpy.float64`` in ``data.pt`` is refused by the weights-only
unpickler): such a checkpoint is ``corrupt`` with a one-line reason naming the file, what it
holds and the conversion the saving code needs, so ``resume=auto`` passes over it and
``statecraft inspect`` reports it. The parsed payloads are kept on the
:class:`VerifiedCheckpoint` (``payloads``) and resume loads them instead of reading the files
again; they are not pickled, so another rank that receives the verdict reads its own.

A **DCP** checkpoint (manifest ``format`` ``"dcp"``;
:data:`~statecraft.checkpoint.kernel.plan.DCP_PLAN`)
records every file under ``iter_N`` (``model/__0_0.distcp``, ``model/.metadata``, ...): each is
checked like a consolidated file (present, regular, its size, its digest at level ``digest``);
the plan check requires ``model/.metadata`` and ``optim/.metadata`` to be recorded; the parse
step unpickles each ``.metadata`` as DCP ``Metadata`` (the tensors are read later, by range,
each item checked against its own digest, when resume loads them into targets). When no
``writer`` is given the manifest's format chooses it (:func:`writer_for`).

A **weights-only** checkpoint (``weights_only=True``: retention removed its optimizer component
after writing ``.retention-weights-only.json``) is verified the same way except for the entries
of :data:`OPTIMIZER_ENTRIES`: the manifest still records them (it is never rewritten), but they
are neither required nor read, so one still on disk (a crash before retention removed it) and
one already gone verify alike. Such a checkpoint loads for evaluation, never for resume.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, MutableMapping

# Any: the payloads verification deserializes are torch objects of no static type.
from typing import Any

import attrs

from statecraft.checkpoint.kernel.layout import MANIFEST_NAME, iter_dirname, parse_iter_dirname
from statecraft.checkpoint.kernel.listed_files import first_listed_mismatch
from statecraft.checkpoint.kernel.manifest import Manifest, decode_manifest, read_unit_manifest
from statecraft.checkpoint.kernel.plan import (
    FULL_COMPONENTS,
    PLANS,
    TRAINER_ENTRY,
    CheckpointPlan,
    entry_of,
    plan_for,
)
from statecraft.checkpoint.kernel.read_once import load_bytes, read_once
from statecraft.checkpoint.kernel.required_files import omitted_problem
from statecraft.checkpoint.state import TrainerState
from statecraft.errors import CheckpointCorruptError, CheckpointError
from statecraft.storage.base import Store
from statecraft.writers.base import Writer
from statecraft.writers.consolidated import ConsolidatedWriter
from statecraft.writers.dcp import DcpWriter
from statecraft.writers.dcp_storage import METADATA_NAME
from statecraft.writers.incremental import IncrementalWriter

__all__ = [
    "LEVELS",
    "OPTIMIZER_ENTRIES",
    "ParsedPayloads",
    "VerifiedCheckpoint",
    "list_iterations",
    "plan_problems",
    "read_manifest",
    "verify_checkpoint",
    "writer_for",
]

LEVELS = ("manifest", "size", "digest")

#: the entries of the ``optimizer`` component, which retention removes from a weights-only
#: checkpoint (``optim.pt``; DCP's ``optim`` directory), in every format
OPTIMIZER_ENTRIES: tuple[str, ...] = tuple(
    sorted({e.name for table in PLANS.values() for e in table if e.component == "optimizer"})
)


def writer_for(format_name: str) -> Writer:
    """The writer that reads checkpoints of ``format_name`` (a manifest's ``format``).

    Raises:
        CheckpointError: no such format.
    """
    plan_for(format_name)  # names the known formats
    if format_name == "incremental":
        return IncrementalWriter()
    return DcpWriter() if format_name == "dcp" else ConsolidatedWriter()


class ParsedPayloads(dict[str, Any]):
    """Entry name -> the payload verification deserialized (``model.pt`` memory-mapped).

    Pickles as an empty mapping: the verdict of rank 0 crosses to the other ranks without the
    tensors (each rank then reads its own through the writer).
    """

    def __reduce__(self) -> tuple[type[ParsedPayloads], tuple[()]]:
        return (ParsedPayloads, ())


@attrs.frozen
class VerifiedCheckpoint:
    """A checkpoint whose integrity was proven; ``trainer`` is its parsed control state
    (``None`` only at level ``"manifest"``); ``payloads`` the components verification parsed
    (empty when they were not kept, or after pickling); ``weights_only``: verified without its
    optimizer entries (:data:`OPTIMIZER_ENTRIES`), never a resume source."""

    store: Store
    iteration: int
    location: str
    trainer: TrainerState | None
    manifest: Manifest | None = None
    legacy_payload: dict[str, Any] | None = None
    payloads: ParsedPayloads = attrs.field(factory=ParsedPayloads, eq=False, repr=False)
    weights_only: bool = False

    def path(self, name: str) -> str:
        return f"{iter_dirname(self.iteration)}/{name}"


def list_iterations(store: Store) -> list[int]:
    """Iterations with an ``iter_*`` directory in ``store``, newest first."""
    found = (parse_iter_dirname(n) for n in store.list(""))
    return sorted((i for i in found if i is not None), reverse=True)


def read_manifest(store: Store, iteration: int) -> Manifest:
    """The committed manifest of ``iteration``.

    Raises:
        FileNotFoundError: the iteration has no manifest.
        CheckpointCorruptError: the manifest is malformed or names another iteration.
    """
    return read_unit_manifest(
        store, iteration, MANIFEST_NAME, lambda data, source: decode_manifest(data, source=source)
    )


def check_level(level: str) -> None:
    """Refuse a verification level that is not one of :data:`LEVELS`.

    Raises:
        CheckpointError: ``level`` is not one of :data:`LEVELS`.
    """
    if level not in LEVELS:
        raise CheckpointError(f"verify level must be one of {list(LEVELS)}, got {level!r}")


def read_trainer(
    store: Store,
    writer: Writer,
    iteration: int,
    *,
    where: str,
    fix: str,
    data: bytes | None = None,
) -> TrainerState:
    """``trainer.pt`` of ``iteration`` (at ``where``), parsed (from ``data``, its bytes
    already read and verified, when given); its clock must be the iteration's.

    Raises:
        TrainerStateError: it is malformed.
        CheckpointCorruptError: it records another ``optimizer_step`` (``fix`` says what to
            do).
    """
    name = iter_dirname(iteration)
    path = f"{name}/{TRAINER_ENTRY}"
    payload = (
        writer.read(store, path, mmap=False)
        if data is None
        else load_bytes(writer, data, f"{store.describe()}/{path}")
    )
    trainer = TrainerState.from_payload(payload, source=f"{where}/{TRAINER_ENTRY}")
    if trainer.optimizer_step != iteration:
        raise CheckpointCorruptError(
            f"{where}/{TRAINER_ENTRY}",
            f"records optimizer_step {trainer.optimizer_step} but lives in {name} "
            "(conflicting clocks)",
            fix,
        )
    return trainer


def parse_entries(
    store: Store,
    writer: Writer,
    iteration: int,
    entries: Iterable[str],
    table: CheckpointPlan,
    *,
    keep_payloads: bool,
    kept: MutableMapping[str, bytes] | None = None,
) -> ParsedPayloads:
    """Deserialize each of ``entries`` of ``iteration`` through ``writer`` (memory-mapped
    where its plan entry allows, or where the payload is not kept; from its verified bytes
    when ``kept`` holds them), keeping the payloads only with ``keep_payloads``.

    Raises:
        CheckpointCorruptError: an entry does not deserialize (the writer names it).
    """
    name = iter_dirname(iteration)
    payloads = ParsedPayloads()
    for file_name in entries:
        # a DCP directory parses as its .metadata (its items are checked by digest on load)
        path = f"{name}/{file_name}"
        data = kept.pop(file_name, None) if kept is not None else None  # freed once parsed
        if data is not None:
            parsed = load_bytes(writer, data, f"{store.describe()}/{path}")
        else:
            mmap = table.entry(file_name).mmap or not keep_payloads
            parsed = writer.read(store, path, mmap=mmap)
        if keep_payloads:
            payloads[file_name] = parsed
    return payloads


def plan_problems(manifest: Manifest, writer: Writer) -> list[str]:
    """Every way ``manifest`` disagrees with the plan model, as one line each (empty when it
    records exactly a full checkpoint of ``writer``'s format).

    The plan (:data:`~statecraft.checkpoint.kernel.plan.CHECKPOINT_PLAN`) decides: the format must
    be
    the one ``writer`` reads (``"consolidated"`` for ``torch.save`` files), the components must
    be :data:`~statecraft.checkpoint.kernel.plan.FULL_COMPONENTS`, every required entry must be
    recorded (``model.pt``, ``optim.pt``, ``trainer.pt``) and every recorded file must be an
    entry of the plan (``data.pt`` is the only optional one). The JSON schema cannot say any of
    this, so a doctored manifest that still conforms is caught here.
    """
    problems = []
    table: CheckpointPlan = PLANS.get(writer.format_name) or plan_for("consolidated")
    if manifest.format != writer.format_name:
        problems.append(
            f"it records format {manifest.format!r} but is read by {writer!r}, which reads "
            f"{writer.format_name!r} checkpoints"
        )
    if tuple(manifest.components) != FULL_COMPONENTS:
        problems.append(
            f"it records components {list(manifest.components)}, not the full plan "
            f"{list(FULL_COMPONENTS)}"
        )
    entries = {entry_of(n) for n in manifest.files}
    missing = [n for n in table.required_names if n not in entries]
    if missing:
        problems.append(f"it lacks {missing}, required by the checkpoint plan")
    extra = sorted(n for n in entries if n not in table.names)
    if extra:
        problems.append(
            f"it records {extra}, which {'is' if len(extra) == 1 else 'are'} not an entry of "
            f"the checkpoint plan {list(table.names)}"
        )
    for e in table:
        if e.name not in entries:
            continue
        if e.directory and f"{e.name}/{METADATA_NAME}" not in manifest.files:
            problems.append(
                f"it records no {e.name}/{METADATA_NAME} (a DCP directory without its metadata "
                "cannot be read)"
            )
        if e.directory == (e.name in manifest.files):
            shape = "a file" if e.directory else "a directory of files"
            problems.append(f"it records {e.name!r} as {shape}, which the plan does not")
    return problems


#: what to do about a missing file, a special file, and a changed one, in a checkpoint
_CHECKPOINT_FIXES = (
    "The checkpoint is incomplete; resume from another one.",
    "Replace it with the real file or resume from another checkpoint.",
    "Resume from another checkpoint.",
)


def verify_checkpoint(
    store: Store,
    iteration: int,
    *,
    level: str = "digest",
    writer: Writer | None = None,
    keep_payloads: bool = True,
    only: Collection[str] | None = None,
    weights_only: bool = False,
) -> VerifiedCheckpoint:
    """Prove that ``iteration`` in ``store`` is a complete, intact, exact-resume checkpoint at
    ``level`` (see the module docstring).

    Args:
        keep_payloads: keep the parsed components on the result (resume loads them). A
            reader that only classifies (``statecraft inspect``) passes ``False``: every file
            is then parsed memory-mapped where the store allows it and dropped.
        only: hash and parse only these entries (and ``trainer.pt``, always); every recorded
            file is still required with its recorded size. A model-only reader
            (:func:`statecraft.load_weights`) passes ``("model.pt",)`` so ``optim.pt`` is
            never read. ``None``: every entry.
        weights_only: the iteration holds retention's weights-only marker: the entries of
            :data:`OPTIMIZER_ENTRIES` are skipped (recorded by the manifest, but neither
            required nor read); everything else is verified as usual.

    Raises:
        CheckpointCorruptError: the first problem found, naming the file and what to do (a
            file that does not deserialize says what it holds and what to convert it to).
        TrainerStateError: ``trainer.pt`` is malformed or its clocks conflict.
        CheckpointError: ``level`` is not one of :data:`LEVELS`.
    """
    check_level(level)
    name = iter_dirname(iteration)
    where = f"{store.describe()}/{name}"
    if store.stat(f"{name}/{MANIFEST_NAME}") is None:
        raise CheckpointCorruptError(
            where, "has no manifest (an interrupted save)", "It is never adopted; nothing to do."
        )
    manifest = read_manifest(store, iteration)
    if writer is None:  # the manifest's own format decides (an unknown one: corrupt)
        writer = writer_for(manifest.format) if manifest.format in PLANS else ConsolidatedWriter()
    if level == "manifest":
        return VerifiedCheckpoint(
            store, iteration, where, None, manifest, weights_only=weights_only
        )
    problems = plan_problems(manifest, writer)
    omitted = omitted_problem(store, name, manifest)
    if omitted is not None:
        problems.append(omitted)
    if problems:
        raise CheckpointCorruptError(
            where,
            "the manifest does not describe a full exact-resume checkpoint: " + "; ".join(problems),
            "It was edited by hand or written by another tool, so it is never adopted; resume "
            "from another checkpoint, or load its model.pt as initialisation if that file is "
            "intact",
        )
    skipped = frozenset(OPTIMIZER_ENTRIES if weights_only else ())
    table = plan_for(manifest.format)
    kept: dict[str, bytes] = {}
    mismatch = first_listed_mismatch(
        store,
        name,
        {n: e for n, e in manifest.files.items() if entry_of(n) not in skipped},
        hashed=lambda n: (
            level == "digest" and (only is None or entry_of(n) in only or n == TRAINER_ENTRY)
        ),
        keep=read_once(store, name, manifest, writer, table) if keep_payloads else (),
        kept=kept,
    )
    if mismatch is not None:
        raise mismatch.error("the manifest", fixes=_CHECKPOINT_FIXES)
    fix = "Resume from another checkpoint."
    trainer = read_trainer(
        store, writer, iteration, where=where, fix=fix, data=kept.pop(TRAINER_ENTRY, None)
    )
    wanted = [
        n
        for n in sorted({entry_of(n) for n in manifest.files})
        if n != TRAINER_ENTRY and n not in skipped and (only is None or n in only)
    ]
    payloads = parse_entries(
        store, writer, iteration, wanted, table, keep_payloads=keep_payloads, kept=kept
    )
    return VerifiedCheckpoint(
        store, iteration, where, trainer, manifest, payloads=payloads, weights_only=weights_only
    )
