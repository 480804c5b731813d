"""verify_artifact (statecraft/checkpoint/kernel/artifact_verify.py; issue 9, items 2 and 7): a
committed partial artifact is proven intact, and every way one is not is refused with a message
naming the directory or file, the problem and what to do; nothing is ever written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import xxhash
from artifact_files import default_payloads, model_state, serialized, tree, write_artifact
from checkpoint_runs import flip_tensor_bit

from statecraft.checkpoint.kernel.artifact_verify import VerifiedArtifact, verify_artifact
from statecraft.checkpoint.kernel.components import ComponentPlan
from statecraft.checkpoint.kernel.layout import ARTIFACT_MANIFEST_NAME, MANIFEST_NAME, iter_dirname
from statecraft.checkpoint.state import TrainerState
from statecraft.errors import CheckpointCorruptError, CheckpointError, TrainerStateError
from statecraft.storage import LocalStore


def store_of(root: Path) -> LocalStore:
    return LocalStore(str(root))


def refused(root: Path, iteration: int, **kwargs: object) -> str:
    """The message verify_artifact refuses with; asserts nothing under ``root`` changed."""
    before = tree(root)
    with pytest.raises(CheckpointCorruptError) as info:
        verify_artifact(store_of(root), iteration, **kwargs)  # type: ignore[arg-type]
    assert tree(root) == before
    return str(info.value)


def rerecord(where: Path, name: str, blob: bytes) -> None:
    """Replace ``name`` with ``blob`` and re-record its size and digest in the manifest."""
    (where / name).write_bytes(blob)
    manifest = json.loads((where / ARTIFACT_MANIFEST_NAME).read_bytes())
    manifest["files"][name] = {
        "size": len(blob),
        "digest": {"algorithm": "xxh3_128", "value": xxhash.xxh3_128_hexdigest(blob)},
    }
    (where / ARTIFACT_MANIFEST_NAME).write_text(json.dumps(manifest, sort_keys=True, indent=1))


class TestVerified:
    def test_a_model_only_artifact_verifies_and_keeps_its_payload(self, tmp_path: Path) -> None:
        """[model]: verified at digest level, model.pt parsed and kept, no trainer state,
        nothing written."""
        write_artifact(tmp_path, 6, ["model"])
        before = tree(tmp_path)
        verified = verify_artifact(store_of(tmp_path), 6, keep_payloads=True)
        assert isinstance(verified, VerifiedArtifact)
        assert verified.manifest.plan == ComponentPlan.of(["model"])
        assert verified.trainer is None
        assert verified.where == f"local:{tmp_path}/{iter_dirname(6)}"
        assert verified.path("model.pt") == f"{iter_dirname(6)}/model.pt"
        state = model_state()
        assert all(torch.equal(verified.payloads["model.pt"][k], state[k]) for k in state)
        assert tree(tmp_path) == before

    def test_training_state_is_parsed_into_a_trainer_state(self, tmp_path: Path) -> None:
        """[model, training_state] with data.pt: trainer.pt becomes a TrainerState at the
        iteration; payloads are dropped unless kept."""
        write_artifact(tmp_path, 4, ["training_state", "model"], data=True)
        verified = verify_artifact(store_of(tmp_path), 4)
        assert isinstance(verified.trainer, TrainerState)
        assert verified.trainer.optimizer_step == 4
        assert dict(verified.payloads) == {}
        assert set(verified.manifest.files) == {"model.pt", "trainer.pt", "data.pt"}

    def test_manifest_level_opens_no_file(self, tmp_path: Path) -> None:
        """Level "manifest" returns the record without reading a payload (garbage passes)."""
        where = write_artifact(tmp_path, 2, ["optimizer"])
        (where / "optim.pt").write_bytes(b"garbage")
        verified = verify_artifact(store_of(tmp_path), 2, level="manifest")
        assert verified.manifest.components == ("optimizer",)

    def test_size_level_skips_the_digest(self, tmp_path: Path) -> None:
        """Level "size" does not hash: a flipped bit goes unseen (the documented trade)."""
        where = write_artifact(tmp_path, 2, ["model"])
        flip_tensor_bit(where / "model.pt")
        assert verify_artifact(store_of(tmp_path), 2, level="size").iteration == 2
        assert "does not match" in refused(tmp_path, 2)

    def test_only_restricts_hashing_and_parsing(self, tmp_path: Path) -> None:
        """only=("model.pt",): a damaged optim.pt of the right size is neither hashed nor
        parsed, while a full verification refuses it."""
        where = write_artifact(tmp_path, 2, ["model", "optimizer"])
        size = (where / "optim.pt").stat().st_size
        (where / "optim.pt").write_bytes(b"\0" * size)
        verified = verify_artifact(store_of(tmp_path), 2, only=("model.pt",), keep_payloads=True)
        assert set(verified.payloads) == {"model.pt"}
        assert "optim.pt: digest" in refused(tmp_path, 2)

    def test_model_pt_loads_with_plain_torch_load(self, tmp_path: Path) -> None:
        """An artifact's model.pt is an ordinary torch.save file: torch.load(weights_only=True)
        reads the weights without statecraft."""
        where = write_artifact(tmp_path, 2, ["model"])
        loaded = torch.load(where / "model.pt", weights_only=True)
        assert set(loaded) == {"weight", "bias"}


class TestRefused:
    def test_not_committed(self, tmp_path: Path) -> None:
        """Files without the artifact manifest: "not committed"."""
        write_artifact(tmp_path, 3, ["model"], manifest=False)
        message = refused(tmp_path, 3)
        assert message.startswith(f"local:{tmp_path}/{iter_dirname(3)}: has no artifact manifest")
        assert "not committed (an interrupted artifact save, or no artifact at this step)" in (
            message
        )

    def test_no_directory_at_all(self, tmp_path: Path) -> None:
        """No iter_* directory is "not committed" too."""
        assert "not committed" in refused(tmp_path, 9)

    def test_a_full_checkpoint_manifest_inside(self, tmp_path: Path) -> None:
        """A .posttrain-manifest.json in an artifact dir is refused, whether or not an
        artifact manifest is there too."""
        where = write_artifact(tmp_path, 5, ["model"])
        (where / MANIFEST_NAME).write_text("{}")
        message = refused(tmp_path, 5)
        assert message.startswith(f"local:{tmp_path}/{iter_dirname(5)}: is an artifact directory")
        assert "holding a full-checkpoint manifest (.posttrain-manifest.json)" in message
        (where / ARTIFACT_MANIFEST_NAME).unlink()
        assert "holding a full-checkpoint manifest" in refused(tmp_path, 5)

    def test_a_damaged_manifest(self, tmp_path: Path) -> None:
        """Truncated manifest JSON: refused as not valid JSON, naming the manifest."""
        where = write_artifact(tmp_path, 5, ["model"])
        manifest = where / ARTIFACT_MANIFEST_NAME
        manifest.write_bytes(manifest.read_bytes()[:40])
        message = refused(tmp_path, 5)
        assert message.startswith(f"local:{manifest}: artifact manifest is not valid JSON")

    def test_a_manifest_naming_another_iteration(self, tmp_path: Path) -> None:
        """A copied directory: the manifest's iteration disagrees with its iter_* name."""
        where = write_artifact(tmp_path, 5, ["model"])
        where.rename(tmp_path / iter_dirname(7))
        assert "artifact manifest says iteration 5 but lives in iter_000000007" in refused(
            tmp_path, 7
        )

    def test_files_outside_the_plan(self, tmp_path: Path) -> None:
        """A [model] manifest recording optim.pt too: refused naming the file and the plan."""
        payloads = {"model.pt": model_state(), "optim.pt": {"state": {}}}
        write_artifact(tmp_path, 2, ["model"], payloads=payloads)
        message = refused(tmp_path, 2)
        assert "the artifact manifest does not describe its plan: it records ['optim.pt'], " in (
            message
        )
        assert "not written by its plan [model] (entries ['model.pt'])" in message

    def test_a_required_file_not_recorded(self, tmp_path: Path) -> None:
        """A [model, training_state] manifest without trainer.pt: refused naming it."""
        write_artifact(
            tmp_path, 2, ["model", "training_state"], payloads={"model.pt": model_state()}
        )
        assert "it lacks ['trainer.pt'], required by its plan [model, training_state]" in (
            refused(tmp_path, 2)
        )

    def test_another_format(self, tmp_path: Path) -> None:
        """A manifest of another format is refused naming both formats."""
        where = write_artifact(tmp_path, 2, ["model"])
        manifest = json.loads((where / ARTIFACT_MANIFEST_NAME).read_bytes())
        manifest["format"] = "dcp"
        (where / ARTIFACT_MANIFEST_NAME).write_text(json.dumps(manifest))
        assert "it records format 'dcp' but is read by ConsolidatedWriter()" in refused(tmp_path, 2)

    def test_a_missing_file(self, tmp_path: Path) -> None:
        """A recorded file deleted: "is missing", naming it."""
        where = write_artifact(tmp_path, 2, ["model", "optimizer"])
        (where / "optim.pt").unlink()
        assert refused(tmp_path, 2).startswith(f"local:{where}/optim.pt: is missing.")

    def test_a_symlink_is_not_followed(self, tmp_path: Path) -> None:
        """A recorded file replaced by a symlink to an identical copy: not a regular file."""
        where = write_artifact(tmp_path, 2, ["model"])
        copy = tmp_path / "elsewhere.pt"
        copy.write_bytes((where / "model.pt").read_bytes())
        (where / "model.pt").unlink()
        (where / "model.pt").symlink_to(copy)
        message = refused(tmp_path, 2)
        assert message.startswith(f"local:{where}/model.pt: is a symlink, not a regular file")

    def test_a_truncated_file(self, tmp_path: Path) -> None:
        """A file of another size than recorded: refused naming both sizes."""
        where = write_artifact(tmp_path, 2, ["model"])
        size = (where / "model.pt").stat().st_size
        (where / "model.pt").write_bytes((where / "model.pt").read_bytes()[:-10])
        assert f"has {size - 10} bytes, the artifact manifest recorded {size}" in refused(
            tmp_path, 2
        )

    def test_a_flipped_bit(self, tmp_path: Path) -> None:
        """Same size, other bytes: the digest refuses it."""
        where = write_artifact(tmp_path, 2, ["model"])
        flip_tensor_bit(where / "model.pt")
        message = refused(tmp_path, 2)
        assert message.startswith(f"local:{where}/model.pt: digest xxh3_128 ")
        assert "does not match the artifact manifest's" in message

    def test_a_file_weights_only_cannot_load(self, tmp_path: Path) -> None:
        """data.pt holding a numpy float, digest re-recorded: refused as unloadable with
        weights_only, naming the file."""
        where = write_artifact(tmp_path, 2, ["training_state"], data=True)
        rerecord(where, "data.pt", serialized({"position": np.float64(2.0)}))
        message = refused(tmp_path, 2)
        assert message.startswith(f"local:{where}/data.pt: ")
        assert "numpy" in message

    def test_bytes_that_are_not_a_torch_file(self, tmp_path: Path) -> None:
        """Recorded garbage bytes: refused as not loadable."""
        where = write_artifact(tmp_path, 2, ["model"])
        rerecord(where, "model.pt", b"not a zip archive")
        assert refused(tmp_path, 2).startswith(f"local:{where}/model.pt: ")

    def test_trainer_state_of_another_step(self, tmp_path: Path) -> None:
        """trainer.pt recording optimizer_step 8 in iter_000000004: conflicting clocks."""
        payloads = default_payloads(ComponentPlan.of(["training_state"]), 8)
        where = write_artifact(tmp_path, 4, ["training_state"], payloads=payloads)
        message = refused(tmp_path, 4)
        assert message.startswith(f"local:{where}/trainer.pt: records optimizer_step 8 but lives")

    def test_a_malformed_trainer_state(self, tmp_path: Path) -> None:
        """trainer.pt that is not a trainer state: TrainerStateError naming the file."""
        write_artifact(tmp_path, 4, ["training_state"], payloads={"trainer.pt": {"x": 1}})
        before = tree(tmp_path)
        with pytest.raises(TrainerStateError, match=r"trainer\.pt"):
            verify_artifact(store_of(tmp_path), 4)
        assert tree(tmp_path) == before

    def test_an_unknown_level(self, tmp_path: Path) -> None:
        """A level outside manifest/size/digest is a caller error."""
        with pytest.raises(CheckpointError, match="verify level must be one of"):
            verify_artifact(store_of(tmp_path), 1, level="fast")
