"""The compatibility check (statecraft/checkpoint/kernel/compatibility.py): a checkpoint is compared
with the tracked model and optimizer before anything loads (issue 7, trap 5).

Reproduced on main first: AdamW state resumed into SGD, and a model whose parameters have
another dtype, were both accepted silently (the state loaded into the wrong optimizer, the
weights cast on copy).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import attrs
import pytest
import torch
from checkpoint_runs import CONFIG, RUN, Objects, committed_run

import statecraft as sc
from statecraft.checkpoint.kernel.compatibility import check_fit, optimizer_state_problems
from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.checkpoint.state import optimizer_class_name
from statecraft.errors import ResumeError

FIX = (
    "start a new attempt (resume=off) or use another run name, or warm-start only the weights "
    "with statecraft.load_weights(model, "
)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Committed iterations 2, 4, 6 and 8 (Linear(4, 3), AdamW, StepLR, a data cursor)."""
    return committed_run(tmp_path_factory.mktemp("pristine"), data=True)


def tree_bytes(out: Path) -> dict[str, bytes]:
    """Every file under ``out`` but the writer lease and launch lock (rewritten by design)."""
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and not p.name.startswith((".statecraft-writer.", ".statecraft-launch."))
    }


def newest(out: Path) -> Path:
    (attempt,) = [p for p in RUN.job_dir(out).iterdir() if p.is_dir()]
    return attempt / "checkpoints" / iter_dirname(8)


def rebuilt(model: torch.nn.Module, optimizer: Any = None) -> Objects:
    """Objects of a changed script: ``model`` and ``optimizer`` (AdamW by default)."""
    objects = Objects()
    objects.model = model
    objects.optimizer = optimizer or torch.optim.AdamW(model.parameters(), lr=0.01)
    objects.scheduler = torch.optim.lr_scheduler.StepLR(objects.optimizer, step_size=2)
    return objects


def resume_into(out: Path, objects: Objects, *overrides: str) -> sc.Checkpointer:
    ckpt = sc.Checkpointer(
        sc.CheckpointConfig.load(None, [*CONFIG, *overrides]), run=RUN, output_root=out
    )
    ckpt.track(
        model=objects.model,
        optimizer=objects.optimizer,
        scheduler=objects.scheduler,
        data=objects.cursor,
    )
    return ckpt


def snapshot(objects: Objects) -> tuple[dict[str, torch.Tensor], str]:
    model = {k: v.detach().clone() for k, v in objects.model.state_dict().items()}
    return model, repr(copy.deepcopy(objects.optimizer.state_dict()))


def refused(out: Path, objects: Objects) -> str:
    """Resume ``objects`` under resume=auto; assert it is refused with nothing loaded and
    nothing committed changed; the message."""
    before, state = tree_bytes(out), snapshot(objects)
    ckpt = resume_into(out, objects)
    with pytest.raises(ResumeError) as info:
        ckpt.resume()
    after = snapshot(objects)
    assert after[1] == state[1]
    assert all(torch.equal(after[0][k], state[0][k]) for k in state[0])
    assert objects.cursor.position == 0
    assert tree_bytes(out) == before
    message = str(info.value)
    assert message.startswith(f"local:{newest(out)}: does not fit the tracked objects: ")
    assert "nothing was loaded: every tracked object is unchanged" in message
    assert FIX + f"'{newest(out)}')" in message
    return message


class TestOptimizerClass:
    def test_adamw_state_into_sgd_with_momentum(self, out: Path) -> None:
        """AdamW state resumed into SGD is refused, naming AdamW's state keys."""
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3)
        objects = rebuilt(model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))
        message = refused(out, objects)
        assert (  # trainer.pt v2 records the class: that record decides
            "optim.pt was saved by torch.optim.adamw.AdamW, the live optimizer is "
            "torch.optim.sgd.SGD"
        ) in message
        saved = torch.load(newest(out) / "optim.pt", weights_only=True)
        assert (  # an older checkpoint without the record: told by AdamW's state keys
            "optim.pt holds per-parameter state ['exp_avg', 'exp_avg_sq', 'step'], which "
            "torch.optim.sgd.SGD never writes (the optimizer class changed)"
        ) in optimizer_state_problems(objects.optimizer, saved)

    def test_adamw_state_into_plain_sgd(self, out: Path) -> None:
        """SGD without momentum keeps no state; its groups lack AdamW's 'betas', which tells."""
        model = torch.nn.Linear(4, 3)
        objects = rebuilt(model, torch.optim.SGD(model.parameters(), lr=0.01))
        message = refused(out, objects)
        assert "optim.pt was saved by torch.optim.adamw.AdamW" in message
        state = {"state": {}, "param_groups": [dict(objects.optimizer.param_groups[0])]}
        adamw = torch.optim.AdamW(model.parameters(), lr=0.01)
        state["param_groups"][0] = {**adamw.state_dict()["param_groups"][0]}
        assert optimizer_state_problems(objects.optimizer, state) == [
            "optim.pt parameter groups have 'betas', the live torch.optim.sgd.SGD's do not "
            "(the optimizer class changed)"
        ]

    def test_recorded_class_is_compared(self) -> None:
        """When trainer.pt records the optimizer class, that record decides."""
        model = torch.nn.Linear(4, 3)
        live = torch.optim.AdamW(model.parameters(), lr=0.01)
        saved = torch.optim.Adam(model.parameters(), lr=0.01).state_dict()
        trainer = _Trainer("torch.optim.adam.Adam")
        with pytest.raises(ResumeError) as info:
            check_fit(_Tracked(None, live), trainer, _Parts(None, saved), location="/x/iter_1")
        assert (
            "optim.pt was saved by torch.optim.adam.Adam, the live optimizer is "
            "torch.optim.adamw.AdamW"
        ) in str(info.value)
        assert info.value.problems == [  # type: ignore[attr-defined]
            "optim.pt was saved by torch.optim.adam.Adam, the live optimizer is "
            "torch.optim.adamw.AdamW"
        ]
        same = _Trainer(optimizer_class_name(live))
        check_fit(_Tracked(None, live), same, _Parts(None, saved), location="/x/iter_1")


class TestModel:
    def test_another_shape_lists_the_first_differences(self, out: Path) -> None:
        """A model of another shape is refused naming the keys and shapes."""
        message = refused(out, rebuilt(torch.nn.Linear(4, 5)))
        assert "model.pt 'weight' has shape (3, 4), the live model (5, 4)" in message
        assert "model.pt 'bias' has shape (3,), the live model (5,)" in message
        assert message.index("model.pt 'weight'") < message.index(
            "optim.pt state 'exp_avg' of parameter 0 has shape (3, 4), the live parameter (5, 4)"
        )  # the model's differences come first

    def test_another_dtype(self, out: Path) -> None:
        """A model whose parameters have another dtype is refused (load_state_dict would
        cast silently)."""
        message = refused(out, rebuilt(torch.nn.Linear(4, 3).double()))
        assert "model.pt 'weight' has dtype float32, the live model float64" in message

    def test_at_most_five_differences_are_spelled_out(self) -> None:
        """Many differences: the first five in the message, a count of the rest, all of
        them in the error's ``problems``."""
        live = torch.nn.Sequential(*(torch.nn.Linear(2, 2) for _ in range(4)))
        saved = {k: torch.zeros(1) for k in live.state_dict()}
        with pytest.raises(ResumeError) as info:
            check_fit(_Tracked(live, None), None, _Parts(saved, None), location="/x/iter_1")
        message = str(info.value)
        assert "model.pt '0.bias' has shape (1,), the live model (2,)" in message
        assert "; and 3 more. nothing was loaded" in message
        assert "'2.bias'" in message
        assert "'2.weight'" not in message
        assert len(info.value.problems) == 8  # type: ignore[attr-defined]

    def test_the_same_objects_fit(self, out: Path) -> None:
        """The saving run's own objects fit: the resume loads iter 8."""
        objects = Objects()
        ckpt = resume_into(out, objects)
        assert ckpt.resume().step == 8


def test_optimizer_state_shape_is_checked() -> None:
    """A state tensor whose shape is not its live parameter's is named."""
    saved_model = torch.nn.Linear(4, 3)
    saved = torch.optim.AdamW(saved_model.parameters(), lr=0.01)
    saved_model(torch.randn(2, 4)).sum().backward()
    saved.step()
    live = torch.optim.AdamW(torch.nn.Linear(3, 4).parameters(), lr=0.01)
    problems = optimizer_state_problems(live, saved.state_dict())
    assert problems[0] == (
        "optim.pt state 'exp_avg' of parameter 0 has shape (3, 4), the live parameter (4, 3)"
    )


@attrs.frozen
class _Trainer:
    optimizer_class: str | None


@attrs.frozen
class _Tracked:
    model: Any
    optimizer: Any


@attrs.frozen
class _Parts:
    model: Any
    optimizer: Any
