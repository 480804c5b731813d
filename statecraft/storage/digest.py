"""SHA-256 computed from the bytes as they are written, overlapped with the write itself.

``hashlib`` releases the GIL for large buffers, as ``os.write`` does, so hashing a large chunk
on a helper thread while the caller writes the same chunk costs about max(hash, write) rather
than their sum. The caller must keep the chunk alive until :meth:`OverlappedDigest.join`
returns (the writer joins before its ``write`` returns, so serializers that pass temporary
buffers are safe).
"""

from __future__ import annotations

import hashlib
import threading

__all__ = ["OverlappedDigest"]

OVERLAP_THRESHOLD = 1 << 20  # chunks at least this large are hashed on the helper thread


class OverlappedDigest:
    """A running SHA-256 whose large updates run concurrently with the caller."""

    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        self._thread: threading.Thread | None = None

    def start(self, chunk: memoryview | bytes) -> None:
        """Begin hashing ``chunk``; small chunks are hashed inline."""
        self.join()
        if len(chunk) < OVERLAP_THRESHOLD:
            self._sha.update(chunk)
            return
        self._thread = threading.Thread(target=self._sha.update, args=(chunk,), daemon=True)
        self._thread.start()

    def join(self) -> None:
        """Wait for the chunk in flight, if any."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def hexdigest(self) -> str:
        self.join()
        return self._sha.hexdigest()
