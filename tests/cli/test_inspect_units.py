"""``statecraft inspect`` wherever users have checkpoints: a Lightning dirpath and one
``*.ckpt``, a Hugging Face output_dir and one ``checkpoint-N``, a single committed unit, a
directory of output roots (the demo's ``--out``); and the brief view by default with the
file listing behind ``--files``. Read-only throughout."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from checkpoint_runs import RUN, committed_run

from statecraft.checkpoint.kernel.layout import MANIFEST_NAME, iter_dirname
from statecraft.checkpoint.units import seal_unit
from statecraft.cli import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["inspect", *argv])
    return code, capsys.readouterr().out


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code, out = _run(capsys, *argv, "--json")
    return code, json.loads(out)["data"]


def _snapshot(root: Path) -> dict[str, tuple[bool, int]]:
    return {str(p): (p.is_symlink(), p.lstat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def _hf_output_dir(root: Path) -> Path:
    """checkpoint-5 and checkpoint-10 committed, checkpoint-15 interrupted (no manifest)."""
    from statecraft.storage.local import LocalStore

    store = LocalStore(str(root))
    for n in (5, 10):
        seal_unit(store, f"checkpoint-{n}", framework="hf-trainer", step=n,
                  payloads={"model.safetensors": lambda f: f.write(b"w" * 64)})  # fmt: skip
    (root / "checkpoint-15").mkdir()
    (root / "checkpoint-15" / "model.safetensors").write_bytes(b"torn")
    return root


class TestFrameworkCheckpoints:
    def test_lightning_dirpath_and_one_ckpt(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A ModelCheckpoint dirpath lists each *.ckpt with its state, generation, step and
        link; an interrupted save is shown with why; one *.ckpt alone works too."""
        pytest.importorskip("lightning_fabric")
        from statecraft.integrations.lightning import SLOTS_DIR, StatecraftCheckpointIO

        ckpts = tmp_path / "ckpts"
        io = StatecraftCheckpointIO()
        for step in (4, 8):
            state = {"global_step": step, "epoch": 0, "w": torch.ones(2)}
            io.save_checkpoint(state, ckpts / f"epoch=0-step={step}.ckpt")
            io.save_checkpoint(state, ckpts / "last.ckpt")
        (ckpts / SLOTS_DIR / "epoch=1-step=12.ckpt" / "g00000001").mkdir(parents=True)
        before = _snapshot(ckpts)
        code, data = _json(capsys, str(ckpts))
        assert code == 0
        assert data["kind"] == "units"
        units = {u["name"]: u for u in data["units"]["units"]}
        assert units["last.ckpt"]["state"] == "committed"
        assert units["last.ckpt"]["link"] == "last.ckpt/g00000002"
        assert units["last.ckpt"]["step"] == 8
        assert units["epoch=1-step=12.ckpt"]["state"] == "uncommitted"
        assert data["units"]["newest_committed"] in {
            str(ckpts / "epoch=0-step=8.ckpt"),
            str(ckpts / "last.ckpt"),
        }
        code, text = _run(capsys, str(ckpts))
        assert "last.ckpt             committed    g00000002  step 8" in text
        assert "passed over g00000001: uncommitted" in text
        assert "checkpoint.pt" not in text  # the brief view
        code, text = _run(capsys, str(ckpts), "--files")
        assert "checkpoint.pt" in text
        code, data = _json(capsys, str(ckpts / "last.ckpt"), "--verify")
        assert code == 0
        assert [u["name"] for u in data["units"]["units"]] == ["last.ckpt"]
        assert _snapshot(ckpts) == before

    def test_hf_output_dir_and_one_checkpoint(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An output_dir lists each checkpoint-N (largest first) with its state; the newest
        committed is the one last_committed_checkpoint returns; one folder alone works."""
        out = _hf_output_dir(tmp_path / "out")
        code, data = _json(capsys, str(out))
        assert code == 0
        report = data["units"]
        assert report["framework"] == "hf"
        assert [(u["name"], u["state"]) for u in report["units"]] == [
            ("checkpoint-15", "uncommitted"),
            ("checkpoint-10", "committed"),
            ("checkpoint-5", "committed"),
        ]
        assert report["newest_committed"] == str(out / "checkpoint-10")
        code, data = _json(capsys, str(out / "checkpoint-5"))
        assert (code, data["units"]["framework"]) == (0, "unit")
        assert data["units"]["units"][0]["files"][0]["name"] == "model.safetensors"

    def test_a_directory_without_checkpoints_is_still_refused(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An empty directory holds nothing inspect knows: exit 1 naming what it looks for."""
        code, data = _json(capsys, str(tmp_path))
        assert code == 1
        assert "units" not in data


class TestDemoRootAndViews:
    def test_the_demo_output_root_lists_the_runs_of_each_root_under_it(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The demo prints a directory holding one output root per run (clean/, faulty/):
        inspect lists every run of each, named <root>/<project>/<group>/<name>."""
        out = tmp_path / "demo"
        committed_run(out / "faulty", data=False)
        shutil.copytree(out / "faulty", out / "clean", symlinks=True)
        code, data = _json(capsys, str(out))
        assert code == 0
        assert data["kind"] == "root"
        run = "/".join(RUN.job_dir(Path("x")).parts[1:])
        assert [r["run"] for r in data["runs"]] == [f"clean/{run}", f"faulty/{run}"]
        assert {r["newest_committed"] for r in data["runs"]} == {iter_dirname(8)}

    def test_brief_by_default_and_every_file_with_files(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The default view is one line per iteration; --files adds each file and its size;
        a file that differs from its manifest is shown in both."""
        out = committed_run(tmp_path, data=False)
        job = RUN.job_dir(out)
        attempt = next(p for p in job.iterdir() if p.is_dir())
        model = attempt / "checkpoints" / iter_dirname(4) / "model.pt"
        model.write_bytes(model.read_bytes()[:-1])
        code, brief = _run(capsys, str(job))
        assert code == 0
        assert f"{iter_dirname(8)}  committed" in brief
        assert MANIFEST_NAME not in brief
        assert "model.pt" in brief  # the resized file, with its note
        assert _run(capsys, str(job), "--brief")[1] == brief
        code, full = _run(capsys, str(job), "--files")
        assert full.count(MANIFEST_NAME) >= 4
        assert len(full.splitlines()) > len(brief.splitlines())
