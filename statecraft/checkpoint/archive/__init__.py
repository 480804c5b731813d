"""Archive records and destinations shared by the archive transactions.

- :mod:`~statecraft.checkpoint.archive.inventory`: what an archive holds (one
  :class:`ArchiveEntry` per file: relative path, size, sha256 when hashed) and the files of a
  local directory that are archived;
- :mod:`~statecraft.checkpoint.archive.marker`: the local ``.uploaded`` receipt
  (``statecraft.archive-marker.v1``; legacy one-line markers still gate retention);
- :mod:`~statecraft.checkpoint.archive.destination`: a bucket plus a key prefix, and the
  default prefix that mirrors the local run layout.

The transactions that use them: ``upload`` (full checkpoints, best effort, on the write job),
``publish`` (partial artifacts: declaration, payloads, verification, manifest last), ``fetch``
(staged, every payload proven, then placed), ``prune-verified``, and ``archive_prune``
(remote retention, :mod:`~statecraft.checkpoint.archive.remote_retention`: an iteration's
commit record is deleted before its objects).
"""
