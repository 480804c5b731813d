"""The required-files rule (statecraft.checkpoint.kernel.required_files): a committed manifest
lists every file its checkpoint's plan requires; one that omits a planned entry the iteration
holds is not a commit, at every verification level that reads files and at the catalog's cheap
depth."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from checkpoint_runs import RUN, committed_run

from statecraft.checkpoint.kernel.catalog import CheckpointState, Depth, scan
from statecraft.checkpoint.kernel.layout import MANIFEST_NAME, iter_dirname
from statecraft.checkpoint.kernel.required_files import omitted_entries, omitted_problem
from statecraft.checkpoint.kernel.verify import read_manifest, verify_checkpoint
from statecraft.errors import CheckpointCorruptError
from statecraft.storage.local import LocalStore


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Committed iterations 2, 4, 6 and 8 of a run with a data source (data.pt saved)."""
    return committed_run(tmp_path_factory.mktemp("pristine"), data=True)


def store_of(out: Path) -> LocalStore:
    (attempt,) = [p for p in RUN.job_dir(out).iterdir() if p.is_dir()]
    return LocalStore(str(attempt / "checkpoints"))


def drop_from_manifest(store: LocalStore, iteration: int, name: str) -> None:
    """Delete ``name``'s entry from the committed manifest; the file stays on disk."""
    path = Path(store.root) / iter_dirname(iteration) / MANIFEST_NAME
    manifest = json.loads(path.read_bytes())
    del manifest["files"][name]
    path.write_text(json.dumps(manifest, sort_keys=True))


class TestOmittedEntries:
    def test_intact_manifest_omits_nothing(self, out: Path) -> None:
        """A manifest the save wrote lists every planned entry its directory holds."""
        store = store_of(out)
        manifest = read_manifest(store, 8)
        assert omitted_entries(manifest, store.list(iter_dirname(8))) == []
        assert omitted_problem(store, iter_dirname(8), manifest) is None

    def test_dropped_data_entry_is_named(self, out: Path) -> None:
        """data.pt on disk but not in the manifest is the omitted entry."""
        store = store_of(out)
        drop_from_manifest(store, 8, "data.pt")
        manifest = read_manifest(store, 8)
        assert omitted_entries(manifest, store.list(iter_dirname(8))) == ["data.pt"]
        problem = omitted_problem(store, iter_dirname(8), manifest)
        assert problem is not None
        assert "it omits ['data.pt']" in problem

    def test_files_outside_the_plan_are_ignored(self, out: Path) -> None:
        """A writer temporary or a marker beside the files is no plan entry: nothing omitted."""
        store = store_of(out)
        manifest = read_manifest(store, 8)
        names = [*store.list(iter_dirname(8)), ".optim.pt.tmp-1-1", ".uploaded"]
        assert omitted_entries(manifest, names) == []


class TestVerification:
    @pytest.mark.parametrize("level", ["size", "digest"])
    def test_a_manifest_omitting_data_is_not_a_commit(self, out: Path, level: str) -> None:
        """verify_checkpoint refuses the iteration, naming data.pt and why."""
        store = store_of(out)
        drop_from_manifest(store, 8, "data.pt")
        with pytest.raises(CheckpointCorruptError, match=r"it omits \['data.pt'\]"):
            verify_checkpoint(store, 8, level=level)
        verify_checkpoint(store, 6, level=level)  # the others are untouched

    def test_the_catalog_passes_over_it_at_every_depth(self, out: Path) -> None:
        """The verified catalog and retention's cheap reading both call it corrupt, with the
        reason; auto's pick is the previous iteration."""
        store = store_of(out)
        drop_from_manifest(store, 8, "data.pt")
        verified = scan(store, level="size", keep_payloads=False)
        assert verified.entry(8).state is CheckpointState.CORRUPT
        assert "data.pt" in verified.entry(8).reason
        pick = verified.pick()
        assert pick.chosen is not None
        assert pick.chosen.iteration == 6
        cheap = scan(store, depth=Depth.STAT)
        assert cheap.entry(8).state is CheckpointState.CORRUPT
        assert "data.pt" in cheap.entry(8).reason

    def test_a_run_without_a_data_source_still_verifies(self, tmp_path: Path) -> None:
        """No false alarm: a checkpoint saved without a data source has no data.pt and its
        manifest omits nothing."""
        store = store_of(committed_run(tmp_path / "nodata", data=False))
        assert "data.pt" not in store.list(iter_dirname(8))
        verify_checkpoint(store, 8, level="digest")
        assert scan(store, depth=Depth.STAT).entry(8).state is CheckpointState.COMMITTED
