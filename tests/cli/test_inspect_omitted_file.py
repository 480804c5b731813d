"""``statecraft inspect`` flags a committed iteration whose manifest omits a file its plan
requires (``data.pt`` dropped from the manifest, the file left on disk): corrupt, with the
reason, not counted, and resume=auto's pick is the previous iteration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from checkpoint_runs import RUN, committed_run

from statecraft.checkpoint.kernel.layout import MANIFEST_NAME, iter_dirname
from statecraft.cli.inspect import inspect_path


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Committed iterations 2, 4, 6 and 8 of a run with a data source (data.pt saved)."""
    return committed_run(tmp_path_factory.mktemp("pristine"), data=True)


@pytest.mark.parametrize("verify", [False, True])
def test_omitted_data_is_flagged(out: Path, verify: bool) -> None:
    """Without and with --verify, iter 8 is corrupt naming data.pt; auto picks iter 6."""
    (attempt,) = [p for p in RUN.job_dir(out).iterdir() if p.is_dir()]
    path = attempt / "checkpoints" / iter_dirname(8) / MANIFEST_NAME
    manifest = json.loads(path.read_bytes())
    del manifest["files"]["data.pt"]
    path.write_text(json.dumps(manifest, sort_keys=True))
    report = inspect_path(RUN.job_dir(out), verify=verify)
    (entry,) = [a for a in report["attempts"] if a["checkpoints"]]
    newest = entry["checkpoints"]["iterations"][0]
    assert newest["name"] == iter_dirname(8)
    assert newest["state"] == "corrupt"
    assert "it omits ['data.pt']" in newest["reason"]
    assert report["resume_auto"]["pick"] == iter_dirname(6)
