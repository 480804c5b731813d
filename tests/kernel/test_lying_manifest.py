"""Issue 8 item 4: a manifest that lies, and all-or-nothing loading.

A committed run (iterations 2, 4, 6, 8 of ``nn.Linear`` + AdamW + StepLR + a data cursor) is
written by the real :class:`~statecraft.Checkpointer`; iteration 8's manifest is then doctored
on the real filesystem so that it still conforms to its JSON schema (component dropped, format
``dcp``, an unknown extra file). Every doctored checkpoint is passed over by ``resume=auto``
with its reason (resume falls back to iteration 6), refused by an explicit resume with the
message, reported the same way by ``statecraft inspect``; the live objects and every
committed byte are unchanged. Loading is all-or-nothing: a checkpoint that verifies but does
not fit the live objects, or whose load fails half-way, leaves every tracked object as it was.
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest
import torch
import xxhash
from checkpoint_runs import RUN, Objects, committed_run, open_checkpointer

import statecraft as sc
from statecraft.checkpoint.kernel.layout import MANIFEST_NAME, iter_dirname
from statecraft.checkpoint.kernel.verify import plan_problems, read_manifest, verify_checkpoint
from statecraft.cli.inspect import inspect_path
from statecraft.errors import CheckpointCorruptError, ResumeError
from statecraft.storage import LocalStore
from statecraft.writers.consolidated import ConsolidatedWriter


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Committed iterations 2, 4, 6 and 8 of a run that tracks a data source."""
    return committed_run(tmp_path_factory.mktemp("pristine"), data=True)


def iter_path(out: Path, iteration: int) -> Path:
    attempt = min(p for p in RUN.job_dir(out).iterdir() if p.is_dir())
    return attempt / "checkpoints" / iter_dirname(iteration)


def all_bytes(out: Path) -> dict[str, bytes]:
    """Every file under the output root, by relative path."""
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        # the writer lease and locks are rewritten on takeover by design; the rest never is
        if p.is_file() and not p.name.startswith((".statecraft-writer.", ".statecraft-launch."))
    }


def doctor(out: Path, iteration: int, edit: Any) -> None:
    """Rewrite ``iteration``'s manifest through ``edit`` (the result still fits the schema)."""
    path = iter_path(out, iteration) / MANIFEST_NAME
    manifest = json.loads(path.read_bytes())
    edit(manifest, iter_path(out, iteration))
    path.write_text(json.dumps(manifest, sort_keys=True, indent=1) + "\n")


def _drop(name: str) -> Any:
    def edit(manifest: dict[str, Any], _: Path) -> None:
        del manifest["files"][name]

    return edit


def _without_data(manifest: dict[str, Any], directory: Path) -> None:
    """A checkpoint without data.pt: its manifest entry and the file both gone (what a save
    without a data source leaves; dropping the entry alone is a lie, see LIES)."""
    del manifest["files"]["data.pt"]
    (directory / "data.pt").unlink()


def _format_dcp(manifest: dict[str, Any], _: Path) -> None:
    manifest["format"] = "dcp"


def _extra_file(manifest: dict[str, Any], where: Path) -> None:
    data = b"not part of any plan"
    (where / "extra.pt").write_bytes(data)
    manifest["files"]["extra.pt"] = {
        "size": len(data),
        "digest": {"algorithm": "xxh3_128", "value": xxhash.xxh3_128_hexdigest(data)},
    }


LIES = [
    pytest.param(_drop("model.pt"), "it lacks ['model.pt'], required by the checkpoint plan",
                 id="no-model"),
    pytest.param(_drop("optim.pt"), "it lacks ['optim.pt'], required by the checkpoint plan",
                 id="no-optim"),
    # a consolidated checkpoint relabeled 'dcp': resume (consolidated) names the format, a
    # reader of any format (inspect) the DCP plan's missing entries; both refuse it as a lie
    pytest.param(_format_dcp, "the manifest does not describe a full exact-resume checkpoint",
                 id="format-dcp"),
    pytest.param(_extra_file, "it records ['extra.pt'], which is not an entry of the checkpoint "
                 "plan ['model.pt', 'optim.pt', 'old.pt', 'ref.pt', 'trainer.pt', 'data.pt']",
                 id="extra-file"),
    # data.pt on disk, its entry dropped: the manifest omits a file its plan requires
    pytest.param(_drop("data.pt"), "it omits ['data.pt'], which is on disk", id="no-data-entry"),
]  # fmt: skip


def live_state(ckpt: sc.Checkpointer, objects: Objects) -> dict[str, Any]:
    """A deep copy of every tracked object's state: model, optimizer, scheduler, data cursor,
    RNG streams and clocks."""
    return {
        "model": {k: v.detach().clone() for k, v in objects.model.state_dict().items()},
        "optimizer": copy.deepcopy(objects.optimizer.state_dict()),
        "lr": [g["lr"] for g in objects.optimizer.param_groups],
        "scheduler": copy.deepcopy(objects.scheduler.state_dict()),
        "data": objects.cursor.position,
        "torch_rng": torch.get_rng_state().clone(),
        "python_rng": random.getstate(),
        "numpy_rng": np.random.get_state()[1].copy(),  # type: ignore[index]
        "clocks": repr(ckpt.tracked.clocks),
    }


def assert_same_state(before: dict[str, Any], after: dict[str, Any]) -> None:
    for key, value in before.items():
        other = after[key]
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, other), key
        elif isinstance(value, np.ndarray):
            assert np.array_equal(value, other), key
        elif key == "model":
            assert value.keys() == other.keys()
            assert all(torch.equal(value[k], other[k]) for k in value), key
        elif key == "optimizer":
            assert repr(value) == repr(other), key  # tensors print their values
        else:
            assert value == other, key


class TestLyingManifest:
    @pytest.mark.parametrize(("lie", "words"), LIES)
    def test_auto_passes_over_with_the_reason(self, out: Path, lie: Any, words: str) -> None:
        """resume=auto passes over the doctored iteration with its reason and resumes from 6."""
        doctor(out, 8, lie)
        before = all_bytes(out)
        ckpt, _ = open_checkpointer(out)
        result = ckpt.resume()
        assert result.step == 6
        assert [p.name for p in result.passed_over] == ["iter_000000008"]
        assert words in result.passed_over[0].reason
        assert all_bytes(out) == before

    @pytest.mark.parametrize(("lie", "words"), LIES)
    def test_explicit_resume_fails_and_changes_nothing(
        self, out: Path, lie: Any, words: str
    ) -> None:
        """An explicit resume of the doctored iteration fails with the message; the live
        objects and every committed byte are unchanged."""
        doctor(out, 8, lie)
        before = all_bytes(out)
        ckpt, objects = open_checkpointer(out, f"resume={iter_path(out, 8)}")
        state = live_state(ckpt, objects)
        with pytest.raises(CheckpointCorruptError) as info:
            ckpt.resume()
        message = str(info.value)
        assert "iter_000000008" in message
        assert words in message
        assert "resume from another" in message
        assert_same_state(state, live_state(ckpt, objects))
        assert all_bytes(out) == before

    @pytest.mark.parametrize(("lie", "words"), LIES)
    def test_inspect_agrees(self, out: Path, lie: Any, words: str) -> None:
        """inspect reports the doctored iteration corrupt with resume's reason and picks 6."""
        doctor(out, 8, lie)
        before = all_bytes(out)
        for verify in (False, True):
            report = inspect_path(RUN.job_dir(out), verify=verify)
            auto = report["resume_auto"]
            assert auto["pick"] == "iter_000000006"
            assert [p["name"] for p in auto["passed_over"]] == ["iter_000000008"]
            assert words in auto["passed_over"][0]["reason"]
        assert all_bytes(out) == before


class TestPlanProblems:
    def test_every_disagreement_is_named(self, out: Path) -> None:
        """A manifest (built past the schema) of another format, partial components, a
        missing and an unknown entry gets one line for each."""
        store = LocalStore(str(iter_path(out, 8).parent))
        manifest = read_manifest(store, 8)
        files = dict(manifest.files)
        files["extra.pt"] = files.pop("optim.pt")
        lying = attrs.evolve(
            manifest, format="dcp", components=("model", "training_state"), files=files
        )
        assert plan_problems(lying, ConsolidatedWriter()) == [
            "it records format 'dcp' but is read by ConsolidatedWriter(), which reads "
            "'consolidated' checkpoints",
            "it records components ['model', 'training_state'], not the full plan "
            "['model', 'optimizer', 'training_state']",
            "it lacks ['optim.pt'], required by the checkpoint plan",
            "it records ['extra.pt'], which is not an entry of the checkpoint plan "
            "['model.pt', 'optim.pt', 'old.pt', 'ref.pt', 'trainer.pt', 'data.pt']",
        ]
        assert plan_problems(manifest, ConsolidatedWriter()) == []

    def test_a_dcp_manifest_past_the_schema_is_refused(self, out: Path) -> None:
        """verify_checkpoint refuses a conforming manifest whose format is not the writer's."""

        class DcpNamedWriter(ConsolidatedWriter):
            format_name = "dcp"

            def __repr__(self) -> str:
                return "DcpNamedWriter()"

        store = LocalStore(str(iter_path(out, 8).parent))
        before = all_bytes(out)
        with pytest.raises(CheckpointCorruptError) as info:
            verify_checkpoint(store, 8, writer=DcpNamedWriter())
        assert "it records format 'consolidated' but is read by DcpNamedWriter()" in str(info.value)
        assert all_bytes(out) == before


class TestMissingDataCursor:
    def test_strict_auto_passes_over(self, out: Path) -> None:
        """Under cursor_resume=strict a tracked data source passes over a checkpoint without
        data.pt, naming it and the fix, and resumes the older one exactly."""
        doctor(out, 8, _without_data)
        before = all_bytes(out)
        ckpt, objects = open_checkpointer(out, "data.cursor_resume=strict")
        result = ckpt.resume()
        assert result.step == 6
        assert result.data == "restored"
        assert objects.cursor.position == 12
        (passed,) = result.passed_over
        assert passed.name == "iter_000000008"
        assert "data.cursor_resume=strict and a data source is tracked" in passed.reason
        assert "no data.pt" in passed.reason
        assert "set data.cursor_resume=auto" in passed.reason
        assert all_bytes(out) == before

    def test_strict_explicit_fails_and_changes_nothing(self, out: Path) -> None:
        """An explicit strict resume of a checkpoint without data.pt fails before any load."""
        doctor(out, 8, _without_data)
        before = all_bytes(out)
        ckpt, objects = open_checkpointer(
            out, "data.cursor_resume=strict", f"resume={iter_path(out, 8)}"
        )
        state = live_state(ckpt, objects)
        with pytest.raises(ResumeError, match=r"iter_000000008: data.cursor_resume=strict"):
            ckpt.resume()
        assert_same_state(state, live_state(ckpt, objects))
        assert all_bytes(out) == before

    def test_auto_cursor_resume_warns_visibly(
        self, out: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Under cursor_resume=auto the checkpoint is resumed, and the non-exact data restart
        is a logged warning and a note of the result."""
        doctor(out, 8, _without_data)
        before = all_bytes(out)
        ckpt, objects = open_checkpointer(out)
        with caplog.at_level("WARNING", logger="statecraft.resume"):
            result = ckpt.resume()
        assert (result.step, result.data) == (8, "missing")
        assert objects.cursor.position == 0
        assert any("has no data.pt" in n and "not exact" in n for n in result.notes)
        assert "has no data.pt" in caplog.text
        assert all_bytes(out) == before

    def test_without_a_data_source_nothing_is_required(self, out: Path) -> None:
        """A resume that tracks no data source adopts a checkpoint without data.pt."""
        doctor(out, 8, _without_data)
        ckpt, _ = open_checkpointer(out, "data.cursor_resume=strict", data=False)
        assert ckpt.resume().step == 8


class _FailingLinear(torch.nn.Linear):
    """A model whose own load fails after the checks pass (the last step of a load)."""

    def load_state_dict(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("device lost while copying weights")


class _FailingCursor:
    def __init__(self) -> None:
        self.position = 0
        self.loads = 0

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.loads += 1
        self.position = state["position"]
        if self.loads == 1:  # the checkpoint's state: half-applied, then fails; the undo works
            raise KeyError("shard_index")


def _track(out: Path, objects: Objects, *overrides: str) -> sc.Checkpointer:
    ckpt = sc.Checkpointer(
        sc.CheckpointConfig.load(None, ["save_every=2", "save_async=false", *overrides]),
        run=RUN,
        output_root=out,
    )
    ckpt.track(
        model=objects.model,
        optimizer=objects.optimizer,
        scheduler=objects.scheduler,
        data=objects.cursor,
    )
    return ckpt


class TestAllOrNothing:
    def test_model_shape_mismatch_changes_nothing(self, out: Path) -> None:
        """A model of another shape is refused before anything loads, naming the key."""
        before = all_bytes(out)
        objects = Objects()
        objects.model = torch.nn.Linear(4, 5)
        objects.optimizer = torch.optim.AdamW(objects.model.parameters(), lr=0.01)
        objects.scheduler = torch.optim.lr_scheduler.StepLR(objects.optimizer, step_size=2)
        ckpt = _track(out, objects, f"resume={iter_path(out, 8)}")
        state = live_state(ckpt, objects)
        with pytest.raises(ResumeError) as info:
            ckpt.resume()
        message = str(info.value)
        assert "model.pt 'weight' has shape (3, 4), the live model (5, 4)" in message
        assert "nothing was loaded: every tracked object is unchanged" in message
        assert_same_state(state, live_state(ckpt, objects))
        assert all_bytes(out) == before

    def test_optimizer_group_mismatch_changes_nothing(self, out: Path) -> None:
        """An optimizer with another number of parameter groups is refused before any load."""
        before = all_bytes(out)
        objects = Objects()
        groups: list[dict[str, Any]] = [
            {"params": [objects.model.weight]},
            {"params": [objects.model.bias]},
        ]
        objects.optimizer = torch.optim.AdamW(groups, lr=0.01)
        objects.scheduler = torch.optim.lr_scheduler.StepLR(objects.optimizer, step_size=2)
        ckpt = _track(out, objects, f"resume={iter_path(out, 8)}")
        state = live_state(ckpt, objects)
        with pytest.raises(ResumeError, match=r"optim\.pt has 1 parameter groups, the live "):
            ckpt.resume()
        assert_same_state(state, live_state(ckpt, objects))
        assert all_bytes(out) == before

    def test_failing_model_load_rolls_everything_back(self, out: Path) -> None:
        """The model loads last; when its own load fails, the data cursor, scheduler,
        optimizer and RNG already loaded are restored and the error names the model."""
        before = all_bytes(out)
        objects = Objects()
        torch.manual_seed(0)
        objects.model = _FailingLinear(4, 3)
        objects.optimizer = torch.optim.AdamW(objects.model.parameters(), lr=0.01)
        objects.scheduler = torch.optim.lr_scheduler.StepLR(objects.optimizer, step_size=2)
        objects.step()  # live state that differs from the checkpoint's
        ckpt = _track(out, objects, f"resume={iter_path(out, 8)}")
        state = live_state(ckpt, objects)
        with pytest.raises(ResumeError) as info:
            ckpt.resume()
        message = str(info.value)
        assert "loading the model failed (RuntimeError: device lost" in message
        assert "restored, so nothing changed" in message
        assert_same_state(state, live_state(ckpt, objects))
        assert ckpt.step == 0
        assert all_bytes(out) == before

    def test_failing_data_load_is_undone(self, out: Path) -> None:
        """A data source whose load half-applies and raises is restored, nothing else loads."""
        before = all_bytes(out)
        objects = Objects()
        objects.cursor = _FailingCursor()  # type: ignore[assignment]
        objects.cursor.position = 5
        ckpt = _track(out, objects, f"resume={iter_path(out, 8)}")
        state = live_state(ckpt, objects)
        with pytest.raises(ResumeError, match=r"loading the data source failed \(KeyError"):
            ckpt.resume()
        assert_same_state(state, live_state(ckpt, objects))
        assert all_bytes(out) == before
