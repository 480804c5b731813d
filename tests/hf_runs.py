"""Tiny Hugging Face ``Trainer`` runs for the HF integration tests, in process or as a child.

Everything is built from a config in code (a 2-layer GPT-2 with hidden size 32) over an
in-memory dataset, on CPU, seeded, with no hub access (``HF_HUB_OFFLINE=1``). One torch thread
(a child sets it; in process use :func:`one_thread`), so an uninterrupted run and a
killed-then-resumed one compute bit-identical tensors.

As a script (``python tests/hf_runs.py --out DIR ...``) it trains and, at the end, writes the
final model and optimizer state dicts to ``--final`` (``torch.save``). ``--hang-at N`` makes
the save of ``checkpoint-N`` stop after the model and optimizer files are written (before the
RNG state, ``trainer_state.json`` and statecraft's seal): it creates ``--marker`` and sleeps, so
the parent can assert the folder is partial and ``SIGKILL`` it there.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).resolve()

VOCAB = 64
SEQ = 8
EXAMPLES = 24  # with batch 4: 6 steps per epoch, so 10 steps cross an epoch boundary


def child_env() -> dict[str, str]:
    """The environment a child run needs: this checkout first on ``PYTHONPATH``, offline hub,
    one thread."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        TRANSFORMERS_VERBOSITY="error",
    )
    return env


def build_model(*, n_embd: int = 32, n_layer: int = 2, vocab: int = VOCAB) -> Any:
    """A GPT-2 language model from a config (no download), seeded."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=vocab,
        n_positions=SEQ,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=2,
        bos_token_id=0,
        eos_token_id=0,
        resid_pdrop=0.1,  # dropout on: the RNG state matters to the resumed trajectory
        embd_pdrop=0.1,
        attn_pdrop=0.1,
    )
    return GPT2LMHeadModel(config)


class TokenDataset:
    """``EXAMPLES`` fixed random token sequences (labels = inputs), a plain map dataset."""

    def __init__(self, n: int = EXAMPLES, vocab: int = VOCAB) -> None:
        import torch

        generator = torch.Generator().manual_seed(1234)
        self.ids = torch.randint(0, vocab, (n, SEQ), generator=generator)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


def training_args(out: str, *, max_steps: int, save_steps: int, **overrides: Any) -> Any:
    from transformers import TrainingArguments

    values: dict[str, Any] = {
        "output_dir": out,
        "max_steps": max_steps,
        "save_strategy": "steps",
        "save_steps": save_steps,
        "per_device_train_batch_size": 4,
        "learning_rate": 1e-3,
        "lr_scheduler_type": "linear",
        "warmup_steps": 2,
        "seed": 0,
        "data_seed": 0,
        "report_to": [],
        "disable_tqdm": True,
        "logging_strategy": "no",
        "use_cpu": True,
        "dataloader_num_workers": 0,
        "save_safetensors": True,
    }
    values.update(overrides)
    try:
        return TrainingArguments(**values)
    except TypeError:  # an older transformers without save_safetensors as an argument
        values.pop("save_safetensors")
        return TrainingArguments(**values)


def make_trainer(
    out: str,
    *,
    max_steps: int,
    save_steps: int,
    callback: bool = True,
    hang_at: int | None = None,
    marker: str | None = None,
    n_embd: int = 32,
    n_layer: int = 2,
    vocab: int = VOCAB,
    examples: int = EXAMPLES,
    eval_examples: int = 0,
    **overrides: Any,
) -> Any:
    """A seeded ``Trainer`` over the tiny model, with :class:`StatecraftCallback` unless
    ``callback=False``; ``hang_at`` as in the module docstring; an evaluation set of
    ``eval_examples`` sequences when positive."""
    from transformers import Trainer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    args = training_args(out, max_steps=max_steps, save_steps=save_steps, **overrides)

    class HangingTrainer(Trainer):  # type: ignore[misc]
        def _save_optimizer_and_scheduler(self, output_dir: str) -> None:
            super()._save_optimizer_and_scheduler(output_dir)
            if hang_at is not None and self.state.global_step == hang_at:
                if marker is None:
                    raise ValueError("hang_at needs a marker path")
                Path(marker).write_text(output_dir)
                time.sleep(600)

    callbacks = []
    if callback:
        from statecraft.integrations.hf import StatecraftCallback

        callbacks.append(StatecraftCallback())
    return HangingTrainer(
        model=build_model(n_embd=n_embd, n_layer=n_layer, vocab=vocab),
        args=args,
        train_dataset=TokenDataset(examples, vocab),
        eval_dataset=TokenDataset(eval_examples, vocab) if eval_examples else None,
        callbacks=callbacks,
    )


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Torch on one thread inside the block (as in a child run), restored after: the
    reference run in the test process computes the same bits as a child."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def final_state(trainer: Any) -> dict[str, Any]:
    """The model and optimizer state dicts (tensors cloned) and the global step."""
    import copy

    return {
        "model": {k: v.detach().clone() for k, v in trainer.model.state_dict().items()},
        "optimizer": copy.deepcopy(trainer.optimizer.state_dict()),
        "scheduler": copy.deepcopy(trainer.lr_scheduler.state_dict()),
        "global_step": trainer.state.global_step,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--max-steps", type=int, required=True)
    parser.add_argument("--save-steps", type=int, required=True)
    parser.add_argument("--save-total-limit", type=int)
    parser.add_argument("--no-callback", action="store_true")
    parser.add_argument("--hang-at", type=int)
    parser.add_argument("--marker")
    parser.add_argument("--resume", default="none", help="none | last-committed | hf-last | a path")
    parser.add_argument("--final")
    parser.add_argument(
        "--wait-for", help="import everything, then wait until this file exists to start"
    )
    ns = parser.parse_args(argv)

    import torch
    import transformers  # noqa: F401  (the slow import, done before waiting)

    torch.set_num_threads(1)

    import statecraft.integrations.hf  # noqa: F401

    if ns.wait_for:
        deadline = time.monotonic() + 120
        while not os.path.exists(ns.wait_for):
            if time.monotonic() > deadline:
                raise SystemExit(f"{ns.wait_for} never appeared")
            time.sleep(0.02)

    trainer = make_trainer(
        ns.out,
        max_steps=ns.max_steps,
        save_steps=ns.save_steps,
        callback=not ns.no_callback,
        hang_at=ns.hang_at,
        marker=ns.marker,
        save_total_limit=ns.save_total_limit,
    )
    resume: str | bool | None
    if ns.resume == "none":
        resume = None
    elif ns.resume == "last-committed":
        from statecraft.integrations.hf import last_committed_checkpoint

        resume = last_committed_checkpoint(ns.out)
        print(f"resume={resume}", flush=True)
    elif ns.resume == "hf-last":
        resume = True
    else:
        resume = ns.resume
    trainer.train(resume_from_checkpoint=resume)
    if ns.final:
        torch.save(final_state(trainer), ns.final)
    return 0


if __name__ == "__main__":
    sys.exit(main())
