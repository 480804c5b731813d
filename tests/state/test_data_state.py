"""The per-rank ``data.pt`` payload (``statecraft.data-state.v2``; ``v1`` is still read): what
it holds, how a legacy single-rank file reads, what a malformed one says, and a single-process
save and resume. The two-rank cases are in ``test_distributed_data.py``."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import torch
import xxhash
from checkpoint_runs import Cursor
from data_sources import plain_cursor_source

import statecraft as sc
from statecraft.checkpoint.state import (
    DATA_STATE_SCHEMA,
    DATA_STATE_V1,
    DataState,
    gather_data_state,
)
from statecraft.errors import TrainerStateError
from statecraft.parallel.collectives import SingleProcess

SOURCE = "/ck/iter_000000004/data.pt"
CONFIG = ["save_every=2", "save_async=false", "keep_optim_last=0"]
RUN = sc.RunIdentity("p", "g", "data")


class TestDataStatePayload:
    def test_round_trip_with_the_source_identity(self) -> None:
        """A state with its source identity is the v2 payload; it reads back equal."""
        state = DataState(world_size=1, ranks=({"position": 4},), source={"kind": "state_dict"})
        payload = state.to_payload()
        assert payload == {
            "schema": DATA_STATE_SCHEMA,
            "world_size": 1,
            "ranks": [{"position": 4}],
            "source": {"kind": "state_dict"},
        }
        assert DATA_STATE_SCHEMA == "statecraft.data-state.v2"
        assert DataState.from_payload(payload, source=SOURCE) == state

    def test_a_v2_payload_without_its_source_is_malformed(self) -> None:
        """v2 names the source identity; a v2 payload without it is refused, not guessed."""
        with pytest.raises(TrainerStateError) as info:
            DataState.from_payload(
                {"schema": DATA_STATE_SCHEMA, "world_size": 1, "ranks": [{}]}, source=SOURCE
            )
        assert info.value.problems == [  # type: ignore[attr-defined]
            "source: expected the source identity (a dict); got None (NoneType)"
        ]

    def test_round_trip(self) -> None:
        """to_payload / from_payload keep the world size and every rank's state in order
        (without a source identity: the v1 payload, which is still read)."""
        state = DataState(world_size=2, ranks=({"position": 4}, {"position": 8}))
        payload = state.to_payload()
        assert payload == {
            "schema": DATA_STATE_V1,
            "world_size": 2,
            "ranks": [{"position": 4}, {"position": 8}],
        }
        loaded = DataState.from_payload(payload, source=SOURCE)
        assert loaded == state
        assert loaded.state_for(1, 2) == {"position": 8}
        assert loaded.state_for(0, 3) is None  # another world size: no rank's own

    @pytest.mark.parametrize(
        "payload",
        [{"position": 4}, {"schema": "my-sampler-v3", "position": 4}, [1, 2], 7],
        ids=["dict", "foreign-schema-key", "list", "int"],
    )
    def test_a_payload_without_the_schema_is_legacy(self, payload: Any) -> None:
        """Whatever a data source's state_dict was (even with its own 'schema' key) reads as
        the legacy state of a world of one."""
        state = DataState.from_payload(payload, source=SOURCE)
        assert state == DataState(world_size=1, ranks=(payload,), legacy=True)
        assert state.state_for(0, 1) == payload
        assert state.state_for(0, 2) is None
        assert state.describe_saver() == "1 rank (a legacy data.pt, written by rank 0 alone)"

    def test_a_malformed_payload_names_every_problem(self) -> None:
        """Unknown version, unexpected key, bad world size and rank list: one error, each
        named, naming the file and the fix."""
        with pytest.raises(TrainerStateError) as info:
            DataState.from_payload(
                {"schema": "statecraft.data-state.v9", "world_size": 0, "ranks": {}, "x": 1},
                source=SOURCE,
            )
        assert info.value.problems == [  # type: ignore[attr-defined]
            "schema: expected 'statecraft.data-state.v2' (or 'statecraft.data-state.v1'); got "
            "'statecraft.data-state.v9'; a newer writer made this file, read it with the "
            "statecraft release that wrote it",
            "unexpected key 'x' (not part of statecraft.data-state.v2)",
            "world_size: expected an int >= 1; got 0 (int)",
            "ranks: expected a list of per-rank states; got {} (dict)",
        ]
        message = str(info.value)
        assert message.startswith(f"{SOURCE}: 4 problem(s) in the data state:")
        assert "set data.cursor_resume=off to restart the data source" in message

    def test_a_rank_list_of_another_length_is_refused(self) -> None:
        """world_size 2 with one entry is malformed, not a world of one."""
        with pytest.raises(TrainerStateError) as info:
            DataState.from_payload(
                {"schema": DATA_STATE_V1, "world_size": 2, "ranks": [{}]}, source=SOURCE
            )
        assert info.value.problems == ["ranks: expected 2 entries (one per rank); got 1"]  # type: ignore[attr-defined]

    def test_gather_in_a_world_of_one_copies_the_state(self) -> None:
        """The gathered state is a deep copy: moving the cursor afterwards does not change it."""
        cursor = Cursor()
        cursor.position = 3
        state = gather_data_state(cursor, collective=SingleProcess())
        cursor.position = 5
        assert state == DataState(world_size=1, ranks=({"position": 3},))

    def test_gather_sends_no_unsafe_state(self) -> None:
        """An unsafe state is replaced by None and its lines are kept for the refusal."""
        import numpy as np

        cursor = Cursor()
        cursor.position = np.int64(3)
        state = gather_data_state(cursor, collective=SingleProcess())
        assert state.ranks == (None,)
        assert state.problems == (
            'data["position"]: numpy.int64 -- convert with int(x) (or x.item())',
        )

    def test_gather_reports_a_state_dict_that_cannot_be_captured(self) -> None:
        """A state_dict() that raises (or holds what cannot be copied) becomes a refusal line,
        not an exception on one rank that would leave the others waiting in the collective."""

        class Raising(Cursor):
            def state_dict(self) -> dict[str, Any]:
                raise RuntimeError("the file handle is closed")

        state = gather_data_state(Raising(), collective=SingleProcess())
        assert state.ranks == (None,)
        assert state.problems == (
            "data: Raising.state_dict() could not be captured (RuntimeError: the file handle "
            "is closed) -- return plain values (numbers, strings, lists, dicts, tensors) from "
            "state_dict()",
        )


def _open(out: Path, *overrides: str) -> tuple[sc.Checkpointer, torch.nn.Module, Cursor]:
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    cursor = Cursor()
    ckpt = sc.Checkpointer(
        sc.CheckpointConfig.load(None, [*CONFIG, *overrides]), run=RUN, output_root=out
    )
    ckpt.track(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), data=cursor)
    return ckpt, model, cursor


def _train(ckpt: sc.Checkpointer, cursor: Cursor, steps: int) -> None:
    for _ in range(steps):
        cursor.position += 3
        ckpt.record(sc.Outcome.APPLIED)
        ckpt.step_end()


class TestSingleProcess:
    def test_data_pt_is_the_per_rank_payload_of_one_rank(self, tmp_path: Path) -> None:
        """A single-process save writes the v1 payload with one rank; resume restores it."""
        ckpt, _, cursor = _open(tmp_path)
        ckpt.resume()
        _train(ckpt, cursor, 2)
        ckpt.close()
        assert ckpt.attempt is not None
        payload = torch.load(
            Path(ckpt.attempt.checkpoints_dir) / "iter_000000002" / "data.pt", weights_only=True
        )
        assert payload == {
            "schema": DATA_STATE_SCHEMA,
            "world_size": 1,
            "ranks": [{"position": 6}],
            "source": plain_cursor_source(1),
        }
        again, _, fresh = _open(tmp_path)
        result = again.resume()
        assert (result.data, fresh.position) == ("restored", 6)
        again.close()

    def test_cursor_resume_off_leaves_the_data_source_alone(self, tmp_path: Path) -> None:
        """data.cursor_resume=off neither reads nor restores data.pt."""
        ckpt, _, cursor = _open(tmp_path)
        ckpt.resume()
        _train(ckpt, cursor, 2)
        ckpt.close()
        again, _, fresh = _open(tmp_path, "data.cursor_resume=off")
        result = again.resume()
        assert (result.step, result.data, fresh.position) == (2, "off", 0)
        again.close()

    def test_a_legacy_data_pt_restores_in_a_world_of_one(self, tmp_path: Path) -> None:
        """A data.pt written before per-rank data state (the bare state_dict, as main wrote
        it) is restored at world size 1."""
        ckpt, _, cursor = _open(tmp_path)
        ckpt.resume()
        _train(ckpt, cursor, 2)
        ckpt.close()
        assert ckpt.attempt is not None
        iteration = Path(ckpt.attempt.checkpoints_dir) / "iter_000000002"
        buffer = io.BytesIO()
        torch.save({"position": 5}, buffer)
        data = buffer.getvalue()
        (iteration / "data.pt").write_bytes(data)
        manifest_path = iteration / ".posttrain-manifest.json"
        manifest = json.loads(manifest_path.read_bytes())
        manifest["files"]["data.pt"] = {
            "size": len(data),
            "digest": {"algorithm": "xxh3_128", "value": xxhash.xxh3_128_hexdigest(data)},
        }
        manifest_path.write_text(json.dumps(manifest, sort_keys=True, indent=1) + "\n")
        again, _, fresh = _open(tmp_path)
        result = again.resume()
        assert (result.step, result.data, fresh.position) == (2, "restored", 5)
        again.close()
