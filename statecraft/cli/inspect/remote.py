"""``statecraft inspect s3://bucket/prefix[/iter_N]``: a direct object-store checkpoints root,
read-only.

It lists the root's ``iter_*`` prefixes and reads each ``.posttrain-manifest.json``
(``statecraft.direct-manifest.v1``): ``committed`` when it parses and names control files that
are there with their recorded sizes and DCP components that hold a ``.metadata``; ``corrupt``
when it does not; ``partial`` without one (an interrupted save: never adopted). Per
iteration it reports the DCP components (:mod:`.dcp`: shard counts, sizes, world size at save),
the control generations, the world size at save (the manifest writer's ``world_size`` when
recorded, else the shard files'), and for the root the ``latest_checkpoint.txt`` pointer and the
object-store lease (owner, host, PID, generation, expiry, whether it has expired).

Every request goes through :class:`ReadOnlyBucket`, which refuses PUT and DELETE: inspect
only LISTs, HEADs and GETs (the tests compare every key and etag before and after).
"""

from __future__ import annotations

import time
from typing import Any, NoReturn

from statecraft.checkpoint.direct.manifest import (
    CONTROL_DIR,
    DirectManifest,
    decode_direct_manifest,
)
from statecraft.checkpoint.direct.root import parse_direct_uri
from statecraft.checkpoint.fencing.object_lease import OBJECT_LEASE_NAME, read_object_lease
from statecraft.checkpoint.kernel.layout import (
    LATEST_POINTER,
    MANIFEST_NAME,
    iter_dirname,
    parse_iter_dirname,
    parse_latest,
)
from statecraft.cli.inspect.dcp import dcp_component_report, dcp_lines, dcp_report
from statecraft.cli.inspect.remote_archive import archive_lines, inspect_archive
from statecraft.errors import CheckpointCorruptError, InspectError, StoreError, WriterLeaseError
from statecraft.storage.objects import ObjectInfo, ObjectStore

__all__ = ["ReadOnlyBucket", "inspect_remote", "render_remote_text"]


class ReadOnlyBucket:
    """A bucket client whose writes are refused: what ``statecraft inspect`` reads through."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __repr__(self) -> str:
        return f"ReadOnlyBucket({self._inner!r})"

    def _refuse(self, op: str, key: str) -> NoReturn:
        raise StoreError(f"statecraft inspect is read-only but something tried to {op} {key!r}")

    def put(
        self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None
    ) -> str:
        self._refuse("PUT", key)

    def delete(self, key: str) -> None:
        self._refuse("DELETE", key)

    def upload_from(self, key: str, *args: Any, **kwargs: Any) -> str:
        self._refuse("upload", key)

    def download_into(self, key: str, *args: Any, **kwargs: Any) -> Any:
        self._refuse("download into a store from", key)

    def get(self, key: str) -> bytes:
        return bytes(self._inner.get(key))

    def get_range(self, key: str, start: int, length: int) -> bytes:
        return bytes(self._inner.get_range(key, start, length))

    def head(self, key: str) -> ObjectInfo | None:
        info: ObjectInfo | None = self._inner.head(key)
        return info

    def list(self, prefix: str) -> list[str]:
        return list(self._inner.list(prefix))

    def stat(self, key: str) -> Any:
        return self._inner.stat(key)

    def identity(self) -> Any:
        return self._inner.identity()

    def describe(self) -> str:
        return str(self._inner.describe())


def _latest(store: ObjectStore, present: dict[int, dict[str, Any]]) -> dict[str, Any]:
    try:
        data = store.read_bytes(LATEST_POINTER)
    except FileNotFoundError:
        return {"status": "missing", "names": None, "detail": f"no {LATEST_POINTER}"}
    try:
        named = parse_latest(data)
    except ValueError as exc:
        return {"status": "garbage", "names": None, "detail": f"unreadable ({exc})"}
    name = iter_dirname(named)
    if named not in present:
        return {"status": "dangling", "names": name, "detail": f"names {name}, which is absent"}
    return {"status": "ok", "names": name, "detail": f"names {name} ({present[named]['state']})"}


def _lease(store: ObjectStore, now: float) -> dict[str, Any] | None:
    try:
        found = read_object_lease(store)
    except WriterLeaseError as exc:
        return {"status": "malformed", "detail": str(exc)}
    if found is None:
        return None
    record, etag = found
    return record.report(etag, now) | {"detail": record.describe()}


def _check_committed(store: ObjectStore, manifest: DirectManifest, names: set[str]) -> str | None:
    """Why a parsed manifest does not describe a complete checkpoint (``None``: it does)."""
    for name, entry in sorted(manifest.control.items()):
        path = manifest.control_path(name)
        stat = store.stat(path)
        if stat is None or stat.is_dir:
            return f"control file {path} is missing"
        if stat.size != entry.size:
            return f"control file {path} is {stat.size} B, the manifest recorded {entry.size} B"
    for component in sorted(manifest.components):
        meta = f"{manifest.component_path(component)}/.metadata"
        if meta not in names:
            return f"DCP component {component}: {meta} is missing"
    return None


def _dcp_problem(
    store: ObjectStore, manifest: DirectManifest, dcp: dict[str, Any] | None
) -> str | None:
    """Why the DCP components the manifest names would not load (``None``: no problem seen).
    A ``.metadata`` naming a global the restricted reader does not know is not counted."""
    for component in sorted(manifest.components):
        directory = manifest.components[component]
        report = (dcp or {}).get(directory) or dcp_component_report(
            store, manifest.component_path(component)
        )
        if report is None:
            return f"DCP component {component}: no .metadata or shards"
        meta = report["metadata"]
        if meta["problem"] and "is not allowed" not in meta["problem"]:
            return f"DCP component {component}: .metadata {meta['problem']}"
        if meta["missing_files"]:
            return (
                f"DCP component {component}: shards named by .metadata are missing: "
                f"{', '.join(meta['missing_files'])}"
            )
    return None


def _iteration(store: ObjectStore, iteration: int, keys: list[str]) -> dict[str, Any]:
    name = iter_dirname(iteration)
    relative = {k[len(name) + 1 :] for k in keys}
    names = {f"{name}/{r}" for r in relative}
    manifest: DirectManifest | None = None
    reason = None
    if MANIFEST_NAME in relative:
        source = f"{store.describe().rstrip('/')}/{name}/{MANIFEST_NAME}"
        try:
            manifest = decode_direct_manifest(
                store.read_bytes(f"{name}/{MANIFEST_NAME}"), source=source, iteration=iteration
            )
        except CheckpointCorruptError as exc:
            state, reason = "corrupt", str(exc)
        else:
            reason = _check_committed(store, manifest, names)
            state = "corrupt" if reason else "committed"
    else:
        state, reason = "partial", f"no {MANIFEST_NAME}: an interrupted save, never adopted"
    dcp = dcp_report(store, name)
    if manifest is not None and reason is None:
        reason = _dcp_problem(store, manifest, dcp)
        state = "corrupt" if reason else "committed"
    world: int | None = None
    recorded = manifest.writer.get("world_size", "") if manifest is not None else ""
    if recorded.isdigit():
        world = int(recorded)  # what the writer recorded in the manifest
    elif dcp:
        counts = [r["world_size_at_save"] for r in dcp.values() if r["world_size_at_save"]]
        world = max(counts) if counts else None
    generations = sorted(
        {r.split("/")[2] for r in relative if r.startswith(f"{CONTROL_DIR}/") and r.count("/") >= 3}
    )
    return {
        "name": name,
        "iteration": iteration,
        "uri": f"{store.describe().rstrip('/')}/{name}",
        "kind": "checkpoint",
        "state": state,
        "reason": reason,
        "objects": len(relative),
        "manifest": None
        if manifest is None
        else {
            "control_generation": manifest.control_generation,
            "components": manifest.components,
            "control": {n: e.size for n, e in manifest.control.items()},
            "plan": list(manifest.plan),
            "writer": manifest.writer,
            "lease_generation": manifest.lease_generation,
        },
        "control_generations": generations,
        "dcp": dcp,
        "world_size_at_save": world,
    }


def inspect_remote(uri: str, bucket: Any, *, now: float | None = None) -> dict[str, Any]:
    """Describe the direct checkpoints root (or one iteration) at ``uri`` in ``bucket``.
    Reads only (see the module doc).

    Returns:
        ``{"path", "kind" ("remote_root" | "remote_iteration"), "root", "latest", "lease",
        "iterations" (newest first), "newest_committed", "other_entries", "explicit_resume"}``;
        for an archive (the upload's or ``archive publish``'s, :mod:`.remote_archive`):
        ``{"path", "kind": "remote_archive", "root", "iterations" (oldest first, each
        ``complete`` / ``partial`` / ``corrupt``), "complete", "partial", "corrupt", "bytes",
        "newest_complete", "other_entries"}``.

    Raises:
        ConfigError: ``uri`` is not ``s3://bucket/prefix[/iter_N]``.
        InspectError: nothing is stored under it.
    """
    _, prefix, only = parse_direct_uri(uri)
    name = bucket.identity().bucket
    archive = inspect_archive(uri, ReadOnlyBucket(bucket), prefix, only)
    if archive is not None:
        return archive
    store = ObjectStore(ReadOnlyBucket(bucket), prefix=prefix, name=name)
    root_uri = f"s3://{name}/{prefix}" if prefix else f"s3://{name}"
    keys = [
        k[len(prefix) + 1 :] if prefix else k
        for k in store.client.list(f"{prefix}/" if prefix else "")
    ]
    by_iteration: dict[int, list[str]] = {}
    others: set[str] = set()
    for key in keys:
        head = key.split("/", 1)[0]
        number = parse_iter_dirname(head)
        if number is not None and "/" in key:
            by_iteration.setdefault(number, []).append(key)
        elif key not in (LATEST_POINTER, OBJECT_LEASE_NAME):
            others.add(head)
    if not keys or (only is not None and only not in by_iteration):
        where = root_uri if only is None else f"{root_uri}/{iter_dirname(only)}"
        raise InspectError(
            f"{where}: no objects there; point inspect at a direct checkpoints root "
            "(s3://<bucket>/<...>/checkpoints) or one of its iter_* prefixes"
        )
    numbers = sorted(by_iteration, reverse=True)
    if only is not None:
        numbers = [only]
    iterations = [_iteration(store, n, by_iteration[n]) for n in numbers]
    present = {it["iteration"]: it for it in iterations}
    committed = [it for it in iterations if it["state"] == "committed"]
    data: dict[str, Any] = {
        "path": uri,
        "kind": "remote_root" if only is None else "remote_iteration",
        "root": root_uri,
        "latest": _latest(store, present) if only is None else None,
        "lease": _lease(store, time.time() if now is None else now),
        "iterations": iterations,
        "newest_committed": committed[0]["name"] if committed else None,
        "other_entries": sorted(others),
        "total_objects": len(keys),
        "explicit_resume": None,
    }
    if only is not None:
        it = iterations[0]
        accepted = it["state"] == "committed"
        data["explicit_resume"] = {
            "accepted": accepted,
            "reason": f"resume={it['uri']} would load {it['name']}"
            if accepted
            else f"resume={it['uri']} would fail (no fallback): {it['reason']}",
        }
    return data


def render_remote_text(data: dict[str, Any]) -> str:
    """The text of :func:`inspect_remote`'s data."""
    if data["kind"] == "remote_archive":
        return "\n".join(archive_lines(data))
    lines = [f"direct checkpoints root {data['root']} ({data['total_objects']} objects)"]
    lease = data["lease"]
    if lease is None:
        lines.append("  lease: none (no writer holds this root)")
    elif lease["status"] == "malformed":
        lines.append(f"  lease: MALFORMED: {lease['detail']}")
    else:
        lines.append(f"  lease: {lease['status']}: {lease['detail']}")
    if data["latest"] is not None:
        lines.append(f"  {LATEST_POINTER}: {data['latest']['status']}: {data['latest']['detail']}")
    for it in data["iterations"]:
        world = it["world_size_at_save"]
        at = f", saved at world size {world}" if world else ""
        lines.append(f"  {it['name']}: {it['state']} ({it['objects']} objects{at})")
        if it["reason"]:
            lines.append(f"      {it['reason']}")
        manifest = it["manifest"]
        if manifest is not None:
            control = ", ".join(f"{n} {s} B" for n, s in sorted(manifest["control"].items()))
            lines.append(
                f"      control generation {manifest['control_generation']}: {control}; "
                f"lease generation {manifest['lease_generation']}"
            )
        lines.extend(dcp_lines(it["dcp"]))
    if data["explicit_resume"] is not None:
        lines.append(data["explicit_resume"]["reason"])
    elif data["newest_committed"]:
        lines.append(f"newest committed: {data['newest_committed']}")
    else:
        lines.append("no committed iteration")
    if data["other_entries"]:
        lines.append(f"  other entries: {', '.join(data['other_entries'])}")
    return "\n".join(lines)
