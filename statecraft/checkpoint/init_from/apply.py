"""``statecraft.init_from(model, source, ...)``: initialize a model (and its copies) from a source's
weights only.

::

    report = sc.init_from(model, "runs/base/proj/group/name")        # newest committed
    sc.init_from(model, "hf_export/", strip_prefix="_orig_mod.")     # safetensors
    sc.init_from(peft_model, base_ckpt, lora=True, copies=[reference])

Everything is read and checked before the first tensor changes: the source's entries against
the model's and every copy's (:func:`~statecraft.checkpoint.init_from.keys.match_keys`); a
source that does not fit raises one :class:`~statecraft.errors.InitFromError` listing every
difference and nothing changed. Then the model and each copy are loaded
(``load_state_dict``: values copied in place, dtypes cast). A copy that is a
``torch.optim.swa_utils.AveragedModel`` is initialized through its ``module`` (its
``n_averaged`` counter is the EMA's, not the source's).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from statecraft.checkpoint.init_from.keys import KeyRules, match_keys
from statecraft.checkpoint.init_from.remote import is_remote, stage_remote
from statecraft.checkpoint.init_from.sources import SourceWeights, open_source
from statecraft.errors import InitFromError

__all__ = ["InitReport", "init_from", "load_into"]


@attrs.frozen
class InitReport:
    """What :func:`init_from` loaded.

    Attributes:
        source: the source as given (and, for a statecraft source, the checkpoint chosen).
        kind: ``"checkpoint"``, ``"artifact"``, ``"torch"``, ``"safetensors"`` or ``"dcp"``.
        iteration: a statecraft source's step, else ``None``.
        entries: the model entries initialized.
        targets: how many modules were initialized (the model and its copies).
        kept: model entries left as built (target-only LoRA adapters under ``lora=True``).
    """

    source: str
    kind: str
    iteration: int | None
    entries: int
    targets: int
    kept: tuple[str, ...] = ()


def _module(target: Any) -> Any:
    """The module whose entries a target's weights are: an ``AveragedModel``'s ``module``."""
    from torch.optim.swa_utils import AveragedModel

    return target.module if isinstance(target, AveragedModel) else target


def _entries(module: Any, role: str) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
    """The module's entries and shapes, and its tied entries (entry -> the first entry that is
    the same tensor: same storage, offset, shape and strides)."""
    state_dict = getattr(module, "state_dict", None)
    if not callable(state_dict):
        raise InitFromError(
            f"init_from: the {role} is a {type(module).__name__}, not a torch module with "
            "state_dict(); pass the nn.Module to initialize",
            source=None,
        )
    entries = state_dict()
    first: dict[tuple[Any, ...], str] = {}
    tied: dict[str, str] = {}
    for key, value in entries.items():
        if value.numel() == 0:
            continue
        storage = value.untyped_storage().data_ptr()
        same = (storage, value.storage_offset(), tuple(value.shape), value.stride())
        if same in first:
            tied[key] = first[same]
            tied.setdefault(first[same], key)
        else:
            first[same] = key
    return {k: tuple(v.shape) for k, v in entries.items()}, tied


def load_into(
    weights: SourceWeights, targets: Sequence[tuple[str, Any]], rules: KeyRules
) -> InitReport:
    """Check ``weights`` against every ``(role, module)`` target, then load each (see the
    module docstring).

    Raises:
        InitFromError: a target does not fit (nothing changed).
    """
    modules = [(role, _module(t)) for role, t in targets]
    plans = []
    for role, module in modules:
        where = weights.where if role == "model" else f"{weights.where} (into the {role})"
        shapes, tied = _entries(module, role)
        plans.append(match_keys(shapes, weights.shapes, rules, where=where, tied=tied))
    needed = sorted({name for plan in plans for name in plan.values()})
    tensors = weights.read(needed)
    kept: set[str] = set()
    for (_, module), plan in zip(modules, plans, strict=True):
        result = module.load_state_dict(
            {mine: tensors[theirs] for mine, theirs in plan.items()}, strict=False
        )
        kept.update(result.missing_keys)
    return InitReport(
        weights.where,
        weights.kind,
        weights.iteration,
        len(plans[0]),
        len(modules),
        tuple(sorted(kept)),
    )


def init_from(
    model: Any,
    source: str | os.PathLike[str],
    *,
    copies: Sequence[Any] | dict[str, Any] = (),
    strip_prefix: str | Sequence[str] = (),
    lora: bool = False,
    verify: str = "digest",
    credentials: str = "",
    stage_dir: str | os.PathLike[str] | None = None,
) -> InitReport:
    """Initialize ``model`` (and ``copies``: a reference, an EMA, an old policy) from the
    weights of ``source``; never its optimizer, clocks, RNG, data cursor or validation state.

    Args:
        model: the ``nn.Module`` to initialize.
        source: a statecraft run, attempt, ``iter_*`` checkpoint or artifact (verified against
            its manifest); a ``torch.save`` state dict file; a DCP directory; a safetensors
            file or Hugging Face directory (``model.safetensors`` or an index with shards);
            ``s3://bucket/.../iter_N`` (an archived checkpoint or artifact, fetched first).
        copies: further modules loaded with the same weights (a list, or role -> module).
        strip_prefix: ``"_orig_mod."`` and/or ``"module."``: removed from the start of both
            sides' names before they are compared.
        lora: allow target-only LoRA adapters (peft naming) when the source holds none.
        verify: ``"digest"`` or ``"size"`` for a statecraft source.
        credentials: an ``s3://`` source's keys (``""``: boto3's default chain,
            ``profile:NAME``, or a JSON credentials file).
        stage_dir: where an ``s3://`` source is fetched to (default: ``$TMPDIR``'s
            ``statecraft-init-from``).

    Returns:
        an :class:`InitReport`.

    Raises:
        InitFromError: the source is missing, unreadable, or does not fit the model or a
            copy (every difference listed; nothing changed).
        CheckpointSourceError / CheckpointCorruptError: a statecraft source has no committed
            checkpoint that verifies.
        ArchiveError / CredentialsError / ObjectRequestError: an ``s3://`` source cannot be
            fetched.
    """
    rules = KeyRules(strip_prefix=strip_prefix, lora=lora)
    if is_remote(source):
        if stage_dir is None:
            import tempfile

            stage_dir = Path(tempfile.gettempdir()) / "statecraft-init-from"
        source = stage_remote(str(source), credentials=credentials, stage_dir=stage_dir)
    named = (
        list(copies.items())
        if isinstance(copies, dict)
        else [(f"copy {i}", c) for i, c in enumerate(copies)]
    )
    return load_into(open_source(source, verify=verify), [("model", model), *named], rules)
