"""A retry of a direct save that finds its iteration's manifest already committed:
:func:`validate_found` proves the manifest is this save's plan (else ``PlanDriftError``) and
that every object it names is in the bucket as recorded (else ``CheckpointCorruptError``).
Reads only.
"""

from __future__ import annotations

from statecraft.checkpoint.direct.manifest import DirectManifest, decode_direct_manifest
from statecraft.checkpoint.direct.save_context import DirectSaveContext
from statecraft.errors import CheckpointCorruptError, PlanDriftError
from statecraft.storage.digest import Digest

__all__ = ["validate_found"]


def _drift(ctx: DirectSaveContext, found: DirectManifest) -> list[str]:
    out = []
    if found.plan != ctx.plan.logical:
        out.append(f"plan: committed {list(found.plan)}, now {list(ctx.plan.logical)}")
    if sorted(found.components) != sorted(ctx.plan.components):
        out.append(
            f"components: committed {sorted(found.components)}, now {sorted(ctx.plan.components)}"
        )
    if sorted(found.control) != sorted(ctx.plan.control):
        out.append(f"control files: committed {sorted(found.control)}, now "
                   f"{sorted(ctx.plan.control)}")  # fmt: skip
    layout = dict(zip(ctx.plan.components, ctx.plan.layout, strict=False))
    if found.layout and layout and found.layout != layout:
        changed = sorted(c for c in layout if found.layout.get(c) != layout[c])
        out.append(f"state layout (keys, shapes, dtypes) of {changed}")
    return out


def validate_found(ctx: DirectSaveContext) -> DirectManifest:
    """The found manifest, after checking its plan is this save's and every object it names
    is in the bucket with its size (control files: and digest). Reads only.

    Raises:
        PlanDriftError: the committed plan differs (named, both sides).
        CheckpointCorruptError: the manifest is malformed or names a missing or different
            object (named).
    """
    where = f"{ctx.store.describe()}/{ctx.manifest_path}"
    found = decode_direct_manifest(
        ctx.store.read_bytes(ctx.manifest_path), source=where, iteration=ctx.iteration
    )
    drift = _drift(ctx, found)
    if drift:
        raise PlanDriftError(
            f"{where}: {ctx.iter_dir} is committed with another plan ({'; '.join(drift)}). A "
            "committed iteration is never rewritten, so nothing was written. Resume from it "
            "(or from latest) instead of saving the same iteration with another layout",
            path=where,
            differences=drift,
        )
    named = [(f"{ctx.iter_dir}/{p}", e) for p, e in found.files.items()]
    named += [(found.control_path(n), e) for n, e in found.control.items()]
    for component in found.components.values():
        if found.files and f"{component}/.metadata" not in found.files:
            raise CheckpointCorruptError(where, f"names no {component}/.metadata")
    for path, entry in named:
        stat = ctx.store.stat(path)
        if stat is None or stat.is_dir or stat.size != entry.size:
            shown = "absent" if stat is None else f"{stat.size} bytes"
            raise CheckpointCorruptError(
                f"{ctx.store.describe()}/{path}",
                f"is {shown}; the committed manifest names {entry.size} bytes",
                "The committed checkpoint is damaged: resume from an older one.",
            )
    for name, entry in found.control.items():
        data = ctx.store.read_bytes(found.control_path(name))
        if Digest.of(data, entry.digest.algorithm) != entry.digest:
            raise CheckpointCorruptError(
                f"{ctx.store.describe()}/{found.control_path(name)}",
                f"does not match the digest the manifest records ({entry.digest})",
                "The committed checkpoint is damaged: resume from an older one.",
            )
    return found
