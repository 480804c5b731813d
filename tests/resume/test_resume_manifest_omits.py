"""Resume over a manifest that omits a file its plan requires (``data.pt`` dropped from the
manifest, the file left on disk): ``resume=auto`` passes over it with the reason and resumes
the previous iteration exactly, data cursor included; an explicit ``resume=`` to it is refused
with that reason. An explicit ``resume=`` to a directory without a manifest names the knob."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from checkpoint_runs import RUN, committed_run, open_checkpointer

from statecraft.checkpoint.kernel.layout import MANIFEST_NAME, iter_dirname
from statecraft.errors import CheckpointCorruptError


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Committed iterations 2, 4, 6 and 8 of a run with a data source (data.pt saved)."""
    return committed_run(tmp_path_factory.mktemp("pristine"), data=True)


def iter_path(out: Path, iteration: int) -> Path:
    (attempt,) = [p for p in RUN.job_dir(out).iterdir() if p.is_dir()]
    return attempt / "checkpoints" / iter_dirname(iteration)


def drop_data_from_manifest(out: Path, iteration: int) -> None:
    path = iter_path(out, iteration) / MANIFEST_NAME
    manifest = json.loads(path.read_bytes())
    del manifest["files"]["data.pt"]
    path.write_text(json.dumps(manifest, sort_keys=True))


class TestManifestOmitsData:
    def test_auto_resumes_the_previous_iteration_exactly(self, out: Path) -> None:
        """resume=auto passes over iter 8 naming data.pt and adopts iter 6 with its data
        cursor restored (not restarted)."""
        drop_data_from_manifest(out, 8)
        ckpt, objects = open_checkpointer(out)
        result = ckpt.resume()
        ckpt.close()
        assert result.resumed
        assert result.step == 6
        assert result.data == "restored"
        assert objects.cursor.position == 12  # two per step: iter 6's cursor
        (passed,) = result.passed_over
        assert passed.name == iter_dirname(8)
        assert "it omits ['data.pt']" in passed.reason

    def test_explicit_resume_is_refused(self, out: Path) -> None:
        """resume=<iter 8> fails with the verifier's reason naming the omitted file; nothing
        is loaded."""
        drop_data_from_manifest(out, 8)
        target = iter_path(out, 8)
        ckpt, objects = open_checkpointer(out, f"resume={target}")
        with pytest.raises(CheckpointCorruptError) as exc:
            ckpt.resume()
        ckpt.close()
        message = str(exc.value)
        assert iter_dirname(8) in message
        assert "it omits ['data.pt'], which is on disk" in message
        assert "resume from another checkpoint" in message
        assert objects.cursor.position == 0


class TestExplicitWithoutManifest:
    def test_message_names_the_resume_knob(self, out: Path) -> None:
        """resume=<an iter dir without its manifest> says the explicit resume failed, names
        the knob and how to fix it (no 'nothing to do')."""
        target = iter_path(out, 8)
        (target / MANIFEST_NAME).unlink()
        ckpt, _ = open_checkpointer(out, f"resume={target}")
        with pytest.raises(CheckpointCorruptError) as exc:
            ckpt.resume()
        ckpt.close()
        message = str(exc.value)
        assert f"the explicit resume={target} failed" in message
        assert "it has no manifest (an interrupted save, never a commit)" in message
        assert "Point resume at a committed iter_* directory" in message
        assert "nothing to do" not in message
