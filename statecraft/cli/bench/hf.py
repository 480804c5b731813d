"""``statecraft bench hf``: what :class:`~statecraft.integrations.hf.StatecraftCallback` adds to
the Hugging Face ``Trainer``'s own checkpointing, the same run with and without it, in one
process.

The run: a GPT-2 built from a config (no download; hidden 256, vocabulary 4096, as many layers
as make about ``--size-mib`` MiB of float32 parameters; see :func:`model_shape`), AdamW, CPU,
``--saves`` saves two steps apart, ``save_total_limit=2`` (the Trainer's rotation in the plain
run, statecraft's pruning with the callback). Each repeat runs both variants in a rotating
order, each in a fresh output directory:

- **plain**: the ``Trainer`` alone; per save, the seconds of ``Trainer._save_checkpoint``
  (model, optimizer, scheduler, RNG state, ``trainer_state.json``, rotation; no fsync);
- **statecraft**: the same with the callback; per save, the same ``_save_checkpoint`` seconds
  and the seconds of the callback's ``on_save`` (fsync every file and directory, digest every
  byte, the commit manifest, the parent fsync, pruning).

Reported: the median per-save seconds of each, the ratio ``seal / plain _save_checkpoint``
(the overhead of a commit over the Trainer's own save), ``(save + seal) / plain save``, and
the whole ``train()`` wall time of both variants. Nothing asserts a speed;
``tests/integrations/test_hf_bench.py`` checks the shape.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from statecraft.cli.bench.common import MIB, bench_root, check_positive, scratch
from statecraft.cli.bench.figures import Figure, FigureRun, Measured, paired, size_text

__all__ = ["format_hf", "measure_hf", "model_shape", "run_bench_hf"]

_SEQ = 32
_STEPS_PER_SAVE = 2


def model_shape(size_mib: int) -> tuple[int, int, int]:
    """``(hidden, vocabulary, layers)`` of a GPT-2 with about ``size_mib`` MiB of float32
    parameters: hidden 256 and vocabulary 4096 from 8 MiB up, 64 and 1024 below."""
    n_embd = 256 if size_mib >= 8 else 64
    vocab = 16 * n_embd
    embedding = (vocab + _SEQ) * n_embd
    per_layer = 12 * n_embd * n_embd + 13 * n_embd
    return n_embd, vocab, max(1, round((size_mib * MIB / 4 - embedding) / per_layer))


def _one_run(root: str, *, size_mib: int, saves: int, statecraft: bool) -> dict[str, Any]:
    import torch
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        PrinterCallback,
        Trainer,
        TrainingArguments,
    )

    from statecraft.integrations.hf import StatecraftCallback

    n_embd, vocab, layers = model_shape(size_mib)
    save_seconds: list[float] = []
    seal_seconds: list[float] = []

    class TimedTrainer(Trainer):
        def _save_checkpoint(self, model: Any, trial: Any) -> None:
            start = time.perf_counter()
            super()._save_checkpoint(model, trial)
            save_seconds.append(time.perf_counter() - start)

    class TimedCallback(StatecraftCallback):
        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            start = time.perf_counter()
            super().on_save(args, state, control, **kwargs)
            seal_seconds.append(time.perf_counter() - start)

    class Tokens(torch.utils.data.Dataset):
        def __init__(self) -> None:
            generator = torch.Generator().manual_seed(0)
            self.ids = torch.randint(0, vocab, (16, _SEQ), generator=generator)

        def __len__(self) -> int:
            return len(self.ids)

        def __getitem__(self, i: int) -> dict[str, Any]:
            return {"input_ids": self.ids[i], "labels": self.ids[i]}

    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=vocab,
        n_positions=_SEQ,
        n_embd=n_embd,
        n_layer=layers,
        n_head=4,
        bos_token_id=0,
        eos_token_id=0,
    )
    model = GPT2LMHeadModel(config)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    out = os.path.join(root, "out")
    args = TrainingArguments(
        output_dir=out,
        max_steps=saves * _STEPS_PER_SAVE,
        save_strategy="steps",
        save_steps=_STEPS_PER_SAVE,
        save_total_limit=2,
        per_device_train_batch_size=2,
        report_to=[],
        disable_tqdm=True,
        logging_strategy="no",
        use_cpu=True,
        seed=0,
    )
    callbacks: list[Any] = [TimedCallback()] if statecraft else []
    trainer = TimedTrainer(model=model, args=args, train_dataset=Tokens(), callbacks=callbacks)
    trainer.remove_callback(PrinterCallback)  # its end-of-train dict would break --json
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    checkpoint_bytes = 0
    newest = os.path.join(out, f"checkpoint-{saves * _STEPS_PER_SAVE}")
    for dirpath, _, files in os.walk(newest):
        checkpoint_bytes += sum(os.path.getsize(os.path.join(dirpath, f)) for f in files)
    return {
        "save_s": save_seconds,
        "seal_s": seal_seconds,
        "train_s": wall,
        "param_bytes": params,
        "checkpoint_bytes": checkpoint_bytes,
    }


def _require_extra() -> None:
    """Import the integration first: without transformers it raises the ImportError that
    names ``statecraft[hf]``."""
    import statecraft.integrations.hf  # noqa: F401


def _median(samples: list[float]) -> float:
    return statistics.median(samples) if samples else float("nan")


def measure_hf(
    *, size_mib: int = 32, saves: int = 3, repeat: int = 2, directory: str | None = None
) -> dict[str, Any]:
    """Run both variants ``repeat`` times (rotating which goes first) and return the figures
    described in the module docstring as a JSON-ready dict.

    Raises:
        ConfigError: a non-positive ``size_mib``, ``saves`` or ``repeat``.
    """
    check_positive("statecraft bench hf", size_mib=size_mib, saves=saves, repeat=repeat)
    import logging

    import torch

    _require_extra()
    import transformers
    from transformers.utils import logging as hf_logging

    layers = model_shape(size_mib)[2]
    samples: dict[str, dict[str, list[float]]] = {
        "plain": {"save_s": [], "train_s": []},
        "statecraft": {"save_s": [], "seal_s": [], "train_s": []},
    }
    sizes: dict[str, int] = {}
    hf_logger = logging.getLogger("statecraft.hf")
    previous_level = hf_logger.level
    hf_logger.setLevel(logging.WARNING)  # no "committed ..." line per save in the figures
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # "Writing model shards" on stderr at every save
    try:
        with bench_root(directory) as root:
            for index in range(repeat):
                order = ["plain", "statecraft"] if index % 2 == 0 else ["statecraft", "plain"]
                for variant in order:
                    with scratch(root, variant) as where:
                        run = _one_run(
                            where,
                            size_mib=size_mib,
                            saves=saves,
                            statecraft=variant == "statecraft",
                        )
                    row = samples[variant]
                    row["save_s"] += run["save_s"]
                    row["train_s"].append(run["train_s"])
                    if variant == "statecraft":
                        row["seal_s"] += run["seal_s"]
                    sizes = {
                        "param_bytes": run["param_bytes"],
                        "checkpoint_bytes": run["checkpoint_bytes"],
                    }
    finally:
        hf_logger.setLevel(previous_level)
        if bars:
            hf_logging.enable_progress_bar()
    plain_save = _median(samples["plain"]["save_s"])
    ours_save = _median(samples["statecraft"]["save_s"])
    seal = _median(samples["statecraft"]["seal_s"])
    plain_train = _median(samples["plain"]["train_s"])
    ours_train = _median(samples["statecraft"]["train_s"])
    return {
        "size_mib": size_mib,
        "layers": layers,
        "saves": saves,
        "repeat": repeat,
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "transformers": transformers.__version__,
        **sizes,
        "median_s": {
            "plain_save": plain_save,
            "statecraft_save": ours_save,
            "seal": seal,
            "plain_train": plain_train,
            "statecraft_train": ours_train,
        },
        "ratios": {
            "seal_over_plain_save": seal / plain_save,
            "save_and_seal_over_plain_save": (ours_save + seal) / plain_save,
            "train_over_plain_train": ours_train / plain_train,
        },
        "samples_s": samples,
    }


def format_hf(data: dict[str, Any]) -> str:
    """The human table of :func:`measure_hf`'s result."""
    m, r = data["median_s"], data["ratios"]
    lines = [
        f"HF Trainer checkpoints: GPT-2 of {data['param_bytes'] / MIB:.1f} MiB parameters "
        f"({data['layers']} layers), checkpoint {data['checkpoint_bytes'] / MIB:.1f} MiB, "
        f"{data['saves']} saves x {data['repeat']} runs, median per save "
        f"({data['cpus']} CPUs, {data['torch_threads']} torch threads, "
        f"transformers {data['transformers']})",
        "",
        f"{'':<46}{'seconds':>10}",
        f"{'Trainer._save_checkpoint, plain':<46}{m['plain_save']:>10.4f}",
        f"{'Trainer._save_checkpoint, with the callback':<46}{m['statecraft_save']:>10.4f}",
        f"{'statecraft seal (on_save)':<46}{m['seal']:>10.4f}",
        f"{'train(), plain':<46}{m['plain_train']:>10.3f}",
        f"{'train(), with the callback':<46}{m['statecraft_train']:>10.3f}",
        "",
        f"seal / plain save:             {r['seal_over_plain_save']:.2f}",
        f"(save + seal) / plain save:    {r['save_and_seal_over_plain_save']:.2f}",
        f"train with / without callback: {r['train_over_plain_train']:.2f}",
    ]
    return "\n".join(lines)


def run_bench_hf(args: argparse.Namespace) -> int:
    """``statecraft bench hf``: print :func:`measure_hf` as a table or JSON."""
    from statecraft.cli.envelope import emit

    data = measure_hf(
        size_mib=args.size_mib, saves=args.saves, repeat=args.repeat, directory=args.dir
    )
    return emit("bench hf", as_json=args.json, data=data, text=format_hf(data))


def _save_and_seal(ctx: FigureRun) -> Measured:
    """Per round (variants alternating): the median save + median seal with the callback /
    the median plain ``_save_checkpoint``."""
    mib = ctx.size_mib(2, 32)
    data = measure_hf(size_mib=mib, saves=2, repeat=ctx.repeat, directory=ctx.root)
    s, n = data["samples_s"], ctx.repeat

    def rounds(values: list[float]) -> list[float]:
        per = len(values) // n
        return [statistics.median(values[i * per : (i + 1) * per]) for i in range(n)]

    ours = [a + b for a, b in zip(rounds(s["statecraft"]["save_s"]),
                                  rounds(s["statecraft"]["seal_s"]), strict=True)]  # fmt: skip
    return Measured(paired(ours, rounds(s["plain"]["save_s"])), size_text(mib))


FIGURES = [  # no bar is declared for it: reported, not judged
    Figure("HF save + seal", "Trainer._save_checkpoint (not durable)", None, "lower",
           _save_and_seal, slow=True),
]  # fmt: skip
