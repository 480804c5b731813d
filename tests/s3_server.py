"""A real S3 server for tests: SeaweedFS (``weed server -s3``) on loopback ports.

The server itself lives in :mod:`statecraft.cli.bench.s3_local` (``statecraft bench upload``
starts one too); this module keeps the names the tests import.
"""

from __future__ import annotations

from statecraft.cli.bench.s3_local import (
    BUCKET,
    CANARY,
    CANARY_BYTES,
    READY_TIMEOUT_S,
    S3Server,
    free_ports,
    weed_binary,
)

__all__ = [
    "BUCKET",
    "CANARY",
    "CANARY_BYTES",
    "READY_TIMEOUT_S",
    "S3Server",
    "free_ports",
    "weed_binary",
]
