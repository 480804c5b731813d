"""The source fingerprint of the shipped file sources (JSONL, tar-backed JSONL): what the
reference calls one source normalizes equal (key order, whitespace, blank lines, relative /
absolute / dotted path spellings, a tar re-packed with the same layout, mtimes), and every
semantic change (a row edited, added or moved, a preprocessing key, an archive's layout)
changes it and is named. Property tests (hypothesis) check both directions over generated
rows."""

from __future__ import annotations

import io
import json
import os
import random
import tarfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statecraft.checkpoint.data import Fingerprint, JsonlDataset, TarJsonlDataset
from statecraft.checkpoint.data.fingerprint import canonical_json


def _write(path: Path, rows: list[dict[str, Any]], *, spell: Any = json.dumps) -> Path:
    path.write_text("".join(spell(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _tar(
    path: Path, members: dict[str, bytes], *, mtime: int = 0, fmt: int = tarfile.USTAR_FORMAT
) -> None:
    with tarfile.open(path, "w", format=fmt) as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(content), mtime
            tar.addfile(info, io.BytesIO(content))


ROWS = [{"prompt": f"p{i}", "media": f"img/{i}.png", "score": i / 2} for i in range(5)]


def _fp(path: Path, **kwargs: Any) -> Fingerprint:
    return JsonlDataset(path, media_keys=("media",), **kwargs).fingerprint()


class TestJsonl:
    def test_a_row_edited_changes_it_and_is_named(self, tmp_path: Path) -> None:
        before = _fp(_write(tmp_path / "a.jsonl", ROWS))
        edited = [dict(r) for r in ROWS]
        edited[2]["prompt"] = "changed"
        after = _fp(_write(tmp_path / "a.jsonl", edited))
        assert after.changes(before) == ["row content changed (still 5 rows, some edited)"]

    def test_rows_reordered_change_it_and_are_named(self, tmp_path: Path) -> None:
        before = _fp(_write(tmp_path / "a.jsonl", ROWS))
        after = _fp(_write(tmp_path / "a.jsonl", [ROWS[1], ROWS[0], *ROWS[2:]]))
        assert after.changes(before) == ["row order changed (the same 5 rows in another order)"]

    def test_rows_added_and_removed_are_named(self, tmp_path: Path) -> None:
        before = _fp(_write(tmp_path / "a.jsonl", ROWS))
        more = _fp(_write(tmp_path / "a.jsonl", [*ROWS, {"prompt": "x"}]))
        fewer = _fp(_write(tmp_path / "a.jsonl", ROWS[:3]))
        assert more.changes(before) == ["rows added (5 -> 6 rows)"]
        assert fewer.changes(before) == ["rows removed (5 -> 3 rows)"]

    def test_the_filter_is_covered(self, tmp_path: Path) -> None:
        """The fingerprint is of the filtered rows: another filter is another source."""
        path = _write(tmp_path / "a.jsonl", ROWS)
        every = _fp(path)
        some = _fp(path, keep=lambda r: r["score"] >= 1)
        assert some.changes(every) == ["rows removed (5 -> 3 rows)"]

    def test_a_preprocessing_key_changed_is_named(self, tmp_path: Path) -> None:
        path = _write(tmp_path / "a.jsonl", ROWS)
        before = _fp(path, preprocessing={"max_len": 512, "template": "chat"})
        after = _fp(path, preprocessing={"max_len": 1024, "template": "chat", "crop": True})
        assert after.changes(before) == [
            "preprocessing key 'crop' added (True)",
            "preprocessing key 'max_len' changed (512 -> 1024)",
        ]

    def test_relative_and_absolute_media_spellings_are_equal(self, tmp_path: Path) -> None:
        """Media paths resolve against the JSONL's directory: relative, dotted and absolute
        spellings of one file are one source; items carry the absolute path."""
        relative = _fp(_write(tmp_path / "a.jsonl", ROWS))
        spelled = [
            {**r, "media": str(tmp_path / r["media"]) if i % 2 else f"./img/../{r['media']}"}
            for i, r in enumerate(ROWS)
        ]
        dataset = JsonlDataset(_write(tmp_path / "a.jsonl", spelled), media_keys=("media",))
        assert dataset.fingerprint() == relative
        assert dataset[2]["media"] == str(tmp_path / "img" / "2.png")

    def test_the_launch_directory_does_not_count(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Relative media paths resolve against the JSONL, not the CWD; the JSONL itself may
        be named relatively from anywhere."""
        (tmp_path / "data").mkdir()
        _write(tmp_path / "data" / "a.jsonl", ROWS)
        monkeypatch.chdir(tmp_path)
        from_root = JsonlDataset("data/a.jsonl", media_keys=("media",))
        monkeypatch.chdir(tmp_path / "data")
        from_data = JsonlDataset("a.jsonl", media_keys=("media",))
        assert from_root.fingerprint() == from_data.fingerprint()
        assert from_root[0]["media"] == from_data[0]["media"] == str(tmp_path / "data/img/0.png")

    def test_no_mtimes_and_no_media_stat(self, tmp_path: Path) -> None:
        """Touching (or deleting) a loose media file does not change the fingerprint: it is a
        manifest identity; rows that carry a digest are covered through that field."""
        (tmp_path / "img").mkdir()
        (tmp_path / "img" / "0.png").write_bytes(b"png")
        before = _fp(_write(tmp_path / "a.jsonl", ROWS))
        os.utime(tmp_path / "img" / "0.png", (1, 1))
        os.utime(tmp_path / "a.jsonl", (1, 1))
        assert _fp(tmp_path / "a.jsonl") == before
        with_digest = [{**r, "sha256": "aa"} for r in ROWS]
        other_digest = [{**r, "sha256": "bb" if i == 0 else "aa"} for i, r in enumerate(ROWS)]
        a = _fp(_write(tmp_path / "a.jsonl", with_digest))
        b = _fp(_write(tmp_path / "a.jsonl", other_digest))
        assert b.changes(a) == ["row content changed (still 5 rows, some edited)"]

    def test_the_payload_round_trips(self, tmp_path: Path) -> None:
        fingerprint = _fp(_write(tmp_path / "a.jsonl", ROWS), preprocessing={"k": [1, "x"]})
        again, problems = Fingerprint.from_payload(fingerprint.to_payload())
        assert (again, problems) == (fingerprint, [])
        bad, problems = Fingerprint.from_payload({"version": 9, "digest": 3})
        assert bad is None
        assert "version: expected 1; got 9" in problems
        assert "digest: expected a hex str; got 3" in problems

    def test_a_bad_line_names_the_file_and_line(self, tmp_path: Path) -> None:
        (tmp_path / "a.jsonl").write_text('{"a": 1}\n[1]\n')
        with pytest.raises(ValueError, match=r"a\.jsonl:2: expected a JSON object; got list"):
            JsonlDataset(tmp_path / "a.jsonl")


TAR_ROWS = [{"member": f"{i}.txt", "label": i} for i in range(4)]
MEMBERS = {f"{i}.txt": f"sample {i}".encode() for i in range(4)}


class TestTarBacked:
    def _source(self, tmp_path: Path, rows: list[dict[str, Any]], **kwargs: Any) -> TarJsonlDataset:
        return TarJsonlDataset(_write(tmp_path / "a.jsonl", rows), **kwargs)

    def test_the_archive_path_and_size_are_covered(self, tmp_path: Path) -> None:
        (tmp_path / "shards").mkdir()
        _tar(tmp_path / "shards" / "s0.tar", MEMBERS)
        source = self._source(tmp_path, TAR_ROWS, archive="shards/s0.tar")
        size = (tmp_path / "shards" / "s0.tar").stat().st_size
        assert source.fingerprint().archives == (("shards/s0.tar", size),)
        assert source[1]["bytes"] == b"sample 1"

    def test_a_repack_with_the_same_layout_is_equal(self, tmp_path: Path) -> None:
        """Re-packed with the same rows and layout (new mtimes): the same source."""
        _tar(tmp_path / "s0.tar", MEMBERS, mtime=1)
        before = self._source(tmp_path, TAR_ROWS, archive="s0.tar").fingerprint()
        _tar(tmp_path / "s0.tar", MEMBERS, mtime=2_000_000)
        assert self._source(tmp_path, TAR_ROWS, archive="s0.tar").fingerprint() == before

    def test_a_repack_with_another_layout_changes_it_and_names_the_archive(
        self, tmp_path: Path
    ) -> None:
        """The same rows re-packed in another layout move the offsets: another source."""
        _tar(tmp_path / "s0.tar", MEMBERS)
        before = self._source(tmp_path, TAR_ROWS, archive="s0.tar").fingerprint()
        _tar(tmp_path / "s0.tar", {**MEMBERS, "pad.bin": b"\0" * 16384})
        after = self._source(tmp_path, TAR_ROWS, archive="s0.tar").fingerprint()
        [change] = after.changes(before)
        assert change.startswith("archive 's0.tar' size changed (")

    def test_tar_path_spellings_normalize_equal(self, tmp_path: Path) -> None:
        """Omitted, empty, absolute and equivalent relative tar_path spellings of the
        effective archive are one identity."""
        (tmp_path / "shards").mkdir()
        _tar(tmp_path / "shards" / "s0.tar", MEMBERS)
        omitted = self._source(tmp_path, TAR_ROWS, archive="shards/s0.tar").fingerprint()
        spellings = ["", str(tmp_path / "shards" / "s0.tar"), "./shards/s0.tar",
                     "shards/../shards/s0.tar"]  # fmt: skip
        rows = [{**r, "tar_path": spellings[i % 4]} for i, r in enumerate(TAR_ROWS)]
        spelled = self._source(tmp_path, rows, archive=str(tmp_path / "shards" / "s0.tar"))
        assert spelled.fingerprint() == omitted

    def test_a_row_without_an_archive_is_refused(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError, match="kept row 0 has no 'tar_path'"):
            self._source(tmp_path, TAR_ROWS)


# -- properties ---------------------------------------------------------------------------

_values = st.one_of(
    st.none(), st.booleans(), st.integers(-1000, 1000), st.text(max_size=8),
    st.lists(st.integers(0, 9), max_size=3),
)  # fmt: skip
_rows = st.lists(
    st.dictionaries(st.sampled_from(["a", "b", "c", "text", "n"]), _values, max_size=4).map(
        lambda r: {**r, "media": f"m/{len(r)}.png"}
    ),
    min_size=1,
    max_size=8,
)
_settings = st.dictionaries(st.sampled_from(["max_len", "template", "crop"]), _values, max_size=3)
_PROPERTY = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _respell(row: dict[str, Any], base: Path, rng: random.Random) -> str:
    """One of the spellings the reference calls equal: key order, whitespace, the media path
    relative, dotted or absolute."""
    items = list(row.items())
    rng.shuffle(items)
    media = row["media"]
    spelled = rng.choice([media, f"./{media}", f"m/../{media}", str(base / media)])
    shuffled = {k: (spelled if k == "media" else v) for k, v in items}
    separators = rng.choice([(",", ":"), (", ", ": "), (" ,", " :  ")])
    return json.dumps(shuffled, separators=separators, ensure_ascii=rng.random() < 0.5)


@_PROPERTY
@given(rows=_rows, preprocessing=_settings, seed=st.integers(0, 2**16))
def test_equivalent_spellings_have_one_fingerprint(
    tmp_path_factory: pytest.TempPathFactory,
    rows: list[dict[str, Any]],
    preprocessing: dict[str, Any],
    seed: int,
) -> None:
    base = tmp_path_factory.mktemp("spell")
    plain = _fp(_write(base / "a.jsonl", rows), preprocessing=preprocessing)
    rng = random.Random(seed)
    lines = []
    for row in rows:
        lines += [""] * rng.randint(0, 1) + [_respell(row, base, rng)]
    (base / "b.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    settings_reordered = dict(reversed(list(preprocessing.items())))
    assert _fp(base / "b.jsonl", preprocessing=settings_reordered) == plain


@_PROPERTY
@given(rows=_rows, preprocessing=_settings, data=st.data())
def test_every_semantic_change_changes_it(
    tmp_path_factory: pytest.TempPathFactory,
    rows: list[dict[str, Any]],
    preprocessing: dict[str, Any],
    data: st.DataObject,
) -> None:
    base = tmp_path_factory.mktemp("change")
    before = _fp(_write(base / "a.jsonl", rows), preprocessing=preprocessing)
    index = data.draw(st.integers(0, len(rows) - 1))
    edited = [dict(r) for r in rows]
    edited[index]["edited"] = data.draw(_values)
    added = [*rows, data.draw(_rows)[0]]
    changes = {
        "edited": (edited, preprocessing),
        "added": (added, preprocessing),
        "setting": (rows, {**preprocessing, "max_len": data.draw(st.text(min_size=1)) + "!"}),
    }
    other = data.draw(st.integers(0, len(rows) - 1))
    if canonical_json(rows[index]) != canonical_json(rows[other]):
        moved = list(rows)
        moved[index], moved[other] = moved[other], moved[index]
        changes["moved"] = (moved, preprocessing)
    for name, (changed_rows, changed_settings) in changes.items():
        after = _fp(_write(base / f"{name}.jsonl", changed_rows), preprocessing=changed_settings)
        assert after.digest != before.digest, name
        assert after.changes(before), name
