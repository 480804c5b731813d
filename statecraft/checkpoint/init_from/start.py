"""What ``init_from`` initializes when a run starts (called by ``Checkpointer.resume()`` once the
resume machine has decided and loaded):

========================  ===========================================================
the start                 ``init_from`` loads the source's weights into
========================  ===========================================================
fresh (nothing resumed)   the model, the moving old policy, the reference
                          (frozen or moving) and the maintained EMA (through its
                          ``module``; ``n_averaged`` is left alone)
resumed (a checkpoint)    the frozen reference only: the checkpoint wins for the
                          model, the moving copies and the EMA (in ``model.pt``);
                          the frozen reference is never saved, so it is loaded
                          from the base on every start, resumed windows included
========================  ===========================================================

Skipping the frozen reference on a resumed window is the bug the reference contract records
(the 2026-07-06 relaunch): the reference stays at the model's raw initialization and the
objective is silently wrong; ``statecraft.proofs.init_from.broken`` declares it as a broken
variant and ``tests/init_from`` shows it gives another loss. Copying the resumed model into the
reference would be wrong too: the model has moved.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from statecraft.checkpoint.init_from.apply import InitReport, load_into
from statecraft.checkpoint.init_from.keys import KeyRules
from statecraft.checkpoint.init_from.remote import is_remote, stage_remote
from statecraft.checkpoint.init_from.roles import ModelCopies
from statecraft.checkpoint.init_from.sources import open_source

__all__ = ["STAGE_DIR", "apply_on_start", "targets_at_start"]

log = logging.getLogger("statecraft.init_from")

#: under the output root: where an ``s3://`` ``init_from`` source is staged
STAGE_DIR = ".init_from_stage"


def targets_at_start(resumed: bool, model: Any, copies: ModelCopies) -> list[tuple[str, Any]]:
    """The ``(role, module)`` pairs ``init_from`` loads at a start (see the module table)."""
    frozen = copies.reference is not None and copies.reference_update_every == 0
    reference = [("reference", copies.reference)] if frozen else []
    if resumed:
        return reference
    old = [] if copies.old is None else [("old", copies.old.module)]
    moving = [] if frozen or copies.reference is None else [("reference", copies.reference)]
    ema = copies.maintained_ema  # a model-provided EMA statecraft does not advance: left alone
    emas = [] if ema is None else [("EMA", ema)]
    return [("model", model), *old, *reference, *moving, *emas]


def apply_on_start(
    config: Any,
    model: Any,
    copies: ModelCopies,
    *,
    resumed: bool,
    output_root: str | Path,
    collective: Any,
) -> InitReport | None:
    """Run ``init_from`` (the ``init_from*`` knobs of ``config``) for this start, on every rank
    (an ``s3://`` source is staged by rank 0 first). ``None``: no ``init_from``, or nothing to
    initialize (a resumed run without a frozen reference).

    Raises:
        what :func:`statecraft.init_from` raises (the model and every copy unchanged).
    """
    source: Any = config.init_from
    targets = targets_at_start(resumed, model, copies)
    if not source or not targets:
        return None
    if is_remote(source):
        stage = Path(output_root) / STAGE_DIR
        if collective.rank == 0:
            stage_remote(source, credentials=config.upload.credentials, stage_dir=stage)
        collective.barrier()
        source = stage_remote(source, credentials=config.upload.credentials, stage_dir=stage)
    rules = KeyRules(
        strip_prefix=(config.init_from_strip_prefix,) if config.init_from_strip_prefix else (),
        lora=config.init_from_lora,
    )
    report = load_into(open_source(source, verify=config.verify), targets, rules)
    log.info(
        "init_from %s (%s): %s initialized, %d entries%s",
        report.source,
        report.kind,
        " and ".join(role for role, _ in targets),
        report.entries,
        f"; {len(report.kept)} target-only LoRA entries kept" if report.kept else "",
    )
    return report
