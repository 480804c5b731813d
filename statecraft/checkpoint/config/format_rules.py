"""The cross-option rules of ``checkpoint_format=incremental`` (content-addressed blobs under
the attempt, :mod:`statecraft.checkpoint.incremental`): what it does not combine with in this
release, refused when the config is built so nothing is written in a form a later step could
not read, archive or collect.
"""

from __future__ import annotations

from typing import Any

from statecraft.errors import ConfigIssue

__all__ = ["incremental_issues"]

_WHY = "when checkpoint_format='incremental'"


def incremental_issues(config: Any) -> list[ConfigIssue]:
    """Every rule ``config`` (a ``CheckpointConfig``) breaks with the incremental format:

    - ``checkpoint_store.backend`` must be ``local`` (the blob store lives under the local
      attempt; a direct object-store primary writes DCP shards only);
    - ``upload.enabled`` must be false (the archive upload does not yet upload an
      iteration's blobs, and an ``.uploaded`` marker must cover the full set: fail closed);
    - ``validation.save_checkpoint`` must be false (a durable validation writes a
      consolidated checkpoint into the same root, which resume of this format refuses).
    """
    if config.checkpoint_format != "incremental":
        return []
    issues = []
    if config.checkpoint_store.backend != "local":
        issues.append(
            ConfigIssue(
                "checkpoint_store.backend",
                config.checkpoint_store.backend,
                f"'local' {_WHY} (the blob store lives under the local attempt; use "
                "checkpoint_format=dcp for an object-store primary)",
            )
        )
    if config.upload.enabled:
        issues.append(
            ConfigIssue(
                "upload.enabled",
                True,
                f"false {_WHY} (the archive upload does not upload an iteration's blobs yet, "
                "and an .uploaded marker must cover them all; use "
                "checkpoint_format=consolidated to archive)",
            )
        )
    if config.validation.save_checkpoint:
        issues.append(
            ConfigIssue(
                "validation.save_checkpoint",
                True,
                f"false {_WHY} (a durable validation writes a consolidated checkpoint; use "
                "checkpoint_format=consolidated for durable validations)",
            )
        )
    return issues
