"""``data.cursor_resume`` over the source identity saved with the cursor, in one process with
real loaders: a plain ``DataLoader`` (no cursor) restarts under ``auto`` with the fix and is
refused at the first save under ``strict`` before anything is written; a changed fingerprint
fails in every mode but ``off``, naming what changed; a changed geometry restarts under
``auto`` and is refused under ``strict``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import statecraft as sc
from statecraft.checkpoint.data import DataIdentity, JsonlDataset
from statecraft.errors import CheckpointError, ResumeError

RUN = sc.RunIdentity("p", "g", "cursor")


class Cursor:
    """A data source with a cursor over a JSONL dataset (its ``dataset`` declares the
    fingerprint)."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset
        self.position = 0

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = state["position"]


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _ckpt(out: Path, data: Any, *overrides: str, identity: Any = None) -> sc.Checkpointer:
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    ckpt = sc.Checkpointer(
        sc.CheckpointConfig.load(None, ["save_every=1", "save_async=false", *overrides]),
        run=RUN,
        output_root=out,
    )
    ckpt.track(
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        data=data,
        data_identity=identity,
    )
    return ckpt


def _train(ckpt: sc.Checkpointer, steps: int, cursor: Cursor | None = None) -> None:
    for _ in range(steps):
        if cursor is not None:
            cursor.position += 1
        ckpt.record(sc.Outcome.APPLIED)
        ckpt.step_end()


def _plain_loader() -> torch.utils.data.DataLoader[Any]:
    return torch.utils.data.DataLoader(list(range(8)), batch_size=2)


class TestPlainDataLoader:
    def test_auto_says_the_data_restarts_with_the_fix(self, tmp_path: Path) -> None:
        """A plain DataLoader is tracked without a cursor; the resume restores the model and
        reports ``no_cursor`` with a note naming StatefulDataLoader."""
        ckpt = _ckpt(tmp_path, _plain_loader())
        ckpt.resume()
        _train(ckpt, 2)
        ckpt.close()
        again = _ckpt(tmp_path, _plain_loader())
        result = again.resume()
        again.close()
        assert (result.step, result.data) == (2, "no_cursor")
        [note] = [n for n in result.notes if "no cursor" in n]
        assert "the data restarts" in note
        assert "StatefulDataLoader" in note

    def test_strict_refuses_the_first_save_before_anything_is_written(self, tmp_path: Path) -> None:
        """Under strict the first save raises naming the fix, and no iteration exists."""
        ckpt = _ckpt(tmp_path, _plain_loader(), "data.cursor_resume=strict")
        ckpt.resume()
        ckpt.record(sc.Outcome.APPLIED)
        with pytest.raises(CheckpointError) as info:
            ckpt.step_end()
        message = str(info.value)
        assert "data.cursor_resume=strict" in message
        assert "DataLoader" in message
        assert "has no cursor" in message
        assert "StatefulDataLoader" in message
        assert "nothing was written" in message
        ckpt.close()
        assert list(tmp_path.rglob("iter_*")) == []

    def test_an_object_with_half_a_cursor_is_still_refused(self, tmp_path: Path) -> None:
        """Only a source with neither method is cursorless; one method alone is a mistake."""

        class Half:
            def __iter__(self) -> Any:
                return iter(())

            def state_dict(self) -> dict[str, Any]:
                return {}

        with pytest.raises(sc.errors.TrackingError, match="Half has no load_state_dict"):
            _ckpt(tmp_path, Half())


class TestFingerprintAtResume:
    def test_same_source_restores_exactly(self, tmp_path: Path) -> None:
        rows = [{"text": f"row {i}"} for i in range(4)]
        cursor = Cursor(JsonlDataset(_jsonl(tmp_path / "a.jsonl", rows)))
        ckpt = _ckpt(tmp_path / "out", cursor, "data.cursor_resume=strict")
        ckpt.resume()
        _train(ckpt, 2, cursor)
        ckpt.close()
        fresh = Cursor(JsonlDataset(tmp_path / "a.jsonl"))
        again = _ckpt(tmp_path / "out", fresh, "data.cursor_resume=strict")
        result = again.resume()
        again.close()
        assert (result.data, fresh.position) == ("restored", 2)

    @pytest.mark.parametrize("mode", ["auto", "strict"])
    def test_a_row_added_fails_naming_it(self, tmp_path: Path, mode: str) -> None:
        rows = [{"text": f"row {i}"} for i in range(4)]
        cursor = Cursor(JsonlDataset(_jsonl(tmp_path / "a.jsonl", rows)))
        ckpt = _ckpt(tmp_path / "out", cursor, f"data.cursor_resume={mode}")
        ckpt.resume()
        _train(ckpt, 2, cursor)
        ckpt.close()
        _jsonl(tmp_path / "a.jsonl", [*rows, {"text": "new"}])
        fresh = Cursor(JsonlDataset(tmp_path / "a.jsonl"))
        again = _ckpt(tmp_path / "out", fresh, f"data.cursor_resume={mode}")
        with pytest.raises(ResumeError) as info:
            again.resume()
        again.close()
        assert "rows added (4 -> 5 rows)" in str(info.value)
        assert "Nothing was loaded" in str(info.value)
        assert fresh.position == 0

    def test_off_ignores_the_changed_source(self, tmp_path: Path) -> None:
        rows = [{"text": f"row {i}"} for i in range(4)]
        cursor = Cursor(JsonlDataset(_jsonl(tmp_path / "a.jsonl", rows)))
        ckpt = _ckpt(tmp_path / "out", cursor)
        ckpt.resume()
        _train(ckpt, 2, cursor)
        ckpt.close()
        _jsonl(tmp_path / "a.jsonl", list(reversed(rows)))
        fresh = Cursor(JsonlDataset(tmp_path / "a.jsonl"))
        again = _ckpt(tmp_path / "out", fresh, "data.cursor_resume=off")
        result = again.resume()
        again.close()
        assert (result.step, result.data, fresh.position) == (2, "off", 0)

    def test_a_preprocessing_key_changed_fails_naming_the_key(self, tmp_path: Path) -> None:
        rows = [{"text": f"row {i}"} for i in range(4)]
        path = _jsonl(tmp_path / "a.jsonl", rows)
        cursor = Cursor(JsonlDataset(path, preprocessing={"max_len": 512}))
        ckpt = _ckpt(tmp_path / "out", cursor)
        ckpt.resume()
        _train(ckpt, 1, cursor)
        ckpt.close()
        fresh = Cursor(JsonlDataset(path, preprocessing={"max_len": 1024}))
        again = _ckpt(tmp_path / "out", fresh)
        changed = r"preprocessing key 'max_len' changed \(512 -> 1024\)"
        with pytest.raises(ResumeError, match=changed):
            again.resume()
        again.close()


class TestGeometry:
    def _saved(self, tmp_path: Path) -> Path:
        rows = [{"text": f"row {i}"} for i in range(4)]
        path = _jsonl(tmp_path / "a.jsonl", rows)
        cursor = Cursor(JsonlDataset(path))
        ckpt = _ckpt(tmp_path / "out", cursor, identity=DataIdentity(grad_accum=2, batch_size=8))
        ckpt.resume()
        _train(ckpt, 2, cursor)
        ckpt.close()
        return path

    def test_auto_restarts_the_epoch_naming_the_change(self, tmp_path: Path) -> None:
        path = self._saved(tmp_path)
        fresh = Cursor(JsonlDataset(path))
        again = _ckpt(tmp_path / "out", fresh, identity=DataIdentity(grad_accum=4, batch_size=8))
        result = again.resume()
        again.close()
        assert (result.step, result.data, fresh.position) == (2, "geometry_changed", 0)
        assert any("grad_accum 2 -> 4" in n for n in result.notes), result.notes

    def test_strict_refuses_before_anything_loads(self, tmp_path: Path) -> None:
        path = self._saved(tmp_path)
        fresh = Cursor(JsonlDataset(path))
        again = _ckpt(
            tmp_path / "out",
            fresh,
            "data.cursor_resume=strict",
            identity=DataIdentity(grad_accum=2, batch_size=16),
        )
        with pytest.raises(ResumeError, match=r"batch_size 8 -> 16.*strict refuses"):
            again.resume()
        again.close()
        assert fresh.position == 0
