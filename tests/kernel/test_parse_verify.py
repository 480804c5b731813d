"""Verification parses every component the way resume loads it (issue 7, trap 2).

A component whose digest matches its manifest but which ``torch.load(weights_only=True)``
refuses (a ``numpy.float64`` in ``data.pt``) used to verify, so ``resume=auto`` adopted it and
failed with torch's cut, colour-coded message every time, and ``inspect --verify`` called it
fine. Each test damages a private copy of a real run the way a saving bug does: the file is
re-written with ``torch.save`` and the manifest re-records its size and digest.
"""

from __future__ import annotations

import io
import json
import logging
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import xxhash
from checkpoint_runs import RUN, committed_run, open_checkpointer

from statecraft.checkpoint.kernel import listed_files
from statecraft.checkpoint.kernel.layout import MANIFEST_NAME, iter_dirname
from statecraft.checkpoint.kernel.verify import verify_checkpoint
from statecraft.cli.inspect import inspect_path
from statecraft.errors import CheckpointCorruptError
from statecraft.storage import LocalStore
from statecraft.writers.consolidated import ConsolidatedWriter
from statecraft.writers.load_errors import explain_load_failure, plain_text

NUMPY_REFUSAL = (
    "data.pt: holds numpy.float64 (numpy._core.multiarray.scalar), which "
    "torch.load(weights_only=True) refuses; the saving code must convert it "
    "(float(x) / torch.tensor(x))"
)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Committed iterations 2, 4, 6 and 8 of a run with a data source."""
    return committed_run(tmp_path_factory.mktemp("pristine"), data=True)


def ckpt_dir(out: Path) -> Path:
    (attempt,) = [p for p in RUN.job_dir(out).iterdir() if p.is_dir()]
    return attempt / "checkpoints"


def iter_path(out: Path, iteration: int) -> Path:
    return ckpt_dir(out) / iter_dirname(iteration)


def tree_bytes(out: Path) -> dict[str, bytes]:
    """Every file under ``out`` but the writer lease and launch lock (rewritten by design)."""
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and not p.name.startswith((".statecraft-writer.", ".statecraft-launch."))
    }


def replace_payload(out: Path, iteration: int, name: str, payload: Any) -> None:
    """Re-write ``name`` with ``torch.save(payload)`` and re-record its size and digest, so
    only parsing the file can tell."""
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    data = buffer.getvalue()
    where = iter_path(out, iteration)
    (where / name).write_bytes(data)
    manifest_path = where / MANIFEST_NAME
    manifest = json.loads(manifest_path.read_bytes())
    manifest["files"][name] = {
        "size": len(data),
        "digest": {"algorithm": "xxh3_128", "value": xxhash.xxh3_128_hexdigest(data)},
    }
    manifest_path.write_text(json.dumps(manifest, sort_keys=True, indent=1) + "\n")


def numpy_in_data(out: Path, iteration: int = 8) -> None:
    replace_payload(out, iteration, "data.pt", {"position": np.float64(2 * iteration)})


def assert_readable(message: str) -> None:
    assert "\x1b" not in message
    assert "\n" not in message
    assert "PyTorch 2.6" not in message  # torch's multi-paragraph advice is not repeated


class TestResumeAuto:
    def test_passes_over_a_component_that_does_not_deserialize(
        self, out: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A data.pt holding numpy.float64 is passed over with a readable reason (logged and in
        passed_over), and the next older checkpoint is adopted; nothing committed changes."""
        numpy_in_data(out)
        before = tree_bytes(out)
        ckpt, objects = open_checkpointer(out)
        with caplog.at_level(logging.WARNING, logger="statecraft"):
            result = ckpt.resume()
        assert result.source is not None
        assert result.source.endswith(iter_dirname(6))
        assert result.step == 6
        assert objects.cursor.position == 12
        (passed,) = result.passed_over
        assert passed.name == iter_dirname(8)
        assert NUMPY_REFUSAL in passed.reason
        assert_readable(passed.reason)
        assert any(
            "passed over iter_000000008" in r.getMessage() and NUMPY_REFUSAL in r.getMessage()
            for r in caplog.records
        )
        assert tree_bytes(out) == before

    def test_reads_each_component_once(self, out: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Resume loads the payloads verification parsed: every file is deserialized once,
        through ``read`` (``model.pt``, memory-mapped) or from the bytes verification hashed
        (``load_bytes``: the rest)."""
        reads: list[str] = []
        original_read, original_load = ConsolidatedWriter.read, ConsolidatedWriter.load_bytes

        def counting(self: ConsolidatedWriter, store: Any, path: str, *, mmap: bool = True) -> Any:
            reads.append(path)
            return original_read(self, store, path, mmap=mmap)

        def counting_bytes(self: ConsolidatedWriter, data: bytes, *, where: str) -> Any:
            reads.append(where.rsplit("/", 2)[-2] + "/" + where.rsplit("/", 1)[-1])
            return original_load(self, data, where=where)

        monkeypatch.setattr(ConsolidatedWriter, "read", counting)
        monkeypatch.setattr(ConsolidatedWriter, "load_bytes", counting_bytes)
        ckpt, _ = open_checkpointer(out)
        assert ckpt.resume().step == 8
        name = iter_dirname(8)
        expected = [f"{name}/{f}" for f in ("data.pt", "model.pt", "optim.pt", "trainer.pt")]
        assert sorted(reads) == expected

    def test_hashes_and_loads_the_same_bytes(
        self, out: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """At level digest every file but the memory-mapped model.pt is opened once through
        the store and hashed from the bytes that are then deserialized: no separate hashing
        pass reads it again."""
        opened: list[str] = []
        hashed: list[str] = []
        original_open, original_digest = LocalStore.open_read, listed_files.file_digest

        def counting_open(self: LocalStore, path: str) -> Any:
            opened.append(path)
            return original_open(self, path)

        def counting_digest(store: Any, path: str, algorithm: str) -> Any:
            hashed.append(path)
            return original_digest(store, path, algorithm)

        monkeypatch.setattr(LocalStore, "open_read", counting_open)
        monkeypatch.setattr(listed_files, "file_digest", counting_digest)
        ckpt, _ = open_checkpointer(out)
        assert ckpt.resume().step == 8
        name = iter_dirname(8)
        assert sorted(p for p in opened if p.startswith(name) and p.endswith(".pt")) == [
            f"{name}/{f}" for f in ("data.pt", "optim.pt", "trainer.pt")
        ]
        assert sorted(p for p in hashed if p.startswith(name)) == [f"{name}/model.pt"]


class TestExplicitResume:
    def test_fails_with_the_same_readable_message(self, out: Path) -> None:
        """An explicit resume of that checkpoint fails (no fallback) with the same one-line
        message, every tracked object unchanged and nothing committed changed."""
        numpy_in_data(out)
        before = tree_bytes(out)
        ckpt, objects = open_checkpointer(out, f"resume={iter_path(out, 8)}")
        weight = objects.model.weight.detach().clone()
        with pytest.raises(CheckpointCorruptError) as info:
            ckpt.resume()
        message = str(info.value)
        assert NUMPY_REFUSAL in message
        assert message.endswith("Resume from another checkpoint or move this one aside.")
        assert_readable(message)
        assert torch.equal(objects.model.weight, weight)
        assert objects.cursor.position == 0
        assert tree_bytes(out) == before

    def test_model_holding_a_numpy_array_is_named(self, out: Path) -> None:
        """model.pt (read memory-mapped) holding a numpy array: the message names the type and
        the conversion."""
        state = {k: v.numpy() for k, v in torch.nn.Linear(4, 3).state_dict().items()}
        replace_payload(out, 8, "model.pt", state)
        before = tree_bytes(out)
        ckpt, _ = open_checkpointer(out, f"resume={iter_path(out, 8)}")
        with pytest.raises(CheckpointCorruptError) as info:
            ckpt.resume()
        assert (
            "model.pt: holds a numpy.ndarray (numpy._core.multiarray._reconstruct), which "
            "torch.load(weights_only=True) refuses; the saving code must convert it "
            "(torch.from_numpy(x) / x.tolist())"
        ) in str(info.value)
        assert tree_bytes(out) == before


class TestInspect:
    @pytest.mark.parametrize("verify", [True, False])
    def test_reports_the_checkpoint_corrupt(self, out: Path, verify: bool) -> None:
        """inspect (with and without --verify) calls the checkpoint corrupt with the same
        reason, and its auto-pick is the one resume adopts; it writes nothing."""
        numpy_in_data(out)
        before = tree_bytes(out)
        data = inspect_path(RUN.job_dir(out), verify=verify)
        (attempt,) = data["attempts"]
        states = {it["iteration"]: it for it in attempt["checkpoints"]["iterations"]}
        assert states[8]["state"] == "corrupt"
        assert NUMPY_REFUSAL in states[8]["reason"]
        assert [states[i]["state"] for i in (6, 4, 2)] == ["committed"] * 3
        assert data["resume_auto"]["pick"] == iter_dirname(6)
        assert tree_bytes(out) == before


class TestVerifiedPayloads:
    def test_payloads_are_kept_and_not_pickled(self, out: Path) -> None:
        """The verdict keeps the parsed components; pickled (rank 0 -> other ranks) it carries
        none of them, and the other fields survive."""
        verified = verify_checkpoint(LocalStore(str(ckpt_dir(out))), 8)
        assert sorted(verified.payloads) == ["data.pt", "model.pt", "optim.pt"]
        assert verified.payloads["data.pt"]["ranks"] == [{"position": 16}]  # per-rank data.pt
        copy = pickle.loads(pickle.dumps(verified))
        assert dict(copy.payloads) == {}
        assert copy.iteration == 8
        assert copy.manifest == verified.manifest

    def test_classify_only_keeps_nothing(self, out: Path) -> None:
        """keep_payloads=False parses every file (a bad one still fails) but keeps none."""
        store = LocalStore(str(ckpt_dir(out)))
        assert dict(verify_checkpoint(store, 8, keep_payloads=False).payloads) == {}
        numpy_in_data(out)
        with pytest.raises(CheckpointCorruptError, match=r"holds numpy\.float64"):
            verify_checkpoint(store, 8, level="size", keep_payloads=False)


def _load_error(data: bytes) -> Exception:
    try:
        torch.load(io.BytesIO(data), weights_only=True)
    except Exception as exc:
        return exc
    raise AssertionError("torch.load accepted the bytes")


def _saved(payload: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    return buffer.getvalue()


class TestExplainLoadFailure:
    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            (np.int64(3), "holds numpy.int64 (numpy._core.multiarray.scalar)"),
            (np.float32(1), "(float(x) / torch.tensor(x))"),
            (np.bool_(True), "holds numpy.bool (numpy._core.multiarray.scalar)"),
            (np.zeros(2), "holds a numpy.ndarray"),
        ],
    )
    def test_numpy_values_are_named(self, value: Any, expected: str) -> None:
        """Each NumPy value is named with its type and the conversion."""
        data = _saved({"x": value})
        message = explain_load_failure(_load_error(data), data)
        assert expected in message
        assert_readable(message)

    def test_torn_file_keeps_the_first_sentence(self) -> None:
        """Bytes that are not an archive say so, with no colour codes and no cut word."""
        data = _saved({"x": torch.zeros(4)})[:-40]
        message = explain_load_failure(_load_error(data), data)
        assert message.startswith("not a loadable torch.save file (")
        assert_readable(message)

    def test_plain_text_cuts_at_a_sentence(self) -> None:
        """A long message is cut at a sentence end, never mid-word, colour codes removed."""
        text = "\x1b[1mThe first sentence ends here.\x1b[0m " + "word " * 80
        assert plain_text(text, limit=60) == "The first sentence ends here. ..."
        assert plain_text("short \x1b[1mbold\x1b[0m\n\ttext") == "short bold text"
