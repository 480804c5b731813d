"""Committed partial artifacts written by hand, the way the artifact transaction writes them:
``torch.save`` payload files, then ``.posttrain-checkpoint-artifact.json`` recording each
file's size and xxh3_128 digest. For readers' tests that need an artifact without running the
artifact machine."""

from __future__ import annotations

import io
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from statecraft.checkpoint.kernel.artifact_manifest import (
    ARTIFACT_MANIFEST_SCHEMA,
    ArtifactManifest,
)
from statecraft.checkpoint.kernel.components import ComponentPlan
from statecraft.checkpoint.kernel.layout import ARTIFACT_MANIFEST_NAME, ARTIFACTS_DIR, iter_dirname
from statecraft.checkpoint.kernel.manifest import FileEntry
from statecraft.checkpoint.state import TrainerState
from statecraft.storage.digest import Digest


def model_state(seed: int = 0) -> dict[str, torch.Tensor]:
    """The state_dict of a seeded ``nn.Linear(4, 3)``."""
    torch.manual_seed(seed)
    return {k: v.detach().clone() for k, v in torch.nn.Linear(4, 3).state_dict().items()}


def serialized(payload: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    return buffer.getvalue()


def default_payloads(
    plan: ComponentPlan, iteration: int, *, data: bool = False, seed: int = 0
) -> dict[str, Any]:
    """A payload per file of ``plan`` (model weights, an SGD state, a trainer state at
    ``iteration``, a data position)."""
    out: dict[str, Any] = {}
    for name in plan.files(with_data=data):
        if name == "model.pt":
            out[name] = model_state(seed)
        elif name == "optim.pt":
            out[name] = {"state": {}, "param_groups": [{"lr": 0.1, "params": [0, 1]}]}
        elif name == "trainer.pt":
            out[name] = TrainerState(
                optimizer_step=iteration, attempt_id=iteration, rng=None
            ).to_payload()
        elif name == "data.pt":
            out[name] = {"position": iteration}
    return out


def write_artifact(
    artifacts_root: Path,
    iteration: int,
    components: Iterable[str],
    *,
    data: bool = False,
    payloads: dict[str, Any] | None = None,
    metrics: dict[str, float] | None = None,
    manifest: bool = True,
    seed: int = 0,
) -> Path:
    """Write artifact ``iteration`` under ``artifacts_root`` (a ``checkpoint_artifacts`` dir)
    and return its ``iter_*`` directory; ``manifest=False`` leaves it uncommitted."""
    plan = ComponentPlan.of(components)
    where = artifacts_root / iter_dirname(iteration)
    where.mkdir(parents=True)
    files = {}
    chosen = payloads if payloads is not None else default_payloads(plan, iteration, data=data)
    for name, payload in chosen.items():
        blob = serialized(payload)
        (where / name).write_bytes(blob)
        files[name] = FileEntry(len(blob), Digest.of(blob))
    if manifest:
        record = ArtifactManifest(
            ARTIFACT_MANIFEST_SCHEMA,
            iteration,
            "consolidated",
            plan.components,
            plan.physical,
            files,
            metrics,
            {"name": "consolidated", "statecraft": "test"},
        )
        (where / ARTIFACT_MANIFEST_NAME).write_bytes(record.encode())
    return where


def artifacts_dir(attempt: Path) -> Path:
    return attempt / ARTIFACTS_DIR


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` -> its bytes (``None`` for a directory)."""
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else None
        for p in sorted(root.rglob("*"))
    }
