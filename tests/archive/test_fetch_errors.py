"""fetch_archive refuses what it cannot prove, each with a clear error and nothing placed
(simulated bucket and disk: fast, no server)."""

from __future__ import annotations

import pytest

from statecraft.checkpoint.archive.fetch_bindings import fetch_archive
from statecraft.errors import ArchiveError, StoreConflictError
from statecraft.proofs.archive.fetch_scenarios import DST_ROOT, FetchScenario
from statecraft.storage import SimWorld
from statecraft.storage.objects import ObjectStore


def _world(kind: str = "artifact") -> tuple[SimWorld, FetchScenario]:
    scenario = FetchScenario("errors", kind=kind)
    world = SimWorld()
    scenario.setup(world)
    return world, scenario


def _fetch(world: SimWorld, prefix: str, name: str = "iter_000000004"):
    return fetch_archive(world.bucket, prefix, world.local_store(DST_ROOT), name)


def _nothing_placed(world: SimWorld) -> None:
    assert world.fs.listdir(DST_ROOT) == []


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("no-iter", "must end in iter_"),
        ("no-declaration", "no archive declaration"),
        ("bad-declaration", "not a valid archive declaration"),
        ("manifest-altered", "does not match the size and sha256"),
        ("both-manifests", "both an artifact manifest and a checkpoint manifest"),
    ],
)
def test_artifact_archive_that_cannot_be_proven(damage: str, message: str) -> None:
    """Each damage to an artifact archive is refused before anything is placed."""
    world, scenario = _world()
    prefix = scenario.remote_prefix
    bucket = world.bucket
    if damage == "no-iter":
        prefix = prefix.rsplit("/", 1)[0]
    elif damage == "no-declaration":
        bucket.delete(f"{prefix}/.posttrain-archive.json")
    elif damage == "bad-declaration":
        bucket.put(f"{prefix}/.posttrain-archive.json", b'{"schema": "nope"}')
    elif damage == "manifest-altered":
        manifest = bucket.get(f"{prefix}/.posttrain-checkpoint-artifact.json")
        bucket.put(f"{prefix}/.posttrain-checkpoint-artifact.json", manifest + b" ")
    else:
        bucket.put(f"{prefix}/.posttrain-manifest.json", b"{}")
    with pytest.raises(ArchiveError, match=message):
        _fetch(world, prefix)
    _nothing_placed(world)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("file-missing", r"lacks \['optim.pt'\]"),
        ("stray-object", "not named by the manifest"),
        ("bad-manifest", "not a valid checkpoint manifest"),
    ],
)
def test_checkpoint_archive_that_cannot_be_proven(damage: str, message: str) -> None:
    """A full-checkpoint archive missing a file its manifest names, holding an unprovable
    stray object, or with a broken manifest is refused."""
    world, scenario = _world("checkpoint")
    prefix = scenario.remote_prefix
    if damage == "file-missing":
        world.bucket.delete(f"{prefix}/optim.pt")
    elif damage == "stray-object":
        world.bucket.tamper(f"{prefix}/notes.txt", b"foreign")
    else:
        world.bucket.put(f"{prefix}/.posttrain-manifest.json", b"[]")
    with pytest.raises(ArchiveError, match=message):
        _fetch(world, prefix, "iter_000000002")
    _nothing_placed(world)


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", ".hidden"])
def test_bad_destination_names_are_refused(name: str) -> None:
    """The destination name is one plain path component."""
    world, scenario = _world()
    with pytest.raises(ArchiveError, match="plain directory name"):
        _fetch(world, scenario.remote_prefix, name)
    _nothing_placed(world)


def test_destination_must_be_local() -> None:
    """An object store is not a fetch destination."""
    world, scenario = _world()
    with pytest.raises(ArchiveError, match="not a local directory"):
        fetch_archive(world.bucket, scenario.remote_prefix, ObjectStore(world.bucket), "x")


def test_rename_dir_never_moves_over_an_existing_name() -> None:
    """LocalStore.rename_dir refuses an existing target (even an empty directory)."""
    world = SimWorld()
    store = world.local_store("/r")
    store.make_dirs("a")
    store.make_dirs("b")
    with pytest.raises(StoreConflictError):
        store.rename_dir("a", "b")
    store.rename_dir("a", "c")
    assert sorted(store.list("")) == ["b", "c"]
