"""What an archive prefix holds, read-only: :func:`list_archive` (``statecraft archive list``,
and ``statecraft inspect s3://...`` when the prefix is an archive rather than a direct root).

An archive prefix is the remote checkpoints root the upload writes (``<prefix>/iter_N/``, a
full checkpoint with its ``.posttrain-manifest.json`` uploaded last) and the artifacts that
``archive publish --upload-prefix <prefix>`` writes under ``<prefix>/checkpoint_artifacts/
iter_N/`` (declared by ``.posttrain-archive.json`` first, committed by the artifact manifest
last). Each iteration is:

- ``complete``: its commit record is there, parses, and every file it names (for an artifact:
  every file its declaration names) is there with the recorded size;
- ``partial``: objects but no commit record yet (an upload or publish that was interrupted
  or is still running: a retry completes it);
- ``corrupt``: a commit record that does not parse, or a file it names that is missing or of
  another size (``reason`` says which).

A prefix whose manifests are direct-primary manifests (``statecraft.direct-manifest.v1``) is
not an archive: :func:`is_archive` says so and ``inspect`` reads it as a direct root.
Requests: one listing per prefix, a HEAD per object, a GET per commit record; no write.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from statecraft.checkpoint.archive.declaration import DECLARATION_NAME, decode_declaration
from statecraft.checkpoint.kernel.artifact_manifest import decode_artifact_manifest
from statecraft.checkpoint.kernel.layout import (
    ARTIFACT_MANIFEST_NAME,
    ARTIFACTS_DIR,
    MANIFEST_NAME,
    iter_dirname,
    parse_iter_dirname,
)
from statecraft.checkpoint.kernel.manifest import decode_manifest
from statecraft.errors import CheckpointCorruptError
from statecraft.storage.objects import ArchiveBucket

__all__ = ["ArchiveListing", "ArchivedIteration", "is_archive", "list_archive"]


@attrs.frozen
class ArchivedIteration:
    """One archived iteration (see the module doc for ``state``).

    Attributes:
        name: ``iter_N`` (``checkpoint_artifacts/iter_N`` for an artifact).
        kind: ``checkpoint`` or ``artifact``.
        key_prefix: its key prefix (``<prefix>/iter_N``).
        objects / bytes: what is stored under it.
        recognized: its commit record parsed as an archive's (a checkpoint manifest, or an
            artifact declaration).
    """

    name: str
    iteration: int
    kind: str
    state: str
    key_prefix: str
    objects: int
    bytes: int
    reason: str | None = None
    recognized: bool = False

    def to_dict(self, bucket_name: str) -> dict[str, Any]:
        return {
            "name": self.name,
            "iteration": self.iteration,
            "kind": self.kind,
            "state": self.state,
            "uri": f"s3://{bucket_name}/{self.key_prefix}",
            "objects": self.objects,
            "bytes": self.bytes,
            "reason": self.reason,
        }


@attrs.frozen
class ArchiveListing:
    """Every iteration under an archive prefix, oldest first, and what else is there."""

    bucket: str
    prefix: str
    iterations: tuple[ArchivedIteration, ...]
    other_entries: tuple[str, ...] = ()

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def count(self, state: str) -> int:
        return sum(1 for it in self.iterations if it.state == state)

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": self.uri,
            "iterations": [it.to_dict(self.bucket) for it in self.iterations],
            "complete": self.count("complete"),
            "partial": self.count("partial"),
            "corrupt": self.count("corrupt"),
            "bytes": sum(it.bytes for it in self.iterations),
            "other_entries": list(self.other_entries),
        }


def _key(prefix: str, relative: str) -> str:
    return f"{prefix}/{relative}" if prefix else relative


def _group(keys: Iterable[str], prefix: str) -> tuple[dict[int, list[str]], set[str]]:
    """``{N: [relative keys under iter_N/]}`` and the other top-level names under ``prefix``."""
    groups: dict[int, list[str]] = {}
    others: set[str] = set()
    start = len(prefix) + 1 if prefix else 0
    for key in keys:
        relative = key[start:]
        head, _, rest = relative.partition("/")
        number = parse_iter_dirname(head)
        if number is not None and rest:
            groups.setdefault(number, []).append(rest)
        else:
            others.add(head)
    return groups, others


def _missing(sizes: dict[str, int], expected: dict[str, int]) -> str | None:
    for path, size in sorted(expected.items()):
        if path not in sizes:
            return f"{path} is missing, which its commit record names"
        if sizes[path] != size:
            return f"{path} holds {sizes[path]} bytes; its commit record says {size}"
    return None


_Verdict = tuple[str, str | None, bool]  # state, reason, recognized


def _checkpoint(bucket: ArchiveBucket, key_prefix: str, sizes: dict[str, int]) -> _Verdict:
    if MANIFEST_NAME not in sizes:
        return (
            "partial",
            f"no {MANIFEST_NAME} yet: an interrupted upload (a retry completes it)",
            False,
        )
    source = f"s3://{bucket.identity().bucket}/{key_prefix}/{MANIFEST_NAME}"
    try:
        manifest = decode_manifest(bucket.get(f"{key_prefix}/{MANIFEST_NAME}"), source=source)
    except CheckpointCorruptError as exc:
        return "corrupt", f"{MANIFEST_NAME}: {exc.problem}", False
    problem = _missing(sizes, {path: entry.size for path, entry in manifest.files.items()})
    return ("corrupt", problem, True) if problem else ("complete", None, True)


def _artifact(bucket: ArchiveBucket, key_prefix: str, sizes: dict[str, int]) -> _Verdict:
    uri = f"s3://{bucket.identity().bucket}/{key_prefix}"
    try:
        declaration = decode_declaration(
            bucket.get(f"{key_prefix}/{DECLARATION_NAME}"), source=f"{uri}/{DECLARATION_NAME}"
        )
    except CheckpointCorruptError as exc:
        return "corrupt", f"{DECLARATION_NAME}: {exc.problem}", False
    if ARTIFACT_MANIFEST_NAME not in sizes:
        return "partial", f"no {ARTIFACT_MANIFEST_NAME} yet: an interrupted publish", True
    try:
        decode_artifact_manifest(
            bucket.get(f"{key_prefix}/{ARTIFACT_MANIFEST_NAME}"),
            source=f"{uri}/{ARTIFACT_MANIFEST_NAME}",
        )
    except CheckpointCorruptError as exc:
        return "corrupt", f"{ARTIFACT_MANIFEST_NAME}: {exc.problem}", True
    problem = _missing(sizes, {e.path: e.size for e in declaration.files})
    return ("corrupt", problem, True) if problem else ("complete", None, True)


def _iterations(
    bucket: ArchiveBucket, prefix: str, label: str, groups: dict[int, list[str]]
) -> list[ArchivedIteration]:
    found = []
    for number in sorted(groups):
        key_prefix = _key(prefix, iter_dirname(number))
        sizes = {}
        for relative in groups[number]:
            there = bucket.stat(f"{key_prefix}/{relative}")
            if there is not None:
                sizes[relative] = there.size
        if DECLARATION_NAME in sizes:
            kind, (state, reason, recognized) = "artifact", _artifact(bucket, key_prefix, sizes)
        else:
            kind, (state, reason, recognized) = "checkpoint", _checkpoint(bucket, key_prefix, sizes)
        name = f"{label}{iter_dirname(number)}"
        found.append(
            ArchivedIteration(
                name, number, kind, state, key_prefix, len(sizes), sum(sizes.values()), reason,
                recognized,
            )
        )  # fmt: skip
    return found


def list_archive(bucket: ArchiveBucket, prefix: str, *, only: int | None = None) -> ArchiveListing:
    """The iterations under ``prefix`` of ``bucket`` and under its ``checkpoint_artifacts/``
    (reads only; see the module doc). ``only``: just ``<prefix>/iter_<only>``.

    Raises:
        ObjectRequestError: a request failed.
    """
    prefix = prefix.strip("/")
    if only is not None:
        groups, _ = _group(bucket.list(_key(prefix, f"{iter_dirname(only)}/")), prefix)
        iterations = _iterations(bucket, prefix, "", groups)
        return ArchiveListing(bucket.identity().bucket, prefix, tuple(iterations))
    groups, others = _group(bucket.list(_key(prefix, "")), prefix)
    iterations = _iterations(bucket, prefix, "", groups)
    if ARTIFACTS_DIR in others:
        inner = _key(prefix, ARTIFACTS_DIR)
        artifact_groups, _ = _group(bucket.list(f"{inner}/"), inner)
        iterations += _iterations(bucket, inner, f"{ARTIFACTS_DIR}/", artifact_groups)
        others.discard(ARTIFACTS_DIR)
    return ArchiveListing(
        bucket.identity().bucket, prefix, tuple(iterations), tuple(sorted(others - {""}))
    )


def is_archive(listing: ArchiveListing) -> bool:
    """Some iteration's commit record parsed as an archive's (a checkpoint manifest or an
    artifact declaration); a direct root's manifests never do."""
    return any(it.recognized for it in listing.iterations)
