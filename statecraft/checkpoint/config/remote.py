"""The object-store sections of the checkpoint configuration: ``checkpoint_store.*`` (where
the primary lives) and ``upload.*`` (the archive upload), re-exported by
:mod:`statecraft.checkpoint.config.schema`.
"""

from __future__ import annotations

import attrs

from statecraft.checkpoint.config.knobs import (
    _BACKENDS,
    _CHECK,
    _COUNT,
    _LEASE_TTL,
    StoreBackend,
    _check_fields,
    _flag,
    _raise_if,
    _share,
    _text,
)

__all__ = ["CheckpointStoreConfig", "UploadConfig"]


@attrs.frozen(kw_only=True)
class CheckpointStoreConfig:
    """Where the primary, resumable checkpoint lives (``checkpoint_store.*``).

    ``bucket``/``credentials``/``prefix`` address a direct object-store primary and are ignored
    for ``backend="local"``; an empty ``prefix`` mirrors the local run layout.
    ``lease_ttl_s`` is how long the writer lease of a direct root protects its owner after
    each renewal (renewed after half of it); ``lease_takeover`` lets one launch take over an
    unexpired lease of another owner (only after making sure that owner is dead). Both are
    ignored for ``backend="local"`` (local disk fences with the attempt's writer lease).
    ``retry_wait_s`` is the outage each request to the bucket rides out (retries with
    backoff) before the save or resume fails. ``keep_last`` (``0``: keep all) is the direct
    primary's retention: after each save, committed iterations beyond the newest N are removed
    (never the one ``latest`` names). An empty ``credentials`` is boto3's default
    credential chain (see :func:`~statecraft.storage.s3_credentials.open_credentials`).

    Raises:
        ConfigError: a knob has the wrong type or a value outside what is allowed.
    """

    _knob_prefix = "checkpoint_store."

    backend: StoreBackend = attrs.field(default="local", metadata={_CHECK: _BACKENDS})
    bucket: str = attrs.field(default="", metadata={_CHECK: _text})
    credentials: str = attrs.field(default="", metadata={_CHECK: _text})
    prefix: str = attrs.field(default="", metadata={_CHECK: _text})
    lease_ttl_s: float = attrs.field(default=600, metadata={_CHECK: _LEASE_TTL})
    lease_takeover: bool = attrs.field(default=False, metadata={_CHECK: _flag})
    retry_wait_s: float = attrs.field(default=90, metadata={_CHECK: _LEASE_TTL})
    keep_last: int = attrs.field(default=0, metadata={_CHECK: _COUNT})

    def __attrs_post_init__(self) -> None:
        _raise_if(_check_fields(self), "CheckpointStoreConfig")


@attrs.frozen(kw_only=True)
class UploadConfig:
    """Archive upload of completed local-primary checkpoints (``upload.*``); off by default.
    ``keep_last`` (``0``: keep all) is the archive's remote retention: after a save's upload
    succeeded, published iterations beyond the newest N are removed from the bucket.

    ``retry_wait_s`` is the outage each request to the archive bucket rides out (retries with
    backoff) before that upload fails (best effort: logged, retried by a later save's
    catch-up; strict inside a validation publication).

    Raises:
        ConfigError: a knob has the wrong type or a value outside what is allowed.
    """

    _knob_prefix = "upload."

    enabled: bool = attrs.field(default=False, metadata={_CHECK: _flag})
    bucket: str = attrs.field(default="", metadata={_CHECK: _text})
    credentials: str = attrs.field(default="", metadata={_CHECK: _text})
    prefix: str = attrs.field(default="", metadata={_CHECK: _text})
    catch_up_per_save: int = attrs.field(default=2, metadata={_CHECK: _COUNT})
    pending_disk_share: float = attrs.field(default=0.5, metadata={_CHECK: _share})
    keep_last: int = attrs.field(default=0, metadata={_CHECK: _COUNT})
    retry_wait_s: float = attrs.field(default=90, metadata={_CHECK: _LEASE_TTL})

    def __attrs_post_init__(self) -> None:
        _raise_if(_check_fields(self), "UploadConfig")
