"""Tests of ``statecraft inspect`` (statecraft/inspect.py) on real checkpoints.

A real run (tiny ``nn.Linear`` + AdamW + StepLR, ``save_every=2``) is written once per module by
the :class:`~statecraft.Checkpointer`; each test copies it and damages the copy the way disks
and crashes do: a partial iteration (manifest gone), a truncated ``model.pt``, a bit-flipped
``model.pt`` of the same size (only ``--verify`` sees it), a garbage or dangling latest pointer.
The report must say what each iteration is, what ``resume=auto`` would pick and why, and
inspect must not change a single byte or mtime.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from artifact_files import artifacts_dir, write_artifact
from checkpoint_runs import RUN, committed_run, open_checkpointer
from checkpoint_runs import flip_tensor_bit as flip_bit_in_tensor_file
from validation_runs import METRICS, PENDING, save_pending, write_evaluated

from statecraft.checkpoint.kernel.layout import (
    ARTIFACT_MANIFEST_NAME,
    LATEST_POINTER,
    MANIFEST_NAME,
    iter_dirname,
)
from statecraft.checkpoint.kernel.validation_records import EVALUATED_RECORD
from statecraft.cli import main
from statecraft.cli.envelope import RESULT_VERSION
from statecraft.cli.inspect import inspect_path

ENVELOPE_KEYS = {"result_version", "command", "status", "exit_code", "data", "errors"}
DATA_KEYS = {
    "path",
    "kind",
    "verify_level",
    "attempts",
    "adopted_attempt",
    "adoption_reason",
    "resume_auto",
    "explicit_resume",
    "runs",
}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Committed iterations 2, 4, 6 and 8 of a run without a data source."""
    return committed_run(tmp_path_factory.mktemp("pristine"), data=False)


def job_dir(out: Path) -> Path:
    return RUN.job_dir(out)


def attempt_dir(out: Path) -> Path:
    """The run's attempt (the oldest one, when a test adds a newer empty attempt)."""
    return min(p for p in job_dir(out).iterdir() if p.is_dir())


def ckpt_dir(out: Path) -> Path:
    return attempt_dir(out) / "checkpoints"


def iter_path(out: Path, iteration: int) -> Path:
    return ckpt_dir(out) / iter_dirname(iteration)


def make_partial(out: Path, iteration: int) -> None:
    (iter_path(out, iteration) / MANIFEST_NAME).unlink()


def truncate(out: Path, iteration: int, name: str = "model.pt") -> None:
    path = iter_path(out, iteration) / name
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)


def flip_tensor_bit(out: Path, iteration: int, name: str = "model.pt") -> None:
    """Flip one bit inside the first tensor's bytes: same size, still a loadable file."""
    flip_bit_in_tensor_file(iter_path(out, iteration) / name)


def set_latest(out: Path, content: bytes | None) -> None:
    pointer = ckpt_dir(out) / LATEST_POINTER
    if content is None:
        pointer.unlink()
    else:
        pointer.write_bytes(content)


def snapshot(root: Path) -> dict[str, tuple[str, bytes, int]]:
    """Every entry under ``root``: kind, bytes (files) and mtime in nanoseconds."""
    found = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        kind = "dir" if path.is_dir() else "file"
        found[str(path.relative_to(root))] = (
            kind,
            b"" if kind == "dir" else path.read_bytes(),
            st.st_mtime_ns,
        )
    return found


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["inspect", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code, text, _ = run_cli(capsys, *argv, "--json")
    return code, json.loads(text)


def states(report: dict[str, Any]) -> dict[str, str]:
    (attempt,) = [a for a in report["attempts"] if a["checkpoints"]]
    return {it["name"]: it["state"] for it in attempt["checkpoints"]["iterations"]}


def checkpoints_of(report: dict[str, Any]) -> dict[str, Any]:
    (attempt,) = [a for a in report["attempts"] if a["checkpoints"]]
    return attempt["checkpoints"]


def damage_all(out: Path) -> None:
    """iter 8 partial, iter 6 truncated, iter 4 bit-flipped, iter 2 intact, latest garbage."""
    make_partial(out, 8)
    truncate(out, 6)
    flip_tensor_bit(out, 4)
    set_latest(out, b"\x00\xffnot a pointer")


class TestStates:
    def test_pristine_run_is_all_committed(self, out: Path) -> None:
        """An undamaged run shows every iteration committed and auto picks the newest."""
        report = inspect_path(job_dir(out))
        assert report["kind"] == "job"
        assert states(report) == {iter_dirname(i): "committed" for i in (8, 6, 4, 2)}
        cks = checkpoints_of(report)
        assert cks["latest"] == {
            "status": "ok",
            "names": "iter_000000008",
            "detail": "names iter_000000008 (committed)",
        }
        assert report["resume_auto"]["pick"] == "iter_000000008"
        assert report["resume_auto"]["passed_over"] == []

    def test_files_and_sizes_are_listed(self, out: Path) -> None:
        """Each iteration lists its files with on-disk and recorded sizes, and the totals add up."""
        report = inspect_path(ckpt_dir(out))
        newest = checkpoints_of(report)["iterations"][0]
        names = [f["name"] for f in newest["files"]]
        assert names == [MANIFEST_NAME, "model.pt", "optim.pt", "trainer.pt"]
        for f in newest["files"]:
            assert f["size"] == (iter_path(out, 8) / f["name"]).stat().st_size
            assert f["in_manifest"] == (f["name"] != MANIFEST_NAME)
            if f["in_manifest"]:
                assert f["recorded_size"] == f["size"]
        assert newest["total_bytes"] == sum(f["size"] for f in newest["files"])
        cks = checkpoints_of(report)
        assert cks["total_bytes"] == sum(it["total_bytes"] for it in cks["iterations"])

    def test_damaged_run_without_verify(self, out: Path) -> None:
        """Sizes only: partial and truncated iterations are passed over; the bit flip is unseen."""
        damage_all(out)
        report = inspect_path(job_dir(out))
        assert states(report) == {
            "iter_000000008": "partial",
            "iter_000000006": "corrupt",
            "iter_000000004": "committed",
            "iter_000000002": "committed",
        }
        auto = report["resume_auto"]
        assert auto["pick"] == "iter_000000004"
        assert [p["name"] for p in auto["passed_over"]] == ["iter_000000008", "iter_000000006"]
        assert "has no manifest (an interrupted save)" in auto["passed_over"][0]["reason"]
        assert "model.pt: has " in auto["passed_over"][1]["reason"]
        assert "truncated" in auto["passed_over"][1]["reason"]
        truncated = next(
            f for f in checkpoints_of(report)["iterations"][1]["files"] if f["name"] == "model.pt"
        )
        assert truncated["size"] == truncated["recorded_size"] // 2
        latest = checkpoints_of(report)["latest"]
        assert latest["status"] == "garbage"
        assert latest["names"] is None

    def test_damaged_run_with_verify(self, out: Path) -> None:
        """With --verify the same-size bit flip is a digest mismatch and auto falls back further."""
        damage_all(out)
        report = inspect_path(job_dir(out), verify=True)
        assert report["verify_level"] == "digest"
        assert states(report)["iter_000000004"] == "corrupt"
        auto = report["resume_auto"]
        assert auto["pick"] == "iter_000000002"
        assert [p["name"] for p in auto["passed_over"]] == [
            "iter_000000008",
            "iter_000000006",
            "iter_000000004",
        ]
        assert "digest xxh3_128" in auto["passed_over"][2]["reason"]

    def test_malformed_trainer_state_is_corrupt(self, out: Path) -> None:
        """A same-size trainer.pt that is not a torch file is corrupt even without --verify.

        The message is the reader's; see test_bad_input for the reader bug (a raw
        UnpicklingError instead of CheckpointCorruptError) that inspect reports as is.
        """
        path = iter_path(out, 8) / "trainer.pt"
        size = path.stat().st_size
        path.write_bytes(b"x" * size)
        report = inspect_path(ckpt_dir(out))
        it = checkpoints_of(report)["iterations"][0]
        assert it["state"] == "corrupt"
        assert "iter_000000008" in it["reason"]
        assert report["resume_auto"]["pick"] == "iter_000000006"

    def test_malformed_manifest_is_corrupt(self, out: Path) -> None:
        """A manifest that is not JSON makes the iteration corrupt, not partial."""
        (iter_path(out, 8) / MANIFEST_NAME).write_bytes(b"{not json")
        report = inspect_path(ckpt_dir(out))
        it = checkpoints_of(report)["iterations"][0]
        assert it["state"] == "corrupt"
        assert "not valid JSON" in it["reason"]
        assert all(not f["in_manifest"] for f in it["files"])

    def test_all_corrupt_means_fresh_start(self, out: Path) -> None:
        """When nothing verifies, auto would start fresh and every iteration is passed over."""
        for i in (2, 4, 6, 8):
            make_partial(out, i)
        report = inspect_path(job_dir(out))
        assert report["resume_auto"]["pick"] is None
        assert "no iteration verifies" in report["resume_auto"]["reason"]
        assert len(report["resume_auto"]["passed_over"]) == 4

    def test_leftover_temporary_file_is_listed(self, out: Path) -> None:
        """A crashed writer's temporary file is shown as a file that is not in the manifest."""
        (iter_path(out, 8) / ".model.pt.tmp-1-1").write_bytes(b"leftover")
        report = inspect_path(ckpt_dir(out))
        files = {f["name"]: f for f in checkpoints_of(report)["iterations"][0]["files"]}
        assert files[".model.pt.tmp-1-1"] == {
            "name": ".model.pt.tmp-1-1",
            "size": 8,
            "recorded_size": None,
            "in_manifest": False,
        }
        assert checkpoints_of(report)["iterations"][0]["state"] == "committed"


class TestLatestPointer:
    @pytest.mark.parametrize(
        ("content", "status", "names", "words"),
        [
            (None, "missing", None, "no latest_checkpoint.txt"),
            (b"garbage\n", "garbage", None, "unreadable"),
            (b"iter_000000999\n", "dangling", "iter_000000999", "does not exist"),
            (b"iter_000000004\n", "ok", "iter_000000004", "newer committed iter_000000008"),
        ],
    )
    def test_pointer_states(
        self, out: Path, content: bytes | None, status: str, names: str | None, words: str
    ) -> None:
        """The pointer is reported missing, garbage, dangling or ok (noting newer commits)."""
        set_latest(out, content)
        report = inspect_path(ckpt_dir(out))
        latest = checkpoints_of(report)["latest"]
        assert (latest["status"], latest["names"]) == (status, names)
        assert words in latest["detail"]
        assert report["resume_auto"]["pick"] == "iter_000000008"  # manifests decide, not latest


class TestPathKinds:
    def test_attempt_dir(self, out: Path) -> None:
        """An attempt dir reports its RUN_TS and its checkpoints."""
        report = inspect_path(attempt_dir(out))
        assert report["kind"] == "attempt"
        assert report["attempts"][0]["run_ts"] == attempt_dir(out).name
        assert report["resume_auto"]["pick"] == "iter_000000008"

    def test_checkpoints_dir(self, out: Path) -> None:
        """A checkpoints dir is reported on its own, with its attempt's RUN_TS."""
        report = inspect_path(ckpt_dir(out))
        assert report["kind"] == "checkpoints"
        assert report["attempts"][0]["run_ts"] == attempt_dir(out).name
        assert len(checkpoints_of(report)["iterations"]) == 4

    def test_iter_dir_committed(self, out: Path) -> None:
        """One iter dir reports only itself and whether an explicit resume would accept it."""
        report = inspect_path(iter_path(out, 4))
        assert report["kind"] == "iteration"
        assert list(states(report)) == ["iter_000000004"]
        assert report["explicit_resume"]["accepted"] is True
        assert report["resume_auto"] is None

    def test_iter_dir_corrupt(self, out: Path) -> None:
        """An explicit resume of a corrupt iter dir is reported as failing, with no fallback."""
        truncate(out, 4, "optim.pt")
        report = inspect_path(iter_path(out, 4))
        assert report["explicit_resume"]["accepted"] is False
        assert "would fail (no fallback)" in report["explicit_resume"]["reason"]
        assert "optim.pt" in report["explicit_resume"]["reason"]

    def test_newest_attempt_is_adopted_even_if_empty(self, out: Path) -> None:
        """With a newer attempt that saved nothing, auto adopts it and would start fresh."""
        newer = job_dir(out) / "29991231235959"
        newer.mkdir()
        report = inspect_path(job_dir(out))
        old = sorted(p.name for p in job_dir(out).iterdir() if p.is_dir())[0]
        assert [a["run_ts"] for a in report["attempts"]] == [old, "29991231235959"]
        assert report["attempts"][-1]["checkpoints"] is None
        assert report["adopted_attempt"] == str(newer.resolve())
        assert report["resume_auto"]["pick"] is None
        assert "no checkpoints/" in report["resume_auto"]["reason"]

    def test_legacy_flat_layout(self, out: Path, tmp_path: Path) -> None:
        """A job dir with checkpoints/ directly under it is the legacy layout, and it is adopted."""
        legacy_job = tmp_path / "legacy" / "p" / "g" / "n"
        legacy_job.mkdir(parents=True)
        shutil.copytree(ckpt_dir(out), legacy_job / "checkpoints")
        report = inspect_path(legacy_job)
        assert report["kind"] == "job"
        assert report["attempts"][0]["legacy"] is True
        assert report["attempts"][0]["run_ts"] == ""
        assert report["adopted_attempt"] == str(legacy_job.resolve())
        assert "legacy flat layout" in report["adoption_reason"]
        assert report["resume_auto"]["pick"] == "iter_000000008"


class TestAgreesWithResume:
    @pytest.mark.parametrize(("verify_flag", "verify_knob"), [(False, "size"), (True, "digest")])
    def test_auto_pick_matches_a_real_resume(
        self, out: Path, verify_flag: bool, verify_knob: str
    ) -> None:
        """What inspect says resume=auto would pick is what a real resume=auto adopts."""
        damage_all(out)
        predicted = inspect_path(job_dir(out), verify=verify_flag)["resume_auto"]
        ckpt, _ = open_checkpointer(out, f"verify={verify_knob}", data=False)
        result = ckpt.resume()
        assert result.step == predicted["iteration"]
        assert [p.name for p in result.passed_over] == [p["name"] for p in predicted["passed_over"]]


class TestCli:
    def test_text_output(self, out: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """The human report names states, the pointer and the auto pick with its reasons."""
        damage_all(out)
        code, text, err = run_cli(capsys, str(job_dir(out)))
        assert code == 0
        assert err == ""
        assert "iter_000000008  partial" in text
        assert "iter_000000006  corrupt" in text
        assert "iter_000000004  committed" in text
        assert "latest_checkpoint.txt: garbage" in text
        assert "resume=auto would pick iter_000000004" in text
        assert "passed over iter_000000008" in text
        assert "passed over iter_000000006" in text
        assert "--verify also checks content digests" in text

    def test_json_envelope_contract(self, out: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--json prints exactly the versioned envelope with the report as data."""
        code, envelope = run_json(capsys, str(job_dir(out)), "--verify")
        assert code == 0
        assert set(envelope) == ENVELOPE_KEYS
        assert envelope["result_version"] == RESULT_VERSION == 1
        assert envelope["command"] == "inspect"
        assert envelope["status"] == "ok"
        assert envelope["exit_code"] == 0
        assert envelope["errors"] == []
        assert set(envelope["data"]) == DATA_KEYS
        assert envelope["data"] == json.loads(json.dumps(inspect_path(job_dir(out), verify=True)))
        (attempt,) = envelope["data"]["attempts"]
        assert set(attempt) == {
            "run_ts",
            "legacy",
            "path",
            "has_artifacts",
            "artifacts",
            "checkpoints",
        }
        assert attempt["artifacts"] is None
        assert set(attempt["checkpoints"]["auto"]) == {
            "action",
            "would",
            "pick",
            "iteration",
            "stage",
            "reason",
            "passed_over",
            "checkpoint",
            "artifact",
        }
        assert set(attempt["checkpoints"]) == {
            "path",
            "latest",
            "iterations",
            "other_entries",
            "total_bytes",
            "auto",
            "explicit",
            "retention",
        }
        assert set(attempt["checkpoints"]["iterations"][0]) == {
            "name",
            "iteration",
            "path",
            "kind",
            "state",
            "stage",
            "reason",
            "metrics",
            "notes",
            "files",
            "total_bytes",
            "archive",
            "dcp",
            "data",
            "blobs",
            "policy",
            "kept_by",
            "retention_action",
        }

    @pytest.mark.parametrize("as_json", [False, True])
    def test_missing_path_exits_1(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], as_json: bool
    ) -> None:
        """A path that does not exist exits 1 with an error naming it."""
        missing = tmp_path / "nope"
        code, text, err = run_cli(capsys, str(missing), *(["--json"] if as_json else []))
        assert code == 1
        if as_json:
            envelope = json.loads(text)
            assert set(envelope) == ENVELOPE_KEYS
            assert (envelope["status"], envelope["exit_code"]) == ("error", 1)
            (error,) = envelope["errors"]
            assert error["code"] == "no_checkpoints_layout"
            assert f"{missing}: no such file or directory" in error["message"]
        else:
            assert text == ""
            assert f"error: {missing}: no such file or directory" in err

    def test_dir_without_layout_exits_1(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A directory with no attempts, checkpoints or iterations exits 1 and says so."""
        (tmp_path / "empty").mkdir()
        code, envelope = run_json(capsys, str(tmp_path / "empty"))
        assert code == 1
        assert "holds no checkpoints layout" in envelope["errors"][0]["message"]

    def test_file_path_exits_1(self, out: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A file is not a checkpoints layout: exit 1."""
        code, envelope = run_json(capsys, str(iter_path(out, 2) / "model.pt"))
        assert code == 1
        assert "is a file, not a directory" in envelope["errors"][0]["message"]

    def test_console_script(self, out: Path) -> None:
        """The installed ``statecraft`` command runs inspect end to end and exits 0."""
        script = Path(sys.executable).with_name("statecraft")
        command = [str(script)] if script.exists() else [sys.executable, "-m", "statecraft.cli"]
        proc = subprocess.run(
            [*command, "inspect", str(job_dir(out)), "--json"],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["data"]["resume_auto"]["pick"] == "iter_000000008"


class TestReadOnly:
    def test_inspect_changes_nothing(self, out: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """No byte, mtime or directory entry changes under any PATH kind or flag."""
        damage_all(out)
        (job_dir(out) / "29991231235959").mkdir()  # an empty attempt: nothing may be minted
        before = snapshot(out)
        for path in (
            job_dir(out),
            attempt_dir(out),
            ckpt_dir(out),
            iter_path(out, 6),
            iter_path(out, 2),
        ):
            for flags in ((), ("--verify",), ("--json",), ("--verify", "--json")):
                code, _, _ = run_cli(capsys, str(path), *flags)
                assert code == 0
        assert snapshot(out) == before

    def test_store_refuses_writes(self, out: Path) -> None:
        """The store inspect reads through refuses every mutating operation."""
        from statecraft.cli.inspect import _ReadOnlyFilesystem
        from statecraft.errors import StoreError
        from statecraft.storage.local import LocalStore

        store = LocalStore(str(ckpt_dir(out)), fs=_ReadOnlyFilesystem())
        before = snapshot(out)
        with pytest.raises(StoreError, match="inspect is read-only"):
            store.write_atomic(LATEST_POINTER, b"iter_000000002\n")
        with pytest.raises(StoreError, match="inspect is read-only"):
            store.delete_tree(iter_dirname(2))
        assert snapshot(out) == before
        assert os.path.isdir(iter_path(out, 2))


class TestOutputRoot:
    """``statecraft inspect <output root>`` lists the runs under it (issue 7, item 9); main
    exited 1 with "holds no checkpoints layout"."""

    def _two_runs(self, out: Path) -> Path:
        """A second run (another group) whose pointer names iter 6 while iter 8 is committed."""
        other = out / "proj" / "other" / "second"
        shutil.copytree(job_dir(out), other)
        (pointer,) = other.glob(f"*/checkpoints/{LATEST_POINTER}")
        pointer.write_bytes(f"{iter_dirname(6)}\n".encode())
        return other

    def test_lists_every_run(self, out: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Each run with its identity, attempts, newest committed iteration and pointer; the
        text names them too, and nothing on disk changes (bytes and mtimes)."""
        other = self._two_runs(out)
        before = snapshot(out)
        code, envelope = run_json(capsys, str(out))
        assert code == 0
        data = envelope["data"]
        assert set(data) == DATA_KEYS
        assert (data["kind"], data["attempts"], data["resume_auto"]) == ("root", [], None)
        first, second = data["runs"]
        assert first == {
            "run": "proj/group/name",
            "project": "proj",
            "group": "group",
            "name": "name",
            "path": str(job_dir(out)),
            "attempts": 1,
            "adopted_attempt": str(attempt_dir(out)),
            "newest_committed": iter_dirname(8),
            "newest_committed_iteration": 8,
            "latest": iter_dirname(8),
            "latest_status": "ok",
        }
        assert (second["run"], second["path"]) == ("proj/other/second", str(other))
        assert (second["newest_committed"], second["latest"]) == (iter_dirname(8), iter_dirname(6))
        code, text, _ = run_cli(capsys, str(out))
        assert code == 0
        assert "runs (2):" in text
        assert (
            f"  proj/group/name  attempts: 1  newest committed: {iter_dirname(8)}  "
            f"{LATEST_POINTER}: {iter_dirname(8)}\n"
        ) in text
        assert f"proj/other/second  attempts: 1  newest committed: {iter_dirname(8)}" in text
        assert snapshot(out) == before

    def test_a_run_without_checkpoints(self, out: Path) -> None:
        """A run whose newest attempt has no checkpoints/ yet shows none committed."""
        empty = out / "proj" / "group" / "fresh" / "20250101000000"
        empty.mkdir(parents=True)
        runs = {r["run"]: r for r in inspect_path(out)["runs"]}
        assert runs["proj/group/fresh"]["newest_committed"] is None
        assert runs["proj/group/fresh"]["latest_status"] == "missing"
        assert runs["proj/group/name"]["newest_committed_iteration"] == 8

    def test_a_damaged_newest_checkpoint_is_not_counted(self, out: Path) -> None:
        """The newest committed iteration is the one resume=auto would adopt (verified)."""
        truncate(out, 8)
        (run,) = inspect_path(out)["runs"]
        assert run["newest_committed"] == iter_dirname(6)


class TestArtifacts:
    """Partial artifacts: listed with kind, components and state; "resume=auto would" is
    decided by resume's own rules (a refusal shows its reason)."""

    @staticmethod
    def artifact(out: Path, iteration: int, components: tuple[str, ...] = ("model",)) -> Path:
        return write_artifact(artifacts_dir(attempt_dir(out)), iteration, components)

    def test_newer_artifact_refuses(self, out: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A committed artifact newer than every checkpoint: listed, and resume=auto would
        refuse, naming it; nothing on disk changes."""
        where = self.artifact(out, 10, ("model", "optimizer"))
        before = snapshot(out)
        report = inspect_path(job_dir(out))
        (attempt,) = report["attempts"]
        (entry,) = attempt["artifacts"]["entries"]
        assert (entry["name"], entry["kind"], entry["state"]) == (
            iter_dirname(10),
            "artifact",
            "committed",
        )
        assert entry["components"] == ["model", "optimizer"]
        assert entry["physical"] == ["model", "optim"]
        assert [f["name"] for f in entry["files"]] == [
            ARTIFACT_MANIFEST_NAME,
            "model.pt",
            "optim.pt",
        ]
        assert attempt["artifacts"]["newest_with_manifest"] == iter_dirname(10)
        auto = report["resume_auto"]
        assert (auto["action"], auto["pick"], auto["artifact"]) == (
            "refuse",
            None,
            iter_dirname(10),
        )
        assert auto["checkpoint"] == iter_dirname(8)
        assert auto["reason"].startswith("resume=auto refused: checkpoint local:")
        assert str(where) in auto["reason"]
        assert auto["would"] == f"refuse: {auto['reason']}"
        code, text, _ = run_cli(capsys, str(job_dir(out)))
        assert code == 0
        assert f"{iter_dirname(10)}  artifact  committed  [model, optimizer]" in text
        assert "resume=auto (verify=size) would: refuse: resume=auto refused:" in text
        assert "resume=auto would refuse: resume=auto refused" in text
        assert snapshot(out) == before

    def test_older_artifact_adopts(self, out: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """An artifact older than the newest checkpoint: resume=auto would adopt it."""
        self.artifact(out, 6)
        report = inspect_path(job_dir(out))
        auto = report["resume_auto"]
        assert (auto["action"], auto["pick"], auto["stage"]) == ("adopt", iter_dirname(8), "none")
        assert auto["would"] == f"adopt {iter_dirname(8)} (committed)"
        _, text, _ = run_cli(capsys, str(job_dir(out)))
        assert f"would: adopt {iter_dirname(8)} (committed)" in text

    def test_partial_does_not_count_corrupt_does(self, out: Path) -> None:
        """An artifact without a manifest is partial and ignored; one whose manifest is
        damaged is corrupt and counts (fail closed)."""
        write_artifact(artifacts_dir(attempt_dir(out)), 12, ("model",), manifest=False)
        report = inspect_path(job_dir(out))
        assert report["resume_auto"]["action"] == "adopt"
        (entry,) = report["attempts"][0]["artifacts"]["entries"]
        assert entry["state"] == "partial"
        assert "has no artifact manifest" in entry["reason"]
        bad = self.artifact(out, 10)
        (bad / ARTIFACT_MANIFEST_NAME).write_bytes(b"{")
        report = inspect_path(job_dir(out))
        states_ = {e["name"]: e["state"] for e in report["attempts"][0]["artifacts"]["entries"]}
        assert states_ == {iter_dirname(12): "partial", iter_dirname(10): "corrupt"}
        assert report["resume_auto"]["action"] == "refuse"
        assert "counted anyway" in report["resume_auto"]["reason"]

    def test_artifacts_only_attempt_refuses(self, out: Path) -> None:
        """An attempt with artifacts and no checkpoints/: resume=auto would refuse."""
        self.artifact(out, 2)
        shutil.rmtree(ckpt_dir(out))
        auto = inspect_path(job_dir(out))["resume_auto"]
        assert auto["action"] == "refuse"
        assert "but no resumable checkpoint (checkpoint: none)" in auto["reason"]

    def test_an_artifact_dir(self, out: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """PATH = one artifact: that artifact only, and resume=PATH would be refused."""
        where = self.artifact(out, 10)
        report = inspect_path(where)
        assert report["kind"] == "artifact"
        (attempt,) = report["attempts"]
        assert attempt["checkpoints"] is None
        assert [e["name"] for e in attempt["artifacts"]["entries"]] == [iter_dirname(10)]
        explicit = report["explicit_resume"]
        assert explicit["accepted"] is False
        assert f"{where} is a partial artifact" in explicit["reason"]
        assert "statecraft.load_weights(model, " in explicit["reason"]
        code, text, _ = run_cli(capsys, str(where))
        assert code == 0
        assert f"resume={where} would be refused" in text

    def test_the_artifacts_dir(self, out: Path) -> None:
        """PATH = checkpoint_artifacts/: its attempt, with artifacts and checkpoints."""
        self.artifact(out, 10)
        report = inspect_path(artifacts_dir(attempt_dir(out)))
        assert report["kind"] == "artifacts"
        assert report["attempts"][0]["checkpoints"]["iterations"]
        assert report["resume_auto"]["action"] == "refuse"

    def test_iter_dir_behind_an_artifact(self, out: Path) -> None:
        """An explicit resume of a checkpoint behind the newest artifact would be refused."""
        self.artifact(out, 6)
        report = inspect_path(iter_path(out, 4))
        assert report["explicit_resume"]["accepted"] is False
        assert "would be refused: resume=" in report["explicit_resume"]["reason"]
        assert "is older than the committed partial artifact" in report["explicit_resume"]["reason"]
        assert inspect_path(iter_path(out, 6))["explicit_resume"]["accepted"] is True


class TestValidationStages:
    """The validation stage of each checkpoint, its metrics and ignored records, and the
    stage resume=auto would adopt."""

    @pytest.fixture
    def pending(self, out: Path) -> Path:
        save_pending(out, data=False)
        return out

    def test_stages_and_the_auto_line(
        self, pending: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """evaluation-pending, then publication-pending with metrics; auto would adopt it."""
        report = inspect_path(job_dir(pending))
        newest = checkpoints_of(report)["iterations"][0]
        assert (newest["name"], newest["state"], newest["stage"]) == (
            iter_dirname(PENDING),
            "evaluation_pending",
            "evaluation_pending",
        )
        assert (
            report["resume_auto"]["would"] == f"adopt {iter_dirname(PENDING)} (evaluation_pending)"
        )
        write_evaluated(pending)
        report = inspect_path(job_dir(pending), verify=True)
        newest = checkpoints_of(report)["iterations"][0]
        assert (newest["state"], newest["metrics"]) == ("publication_pending", METRICS)
        assert report["resume_auto"]["stage"] == "publication_pending"
        code, text, _ = run_cli(capsys, str(job_dir(pending)))
        assert code == 0
        assert f"{iter_dirname(PENDING)}  publication_pending" in text
        assert "metrics: {'loss': 0.25}" in text
        assert f"would: adopt {iter_dirname(PENDING)} (publication_pending)" in text

    def test_ignored_records_are_noted(self, out: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A record beside a regular checkpoint is shown as ignored."""
        save_pending(out, data=False)
        write_evaluated(out, 8)
        it = next(
            i
            for i in checkpoints_of(inspect_path(job_dir(out)))["iterations"]
            if i["iteration"] == 8
        )
        assert it["state"] == "committed"
        assert it["notes"] == [
            f"{iter_dirname(8)}/{EVALUATED_RECORD} ignored: {iter_dirname(8)} was saved without "
            "a pending validation"
        ]
        _, text, _ = run_cli(capsys, str(job_dir(out)))
        assert f"note: {iter_dirname(8)}/{EVALUATED_RECORD} ignored" in text
