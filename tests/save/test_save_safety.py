"""Save-time safety: a value ``torch.load(weights_only=True)`` cannot read back is refused when
the save is asked for, naming its key path, its type and the conversion, before anything is
written (on main such a state committed and every later resume failed)."""

from __future__ import annotations

import collections
import enum
import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import statecraft as sc
from statecraft.checkpoint.state.safe_values import require_safe, unsafe_paths
from statecraft.errors import TrainerStateError, UnsafeStateError

CONFIG = ["save_every=2", "save_async=false", "keep_optim_last=0"]
RUN = sc.RunIdentity("p", "g", "safety")


class Color(enum.Enum):
    RED = 1


Point = collections.namedtuple("Point", "x y")


class Custom:
    def __init__(self) -> None:
        self.x = 1


class Tagged(str):
    pass


def _tensor_with(attribute: Any) -> torch.Tensor:
    tensor = torch.ones(2)
    tensor.note = attribute  # type: ignore[attr-defined]
    return tensor


VALUES: dict[str, Any] = {
    "int": 3,
    "float-nan": float("nan"),
    "bool": True,
    "none": None,
    "str": "x",
    "bytes": b"x",
    "bytearray": bytearray(b"x"),
    "complex": 1j,
    "set": {1, 2},
    "frozenset": frozenset({1}),
    "tuple-key": {(1, "a"): 2},
    "ordereddict": collections.OrderedDict(a=1),
    "counter": collections.Counter(a=2),
    "defaultdict": collections.defaultdict(int, a=1),
    "namedtuple": Point(1, 2),
    "enum": Color.RED,
    "str-subclass": Tagged("x"),
    "numpy-float": np.float64(0.5),
    "numpy-int": np.int64(3),
    "numpy-bool": np.bool_(True),
    "numpy-array": np.arange(3),
    "numpy-key": {np.int64(1): 2},
    "tensor": torch.arange(4),
    "bf16": torch.ones(2, dtype=torch.bfloat16),
    "parameter": torch.nn.Parameter(torch.ones(2)),
    "sparse": torch.ones(2).to_sparse(),
    "meta": torch.empty(2, device="meta"),
    "tensor-attr-ok": _tensor_with(1),
    "tensor-attr-numpy": _tensor_with(np.float64(1)),
    "size": torch.Size([2, 3]),
    "device": torch.device("cpu"),
    "dtype": torch.float16,
    "layout": torch.strided,
    "slice": slice(1, 2),
    "range": range(3),
    "function": len,
    "lambda": lambda: 1,
    "class": int,
    "custom": Custom(),
    "nested-bad": {"a": [1, {"b": np.float32(1)}]},
}


def loads_back(value: Any) -> bool:
    """What torch itself says: does ``torch.save`` + ``torch.load(weights_only=True)`` work?"""
    buffer = io.BytesIO()
    try:
        torch.save(value, buffer)
        buffer.seek(0)
        torch.load(buffer, weights_only=True)
    except Exception:
        return False
    return True


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


class TestUnsafePaths:
    @pytest.mark.parametrize("name", sorted(VALUES))
    def test_agrees_with_torch_weights_only_load(self, name: str) -> None:
        """For every kind of value, unsafe_paths flags it exactly when torch cannot load it."""
        value = {"v": VALUES[name]}
        assert (unsafe_paths(value, "state") == []) == loads_back(value), name

    def test_lines_name_path_type_and_conversion(self) -> None:
        """Each line is '<key path>: <type> -- <what to convert it to>'."""
        state = {
            "rng": np.float64(0.5),
            "perm": np.arange(3),
            "deep": {"a": [1, {"b": np.int32(2)}]},
            "kind": Color.RED,
            "p": Point(1, 2),
            "dd": collections.defaultdict(list),
            "obj": Custom(),
        }
        assert unsafe_paths(state, "data") == [
            'data["rng"]: numpy.float64 -- convert with float(x) (or x.item())',
            'data["perm"]: numpy.ndarray -- convert with torch.from_numpy(x) (or x.tolist())',
            'data["deep"]["a"][1]["b"]: numpy.int32 -- convert with int(x) (or x.item())',
            'data["kind"]: test_save_safety.Color -- save x.value or x.name and rebuild the '
            "member on load",
            'data["p"]: test_save_safety.Point -- convert with tuple(x) or x._asdict()',
            'data["dd"]: collections.defaultdict -- convert with dict(x)',
            'data["obj"]: test_save_safety.Custom -- save its state_dict() or a dict of plain '
            "values instead, or register the class with torch.serialization.add_safe_globals"
            "([...]) in every process that loads",
        ]

    def test_an_unsafe_key_is_named_as_a_key(self) -> None:
        """A NumPy dict key is reported as a key, not as the value under it."""
        assert unsafe_paths({np.int64(1): 2}, "s") == [
            "s[<key np.int64(1)>] (a key): numpy.int64 -- convert with int(x) (or x.item())"
        ]

    def test_a_cycle_is_walked_once(self) -> None:
        """A self-referencing container neither hangs nor reports twice."""
        loop: list[Any] = [np.float64(1)]
        loop.append(loop)
        assert unsafe_paths({"l": loop}, "s") == [
            's["l"][0]: numpy.float64 -- convert with float(x) (or x.item())'
        ]

    def test_a_class_registered_with_torch_is_allowed(self) -> None:
        """A class registered with torch.serialization.safe_globals loads back, so it passes
        (and its attributes are still checked)."""
        with torch.serialization.safe_globals([Custom]):
            assert unsafe_paths({"c": Custom()}, "s") == []
            assert loads_back({"c": Custom()})
            bad = Custom()
            bad.x = np.float64(1)  # type: ignore[assignment]
            assert unsafe_paths({"c": bad}, "s") == [
                's["c"].x: numpy.float64 -- convert with float(x) (or x.item())'
            ]

    def test_require_safe_lists_every_section_in_one_error(self) -> None:
        """require_safe raises one UnsafeStateError (a TrainerStateError) with every line."""
        with pytest.raises(UnsafeStateError) as info:
            require_safe(
                {"loop_state": {"best": np.float64(1)}, "stateful": {"ok": {"x": 1}}},
                action="save the checkpoint of step 4",
                found=['data[rank 1]["pos"]: numpy.int64 -- convert with int(x) (or x.item())'],
            )
        error = info.value
        assert isinstance(error, TrainerStateError)
        assert str(error).startswith(
            "cannot save the checkpoint of step 4: 2 value(s) would be saved but "
            "torch.load(weights_only=True) cannot read them back"
        )
        assert "Nothing was written." in str(error)
        assert error.paths == ['data[rank 1]["pos"]', 'loop_state["best"]']  # type: ignore[attr-defined]


class NumpyCursor:
    """A data source whose position is a NumPy scalar (what the user's sampler returned)."""

    def __init__(self) -> None:
        self.position: Any = 0

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = state["position"]


class Objects:
    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Linear(3, 2)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=0.01)
        self.cursor = NumpyCursor()

    def step(self) -> None:
        self.model(torch.randn(2, 3)).sum().backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        self.cursor.position += 1


def _open(out: Path, **track: Any) -> tuple[sc.Checkpointer, Objects]:
    objects = Objects()
    ckpt = sc.Checkpointer(sc.CheckpointConfig.load(None, CONFIG), run=RUN, output_root=out)
    ckpt.track(model=objects.model, optimizer=objects.optimizer, data=objects.cursor, **track)
    return ckpt, objects


def _train(ckpt: sc.Checkpointer, objects: Objects, steps: int) -> None:
    for _ in range(steps):
        objects.step()
        ckpt.record(sc.Outcome.APPLIED)
        ckpt.step_end()


def _checkpoints(ckpt: sc.Checkpointer) -> Path:
    assert ckpt.attempt is not None
    return Path(ckpt.attempt.checkpoints_dir)


class TestSaveRefusesUnloadableState:
    def test_numpy_scalar_in_the_data_state(self, tmp_path: Path) -> None:
        """The trap of the issue: a NumPy scalar in the data state is refused at the save,
        naming data["position"], and nothing committed changes; the run then resumes from
        the last good checkpoint."""
        ckpt, objects = _open(tmp_path)
        ckpt.resume()
        _train(ckpt, objects, 2)  # iteration 2 commits with a plain int position
        before = snapshot(_checkpoints(ckpt))
        objects.cursor.position = np.int64(objects.cursor.position)
        _train(ckpt, objects, 1)  # step 3: not on cadence
        with pytest.raises(UnsafeStateError) as info:
            _train(ckpt, objects, 1)  # step 4: the save refuses
        message = str(info.value)
        assert message.startswith("cannot save the checkpoint of step 4: 1 value(s)")
        assert 'data["position"]: numpy.int64 -- convert with int(x) (or x.item())' in message
        assert "Nothing was written" in message
        assert snapshot(_checkpoints(ckpt)) == before
        assert not (_checkpoints(ckpt) / "iter_000000004").exists()
        ckpt.close()

        again, fresh = _open(tmp_path)
        result = again.resume()
        assert (result.step, result.data) == (2, "restored")
        assert fresh.cursor.position == 2
        again.close()

    def test_loop_state_stateful_and_scheduler_are_checked_together(self, tmp_path: Path) -> None:
        """Unloadable values in the loop state, a stateful object and the scheduler state are
        listed in one refusal, and nothing is written."""

        class Ema:
            def state_dict(self) -> dict[str, Any]:
                return {"decay": np.float32(0.99)}

            def load_state_dict(self, state: dict[str, Any]) -> None:
                pass

        ckpt, objects = _open(tmp_path, stateful={"ema": Ema()})
        ckpt.resume()
        ckpt.loop_state["best_val_loss"] = np.float64(1.5)
        ckpt.loop_state["seen"] = {"ok": [1, 2], "fn": print}
        objects.step()
        ckpt.record(sc.Outcome.APPLIED)
        with pytest.raises(UnsafeStateError) as info:
            ckpt.save()
        assert info.value.problems == [  # type: ignore[attr-defined]
            'loop_state["best_val_loss"]: numpy.float64 -- convert with float(x) (or x.item())',
            'loop_state["seen"]["fn"]: builtin_function_or_method -- a function or class cannot '
            "be saved weights_only; save the data it computes, or a name to look it up by",
            'stateful["ema"]["decay"]: numpy.float32 -- convert with float(x) (or x.item())',
        ]
        assert sorted(p.name for p in _checkpoints(ckpt).iterdir()) == []
        ckpt.close()

    def test_data_and_loop_state_problems_share_one_error(self, tmp_path: Path) -> None:
        """A bad data state and a bad loop state are reported together, data first."""
        ckpt, objects = _open(tmp_path)
        ckpt.resume()
        objects.step()
        ckpt.record(sc.Outcome.APPLIED)
        objects.cursor.position = np.float64(1)
        ckpt.loop_state["lr"] = np.float64(1e-3)
        with pytest.raises(UnsafeStateError) as info:
            ckpt.save()
        assert info.value.paths == ['data["position"]', 'loop_state["lr"]']  # type: ignore[attr-defined]
        ckpt.close()

    def test_a_numpy_learning_rate_in_the_optimizer_is_refused(self, tmp_path: Path) -> None:
        """A param group's NumPy lr (set by a hand-written schedule) is refused in the save's
        stage step, naming optimizer["param_groups"][0]["lr"], before any file is written."""
        ckpt, objects = _open(tmp_path)
        ckpt.resume()
        _train(ckpt, objects, 2)
        before = snapshot(_checkpoints(ckpt))
        objects.optimizer.param_groups[0]["lr"] = np.float64(0.005)
        objects.step()
        objects.step()
        ckpt.record(sc.Outcome.APPLIED)
        ckpt.record(sc.Outcome.APPLIED)
        with pytest.raises(UnsafeStateError) as info:
            ckpt.save()
        assert info.value.paths == ['optimizer["param_groups"][0]["lr"]']  # type: ignore[attr-defined]
        assert snapshot(_checkpoints(ckpt)) == before
        ckpt.close()

    def test_unloadable_module_extra_state_is_refused(self, tmp_path: Path) -> None:
        """A module whose get_extra_state returns a NumPy array is refused, naming the key."""

        class WithExtra(torch.nn.Linear):
            def get_extra_state(self) -> Any:
                return {"table": np.zeros(2)}

            def set_extra_state(self, state: Any) -> None:
                pass

        objects = Objects()
        objects.model = WithExtra(3, 2)
        objects.optimizer = torch.optim.SGD(objects.model.parameters(), lr=0.1)
        ckpt = sc.Checkpointer(
            sc.CheckpointConfig.load(None, CONFIG), run=RUN, output_root=tmp_path
        )
        ckpt.track(model=objects.model, optimizer=objects.optimizer)
        ckpt.resume()
        objects.step()
        ckpt.record(sc.Outcome.APPLIED)
        with pytest.raises(UnsafeStateError) as info:
            ckpt.save()
        assert info.value.paths == ['model["_extra_state"]["table"]']  # type: ignore[attr-defined]
        assert sorted(p.name for p in _checkpoints(ckpt).iterdir()) == []
        ckpt.close()
