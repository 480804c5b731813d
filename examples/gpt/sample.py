"""Write text with a model trained by ``train.py``, from its newest committed checkpoint.

    python examples/gpt/sample.py --out runs --max-new-tokens 500

``--out`` may be the output root (with exactly one run under it), a run directory
(``<root>/default/default/<name>``), an attempt, its ``checkpoints/`` directory or one
``iter_*`` checkpoint. Nothing is written and no attempt is created: the checkpoint is only
read and verified. The model is rebuilt from the ``model_args`` its loop state holds.
"""

from __future__ import annotations

import argparse

import torch
from model import GPT, GPTConfig  # the example's own module, beside this file

import statecraft as sc


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output root, run directory or iter_* path")
    p.add_argument("--start", default="\n", help="the text the samples continue")
    p.add_argument("--num-samples", type=int, default=1)
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=20)
    p.add_argument("--seed", type=int, default=1337)
    args = p.parse_args(argv)

    loop_state = sc.read_loop_state(args.out)  # model_args, vocab, config of the training run
    model = GPT(GPTConfig(**loop_state["model_args"]))
    loaded = sc.load_weights(model, args.out)  # newest committed checkpoint that verifies
    model.eval()
    vocab = loop_state["vocab"]
    stoi = {ch: i for i, ch in enumerate(vocab)}
    unknown = sorted(set(args.start) - set(stoi))
    if unknown:
        p.error(f"--start has characters the model never saw: {''.join(unknown)!r}")
    print(f"sampling {loaded.location} (step {loaded.iteration})", flush=True)

    generator = torch.Generator().manual_seed(args.seed)
    context = torch.tensor([[stoi[ch] for ch in args.start]], dtype=torch.long)
    for _ in range(args.num_samples):
        ids = model.generate(
            context,
            args.max_new_tokens,
            temperature=args.temperature,
            top_k=args.top_k,
            generator=generator,
        )
        print("".join(vocab[i] for i in ids[0].tolist()))
        print("---")


if __name__ == "__main__":
    main()
