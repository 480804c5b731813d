"""Issue acceptance: every bad input gets a clear error, and nothing committed changes.

Each test feeds one bad input — a damaged pointer, file or manifest, a bad explicit path, a bad
config value, a full disk, a drifting plan, an untrackable object — and asserts the exception's
type and message (what was wrong, what to do) or the reason resume records, and that every
file of every committed checkpoint is byte-identical before and after. Real torch objects
(``nn.Linear`` + AdamW + StepLR + a small data cursor) are checkpointed by the real
:class:`~statecraft.Checkpointer` into ``tmp_path``; a full disk is injected into the real
``LocalStore`` through ``OsFilesystem(gate=IoGate(faults=...))``.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from pathlib import Path
from typing import Any

import pytest
import torch
import xxhash
from checkpoint_runs import CONFIG, RUN, committed_run, open_checkpointer, train
from checkpoint_runs import flip_tensor_bit as flip_bit_in_tensor_file

import statecraft as sc
from statecraft.checkpoint.kernel.layout import LATEST_POINTER, MANIFEST_NAME, iter_dirname
from statecraft.engine import IoGate
from statecraft.engine.crash import FaultKind
from statecraft.errors import (
    CheckpointCorruptError,
    ConfigError,
    DiskFullError,
    PlanDriftError,
    ResumeError,
    StoreError,
    TrackingError,
    TrainerStateError,
)
from statecraft.storage import OsFilesystem

RESUME_LOG = "statecraft.resume"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Committed iterations 2, 4, 6 and 8 of a run that tracks a data source."""
    return committed_run(tmp_path_factory.mktemp("pristine"), data=True)


# ----------------------------------------------------------------------- layout helpers
def checkpoints(out: Path) -> Path:
    attempt = min(p for p in RUN.job_dir(out).iterdir() if p.is_dir())
    return attempt / "checkpoints"


def iter_path(out: Path, iteration: int) -> Path:
    return checkpoints(out) / iter_dirname(iteration)


def latest(out: Path) -> bytes | None:
    pointer = checkpoints(out) / LATEST_POINTER
    return pointer.read_bytes() if pointer.exists() else None


def tree_sha256(root: Path) -> dict[str, str]:
    """Every file under ``root`` but the writer lease (rewritten at a takeover, never part of
    a checkpoint): relative path -> SHA-256 of its bytes."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith((".statecraft-writer.", ".statecraft-launch."))
    }


def committed_sha256(out: Path) -> dict[str, str]:
    """The files of every committed checkpoint (an ``iter_*`` with a manifest), by SHA-256."""
    found = {}
    for attempt in sorted(p for p in RUN.job_dir(out).iterdir() if p.is_dir()):
        for iteration in sorted((attempt / "checkpoints").glob("iter_*")):
            if (iteration / MANIFEST_NAME).exists():
                for path, digest in tree_sha256(iteration).items():
                    found[str(iteration.relative_to(out) / path)] = digest
    return found


def rewrite_manifest(out: Path, iteration: int, edit: Any) -> None:
    path = iter_path(out, iteration) / MANIFEST_NAME
    manifest = json.loads(path.read_bytes())
    edit(manifest)
    path.write_text(json.dumps(manifest, sort_keys=True, indent=1) + "\n")


def replace_file_and_manifest(out: Path, iteration: int, name: str, data: bytes) -> None:
    """Replace ``name`` and record its new size and digest, so the manifest checks pass."""
    (iter_path(out, iteration) / name).write_bytes(data)

    def edit(manifest: dict[str, Any]) -> None:
        manifest["files"][name] = {
            "size": len(data),
            "digest": {"algorithm": "xxh3_128", "value": xxhash.xxh3_128_hexdigest(data)},
        }

    rewrite_manifest(out, iteration, edit)


def truncate(out: Path, iteration: int, name: str = "model.pt") -> int:
    path = iter_path(out, iteration) / name
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(size // 2)
    return size


def flip_tensor_bit(out: Path, iteration: int, name: str = "model.pt") -> None:
    """Flip one bit inside the first tensor's bytes: same size, still a loadable file."""
    flip_bit_in_tensor_file(iter_path(out, iteration) / name)


def saved_model_state(out: Path, iteration: int) -> dict[str, torch.Tensor]:
    return torch.load(iter_path(out, iteration) / "model.pt", weights_only=True)


def warnings_of(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(
        r.getMessage()
        for r in caplog.records
        if r.name == RESUME_LOG and r.levelno == logging.WARNING
    )


def pointer_completed(out: Path, before: dict[str, str], iteration: int) -> dict[str, str]:
    """``before`` with the latest pointer naming ``iteration`` (what a resume that adopts it
    leaves: the pointer rolled forward, nothing else changed)."""
    key = str((checkpoints(out) / LATEST_POINTER).relative_to(out))
    return {**before, key: hashlib.sha256(f"{iter_dirname(iteration)}\n".encode()).hexdigest()}


# ------------------------------------------------------------------------------- tests
class TestLatestPointer:
    def test_garbage_pointer_is_ignored(self, out: Path, caplog: pytest.LogCaptureFixture) -> None:
        """A garbage pointer is logged as unreadable and ignored; auto adopts the newest one
        and completes the pointer (only the pointer changes)."""
        (checkpoints(out) / LATEST_POINTER).write_bytes(b"\x00\xffgarbage")
        before = tree_sha256(out)
        ckpt, _ = open_checkpointer(out)
        with caplog.at_level(logging.WARNING, logger=RESUME_LOG):
            result = ckpt.resume()
        assert (result.step, result.passed_over) == (8, ())
        assert result.source.endswith("iter_000000008")
        warned = warnings_of(caplog)
        assert f"{LATEST_POINTER} is unreadable" in warned
        assert "ignoring it and selecting by verified manifests" in warned
        assert tree_sha256(out) == pointer_completed(out, before, 8)

    def test_dangling_pointer_is_ignored(self, out: Path, caplog: pytest.LogCaptureFixture) -> None:
        """A pointer naming a missing iteration is logged as dangling and ignored; resume
        completes it (only the pointer changes)."""
        (checkpoints(out) / LATEST_POINTER).write_bytes(b"iter_000000999\n")
        before = tree_sha256(out)
        ckpt, _ = open_checkpointer(out)
        with caplog.at_level(logging.WARNING, logger=RESUME_LOG):
            result = ckpt.resume()
        assert result.step == 8
        assert "names iter_000000999, which does not exist; ignoring it" in warnings_of(caplog)
        assert tree_sha256(out) == pointer_completed(out, before, 8)


class TestDamagedFiles:
    def test_truncated_model_falls_back(self, out: Path, caplog: pytest.LogCaptureFixture) -> None:
        """A truncated model.pt in the newest checkpoint is passed over with its size as reason."""
        size = truncate(out, 8)
        before = tree_sha256(out)
        ckpt, _ = open_checkpointer(out)
        with caplog.at_level(logging.WARNING, logger=RESUME_LOG):
            result = ckpt.resume()
        assert result.step == 6
        (passed,) = result.passed_over
        assert passed.name == "iter_000000008"
        assert f"model.pt: has {size // 2} bytes, the manifest recorded {size}" in passed.reason
        assert "truncated" in passed.reason
        assert "resume=auto passed over iter_000000008" in warnings_of(caplog)
        assert "passed over iter_000000008" in result.reason
        assert tree_sha256(out) == before

    def test_bit_flip_is_caught_by_digest(self, out: Path) -> None:
        """A same-size bit flip in model.pt fails the digest check (verify=digest, the default)."""
        flip_tensor_bit(out, 8)
        before = tree_sha256(out)
        ckpt, _ = open_checkpointer(out)
        result = ckpt.resume()
        assert result.step == 6
        (passed,) = result.passed_over
        assert passed.name == "iter_000000008"
        assert "model.pt: digest xxh3_128" in passed.reason
        assert "does not match the manifest's" in passed.reason
        assert tree_sha256(out) == before

    def test_bit_flip_with_size_verification_loads_altered_weights(self, out: Path) -> None:
        """With verify=size a same-size bit flip is NOT detected: the flipped weights are loaded.

        This is the documented trade of ``verify=size`` (sizes only, no digests). The files are
        written without the zip's per-record CRC32 (the manifest digest replaces it), so torch
        does not notice either: the resume succeeds from iter 8 and exactly one weight differs
        from what was saved. It does not crash, but nothing says integrity was skipped either
        (see the report: a warning when adopting under verify=size would make it loud). A flip
        that breaks the zip or pickle structure instead fails the resume (no fallback).
        """
        intact = saved_model_state(out, 8)
        flip_tensor_bit(out, 8)
        before = tree_sha256(out)
        ckpt, objects = open_checkpointer(out, "verify=size")
        result = ckpt.resume()
        assert (result.step, result.passed_over) == (8, ())
        loaded = objects.model.state_dict()
        assert torch.equal(loaded["bias"], intact["bias"])
        differing = (loaded["weight"] != intact["weight"]).sum().item()
        assert differing == 1
        assert tree_sha256(out) == before


class TestMalformedManifest:
    @pytest.mark.parametrize(
        ("edit", "words"),
        [
            ("not json", "manifest is not valid JSON"),
            (
                "schema",
                "manifest schema is 'someone.else.v9', expected "
                "'statecraft.checkpoint-manifest.v2'",
            ),
            ("negative size", "manifest values are invalid: model.pt: size -1"),
            ("wrong type", "manifest fields are malformed"),
        ],
    )
    def test_passed_over_with_reason(self, out: Path, edit: str, words: str) -> None:
        """A malformed manifest is passed over by auto with the problem as its reason."""
        path = iter_path(out, 8) / MANIFEST_NAME
        if edit == "not json":
            path.write_bytes(b'{"schema": "statecraft.checkpoint-manifest.v1", ')
        elif edit == "schema":
            rewrite_manifest(out, 8, lambda m: m.update(schema="someone.else.v9"))
        elif edit == "negative size":
            rewrite_manifest(out, 8, lambda m: m["files"]["model.pt"].update(size=-1))
        else:
            rewrite_manifest(out, 8, lambda m: m.update(iteration="8"))
        before = tree_sha256(out)
        ckpt, _ = open_checkpointer(out)
        result = ckpt.resume()
        assert result.step == 6
        (passed,) = result.passed_over
        assert passed.name == "iter_000000008"
        assert MANIFEST_NAME in passed.reason
        assert words in passed.reason
        assert tree_sha256(out) == before


class TestMalformedTrainerState:
    @staticmethod
    def conflicting_clocks(out: Path) -> None:
        """iter_8's trainer.pt says optimizer_step=8 but iter=9; the manifest matches it."""
        payload = torch.load(iter_path(out, 8) / "trainer.pt", weights_only=True)
        payload["iter"] = 9
        buffer = io.BytesIO()
        torch.save(payload, buffer)
        replace_file_and_manifest(out, 8, "trainer.pt", buffer.getvalue())

    def test_conflicting_clocks_passed_over(self, out: Path) -> None:
        """Conflicting optimizer_step and iter make auto pass the checkpoint over, naming both."""
        self.conflicting_clocks(out)
        before = tree_sha256(out)
        ckpt, _ = open_checkpointer(out)
        result = ckpt.resume()
        assert result.step == 6
        (passed,) = result.passed_over
        assert "optimizer_step and iter conflict: optimizer_step=8, iter=9" in passed.reason
        assert tree_sha256(out) == before

    def test_conflicting_clocks_explicit_fails(self, out: Path) -> None:
        """An explicit resume of a checkpoint with conflicting clocks fails with both values."""
        self.conflicting_clocks(out)
        before = tree_sha256(out)
        ckpt, objects = open_checkpointer(out, f"resume={iter_path(out, 8)}")
        weights = objects.model.weight.detach().clone()
        with pytest.raises(TrainerStateError) as info:
            ckpt.resume()
        message = str(info.value)
        assert "trainer.pt" in message
        assert "optimizer_step=8, iter=9" in message
        assert "they are the same clock and must agree" in message
        assert "restore trainer.pt from an intact copy" in message
        assert torch.equal(objects.model.weight, weights)  # nothing was loaded
        assert tree_sha256(out) == before

    @staticmethod
    def not_a_torch_file(out: Path) -> None:
        replace_file_and_manifest(out, 8, "trainer.pt", b"this is not a torch file\n")

    def test_not_a_torch_file_is_not_adopted(self, out: Path) -> None:
        """A trainer.pt that is not a torch file (manifest rewritten to match) is not adopted."""
        self.not_a_torch_file(out)
        before = tree_sha256(out)
        ckpt, _ = open_checkpointer(out)
        result = ckpt.resume()
        assert result.step == 6
        assert tree_sha256(out) == before

    def test_not_a_torch_file_passed_over_with_reason(
        self, out: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Auto records and logs why it passed over a trainer.pt that is not a torch file."""
        self.not_a_torch_file(out)
        ckpt, _ = open_checkpointer(out)
        with caplog.at_level(logging.WARNING, logger=RESUME_LOG):
            result = ckpt.resume()
        assert [p.name for p in result.passed_over] == ["iter_000000008"]
        assert "trainer.pt: not a loadable torch.save file" in result.passed_over[0].reason
        assert "resume=auto passed over iter_000000008" in warnings_of(caplog)

    def test_not_a_torch_file_explicit_fails_clearly(self, out: Path) -> None:
        """An explicit resume of a trainer.pt that is not a torch file names the file."""
        self.not_a_torch_file(out)
        ckpt, _ = open_checkpointer(out, f"resume={iter_path(out, 8)}")
        with pytest.raises(CheckpointCorruptError, match=r"trainer\.pt: not a loadable"):
            ckpt.resume()


class TestExplicitPath:
    def test_missing_path_refuses_to_train_from_scratch(self, out: Path) -> None:
        """An explicit path that does not exist fails and says it will not train from scratch."""
        before = committed_sha256(out)
        missing = out / "nowhere" / "iter_000000004"
        ckpt, _ = open_checkpointer(out, f"resume={missing}")
        with pytest.raises(ResumeError) as info:
            ckpt.resume()
        message = str(info.value)
        assert f"resume={missing}: no such checkpoint" in message
        assert "Refusing to train from scratch" in message
        assert "fix the path or use resume=auto" in message
        assert committed_sha256(out) == before

    def test_corrupt_checkpoint_fails_without_fallback(self, out: Path) -> None:
        """An explicit path to a corrupt checkpoint fails; it never falls back to another one."""
        size = truncate(out, 8, "optim.pt")
        before = tree_sha256(out)
        ckpt, objects = open_checkpointer(out, f"resume={iter_path(out, 8)}")
        weights = objects.model.weight.detach().clone()
        with pytest.raises(CheckpointCorruptError) as info:
            ckpt.resume()
        message = str(info.value)
        assert (
            f"iter_000000008/optim.pt: has {size // 2} bytes, the manifest recorded {size}"
            in message
        )
        assert "Resume from another checkpoint" in message
        assert ckpt.step == 0
        assert torch.equal(objects.model.weight, weights)  # nothing loaded, no fallback
        assert tree_sha256(out) == before

    def test_failed_explicit_resume_leaves_auto_resume_intact(self, out: Path) -> None:
        """After an explicit resume fails on a bad path, resume=auto still finds iter 8."""
        ckpt, _ = open_checkpointer(out, f"resume={out / 'typo' / 'iter_000000008'}")
        with pytest.raises(ResumeError):
            ckpt.resume()
        again, _ = open_checkpointer(out)
        assert again.resume().step == 8


class TestConfig:
    @pytest.mark.parametrize(
        ("override", "line"),
        [
            ("save_every=-1", "save_every: got -1; expected a non-negative integer"),
            ("save_every=abc", "save_every: got 'abc'; expected a non-negative integer"),
            (
                "checkpoint_components=[model,bogus]",
                "checkpoint_components[1]: got 'bogus'; expected one of 'model', 'optimizer', "
                "'training_state'",
            ),
            ("verify=sha1", "verify: got 'sha1'; expected one of 'digest', 'size'"),
            ("data.cursor_resume=maybe", "data.cursor_resume: got 'maybe'; expected one of"),
        ],
    )
    def test_bad_value_names_the_knob(self, override: str, line: str) -> None:
        """A bad knob value raises ConfigError naming the knob, the value and what is allowed."""
        with pytest.raises(ConfigError) as info:
            sc.CheckpointConfig.load(
                None, [c for c in CONFIG if not c.startswith("save_every=")] + [override]
            )
        assert line in str(info.value)
        assert "Fix the listed knobs" in str(info.value)
        assert [i.path for i in info.value.issues] == [line.split(":")[0]]

    def test_numeric_resume_in_a_mapping(self) -> None:
        """resume: 5 in a YAML/dict config is a type error that says to quote it."""
        with pytest.raises(ConfigError) as info:
            sc.CheckpointConfig.from_dict({"resume": 5})
        assert "resume: got 5; expected 'auto', 'off'" in str(info.value)
        assert "YAML reads bare digits as a number: quote it" in str(info.value)

    def test_numeric_resume_override_is_a_path(self, out: Path) -> None:
        """resume=5 on the command line is taken literally as a path, which then must exist.

        Overrides read string knobs literally, so ``resume=5`` is the relative path ``"5"``;
        the resume fails loudly instead of training from scratch.
        """
        assert sc.CheckpointConfig.load(None, ["resume=5"]).resume == "5"
        before = committed_sha256(out)
        ckpt, _ = open_checkpointer(out, "resume=5")
        with pytest.raises(
            ResumeError,
            match=r"resume=5: no such checkpoint .* Refusing to "
            r"train from scratch",
        ):
            ckpt.resume()
        assert committed_sha256(out) == before

    def test_config_must_be_a_config(self, tmp_path: Path) -> None:
        """Passing a plain dict instead of a CheckpointConfig is refused by name."""
        with pytest.raises(TrackingError, match="config must be a CheckpointConfig, got dict"):
            sc.Checkpointer({"save_every": 2}, run=RUN, output_root=tmp_path)  # type: ignore[arg-type]


class TestOutputRoot:
    def test_relative_output_root_works(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A relative output_root (resolved against the working directory) saves and resumes."""
        monkeypatch.chdir(tmp_path)
        ckpt, objects = open_checkpointer(Path("out"))
        assert ckpt.resume().step == 0
        train(ckpt, objects, 2)
        again, _ = open_checkpointer(Path("out"))
        assert again.resume().step == 2

    @pytest.mark.parametrize(
        ("root", "expected"),
        [
            (123, "output_root: got 123; expected a directory path (str or os.PathLike)"),
            (None, "output_root: got None; expected a directory path (str or os.PathLike)"),
            (b"out", "output_root: got b'out'; expected a directory path (str or os.PathLike)"),
            ("", "output_root: got ''; expected a non-empty directory path without NUL bytes"),
            ("a\0b", "output_root: got 'a\\x00b'; expected a non-empty directory path"),
        ],
    )
    def test_bad_output_root_is_a_config_error(
        self, out: Path, monkeypatch: pytest.MonkeyPatch, root: Any, expected: str
    ) -> None:
        """A non-path output_root is refused with ConfigError naming it (no raw TypeError),
        and nothing is written anywhere."""
        monkeypatch.chdir(out)
        before = tree_sha256(out)
        config = sc.CheckpointConfig.load(None, CONFIG)
        with pytest.raises(ConfigError) as info:
            sc.Checkpointer(config, run=RUN, output_root=root)
        assert expected in str(info.value)
        assert "Checkpointer(output_root=...)" in str(info.value)
        assert [i.path for i in info.value.issues] == ["output_root"]
        assert tree_sha256(out) == before


def _model_write_index(tmp_path: Path) -> int:
    """The I/O op index of the write into model.pt during the second save of a 4-step run."""
    gate = IoGate()
    ckpt, objects = open_checkpointer(tmp_path / "probe", filesystem=OsFilesystem(gate=gate))
    ckpt.resume()
    train(ckpt, objects, 2)
    first_save_end = gate.count
    train(ckpt, objects, 2)
    ops = gate.log[first_save_end:]
    opened = next(
        i
        for i, r in enumerate(ops)
        if r.op == "open_write" and "iter_000000004/.model.pt.tmp" in r.target
    )
    write = next(r for r in ops[opened:] if r.op == "write")
    return write.index


class TestDiskFull:
    def test_no_space_mid_save(self, tmp_path: Path) -> None:
        """A full disk while writing model.pt fails the save, publishes nothing, keeps iter 2."""
        index = _model_write_index(tmp_path)
        out = tmp_path / "real"
        gate = IoGate(faults={index: FaultKind.NO_SPACE})
        ckpt, objects = open_checkpointer(out, filesystem=OsFilesystem(gate=gate))
        ckpt.resume()
        train(ckpt, objects, 2)
        before = committed_sha256(out)
        assert latest(out) == b"iter_000000002\n"
        objects.step()
        ckpt.record(sc.Outcome.APPLIED)
        ckpt.step_end()
        objects.step()
        ckpt.record(sc.Outcome.APPLIED)
        with pytest.raises(DiskFullError) as info:
            ckpt.step_end()
        assert gate.log[index].op == "write"
        message = str(info.value)
        assert message.startswith("disk full: writing ")
        assert info.value.path.endswith("iter_000000004/model.pt")
        assert "nothing was published" in message
        assert "Free space on that disk, keep fewer checkpoints" in message
        assert committed_sha256(out) == before
        assert latest(out) == b"iter_000000002\n"
        assert not iter_path(out, 4).exists()
        assert [p.name for p in checkpoints(out).iterdir()] == ["iter_000000002", LATEST_POINTER]
        resumed, _ = open_checkpointer(out)
        result = resumed.resume()
        assert (result.step, result.passed_over) == (2, ())
        assert committed_sha256(out) == before

    def test_retry_after_space_is_freed(self, tmp_path: Path) -> None:
        """Once the disk has room again, the same checkpointer's retry commits the iteration."""
        index = _model_write_index(tmp_path)
        out = tmp_path / "real"
        ckpt, objects = open_checkpointer(
            out, filesystem=OsFilesystem(gate=IoGate(faults={index: FaultKind.NO_SPACE}))
        )
        ckpt.resume()
        train(ckpt, objects, 3)
        objects.step()
        ckpt.record(sc.Outcome.APPLIED)
        with pytest.raises(StoreError):
            ckpt.step_end()
        before = committed_sha256(out)
        report = ckpt.save()
        assert report is not None
        assert (report.iteration, report.retried_commit) == (4, False)
        assert latest(out) == b"iter_000000004\n"
        after = committed_sha256(out)
        assert {k: v for k, v in after.items() if "iter_000000002" in k} == before


class TestSameIterationRetry:
    def test_plan_drift_fails_closed(self, out: Path) -> None:
        """A retry of committed iter 8 without the data source is plan drift; nothing changes."""
        before = tree_sha256(out)
        ckpt, _ = open_checkpointer(out, data=False)
        assert ckpt.resume().step == 8
        with pytest.raises(PlanDriftError) as info:
            ckpt.save()
        message = str(info.value)
        assert "iter_000000008 is committed with another plan" in message
        assert (
            "files: committed ('data.pt', 'model.pt', 'optim.pt', 'trainer.pt'), "
            "now ('model.pt', 'optim.pt', 'trainer.pt')" in message
        )
        assert "A committed iteration is never rewritten" in message
        assert "restore the original component plan and tracked objects" in message
        assert tree_sha256(out) == before

    def test_plan_drift_through_the_save_machine(self, out: Path) -> None:
        """The save machine refuses a retry of iter 8 in another format before any writer runs."""
        from statecraft.checkpoint.kernel.machines import load_machine
        from statecraft.checkpoint.save.bindings import SaveContext, full_save_plan
        from statecraft.storage import LocalStore

        def never() -> Any:
            raise AssertionError("a writer ran for a committed iteration")

        before = tree_sha256(out)
        plan = full_save_plan(8, with_data=True, format_name="dcp")
        ctx = SaveContext(
            store=LocalStore(str(checkpoints(out))),
            plan=plan,
            payloads=dict.fromkeys(plan.files, never),
        )
        result = load_machine("save").recover(ctx)
        assert (result.observed, result.final_state) == ("committed", "refused")
        with pytest.raises(PlanDriftError, match="format: committed 'consolidated', now 'dcp'"):
            result.raise_for_failure()
        assert ctx.records == {}
        assert tree_sha256(out) == before

    @pytest.mark.parametrize("pointer", [None, b"iter_000000006\n"])
    def test_same_plan_only_completes_the_pointer(self, out: Path, pointer: bytes | None) -> None:
        """A same-plan retry of iter 8 whose pointer is missing or behind rewrites only latest."""
        target = checkpoints(out) / LATEST_POINTER
        if pointer is None:
            target.unlink()
        else:
            target.write_bytes(pointer)
        before = tree_sha256(out)
        ckpt, _ = open_checkpointer(out)
        assert ckpt.resume().step == 8
        report = ckpt.save()
        assert report is not None
        assert report.retried_commit is True
        assert report.bytes_written == 0
        assert latest(out) == b"iter_000000008\n"
        after = tree_sha256(out)
        pointer_key = str(target.relative_to(out))
        assert {k: v for k, v in after.items() if k != pointer_key} == {
            k: v for k, v in before.items() if k != pointer_key
        }


class TestTracking:
    def test_model_without_state_dict(self, tmp_path: Path) -> None:
        """Tracking a model that has no state_dict names the argument and what it needs."""
        ckpt = sc.Checkpointer(
            sc.CheckpointConfig.load(None, CONFIG), run=RUN, output_root=tmp_path
        )
        optimizer = torch.optim.AdamW(torch.nn.Linear(2, 2).parameters())
        with pytest.raises(TrackingError) as info:
            ckpt.track(model=object(), optimizer=optimizer)
        assert str(info.value) == (
            "track(model=...): object has no state_dict / load_state_dict; register an object "
            "with state_dict() and load_state_dict() (a module, optimizer, scheduler or your "
            "own data source class)"
        )

    def test_data_source_without_load_state_dict(self, tmp_path: Path) -> None:
        """A data source with state_dict but no load_state_dict is refused, naming what lacks."""

        class HalfCursor:
            def state_dict(self) -> dict[str, int]:
                return {}

        ckpt = sc.Checkpointer(
            sc.CheckpointConfig.load(None, CONFIG), run=RUN, output_root=tmp_path
        )
        model = torch.nn.Linear(2, 2)
        with pytest.raises(
            TrackingError, match=r"track\(data=\.\.\.\): HalfCursor has no load_state_dict;"
        ):
            ckpt.track(
                model=model, optimizer=torch.optim.AdamW(model.parameters()), data=HalfCursor()
            )

    def test_save_before_track(self, tmp_path: Path) -> None:
        """Saving before anything is tracked says to call track() first and writes nothing."""
        ckpt = sc.Checkpointer(
            sc.CheckpointConfig.load(None, CONFIG), run=RUN, output_root=tmp_path
        )
        with pytest.raises(TrackingError, match=r"cannot save: call Checkpointer\.track"):
            ckpt.save()
        assert list(tmp_path.iterdir()) == []
