"""``statecraft demo``: train, SIGKILL, preempt, resume, and prove the result is bit-exact.

Two runs of the same command (``python -m statecraft.cli.demo_train``, see its progress protocol),
each in its own output root under the demo's root:

- ``reference/``: one uninterrupted run to completion;
- ``killed/``: the same command, SIGKILLed ``kills`` times at points drawn with
  ``random.Random(seed)`` -- on a ``step <n>`` line (mid-training) or a random fraction of a
  typical save after a ``save-begin <n>`` line (so the kill lands inside the save) -- then
  preempted once the way a Slurm job is (unless ``--no-preempt``): the demo creates the
  sentinel file ``logs/slurm/SIGUSR1_RECEIVED`` (the launch's ``SLURM_LOG_DIR``) on a
  ``step <n>`` line, and the process stops by itself at its next step boundary: an emergency
  checkpoint, ``DONE.json`` with ``preempted: sentinel``, the sentinel renamed
  ``*.consumed``, exit code 0. It is relaunched unchanged each time until it completes.
  After every kill the latest pointer is checked: the iteration it names must verify; after
  the preemption the emergency checkpoint must verify and the next launch resume from it.

Both runs validate every ``2 * save_every`` steps through the durable validation transaction
(``validation.save_checkpoint=true``: an evaluation-pending checkpoint, the evaluation of a
fixed held-out set, then publication). The first kill is aimed inside a validation, right
after its evaluation returned: the relaunch adopts the pending checkpoint, finishes exactly its
pending stage (the evaluation again only if it had not been recorded) and publishes it. Every
validation checkpoint must end published in both runs.

Then every committed checkpoint of both runs is compared payload by payload
(:func:`compare_checkpoints`): each tensor by dtype, shape and bits, every other value by type
and value (the emergency checkpoint is the one iteration the killed run may hold beyond the
reference's, when it is off the cadence). Exit 0 when the killed run's checkpoints are
bit-identical to the reference's.

Modules: :mod:`.kill` runs the schedule, :mod:`.launch` one process (its progress lines, the
SIGKILL or the sentinel), :mod:`.preempt` the preemption, :mod:`.disk` reads what they left
(through the checkpoint catalog), :mod:`.compare` compares payloads, :mod:`.records` holds
the records, :mod:`.render` the text; this module is the command.
"""

from __future__ import annotations

import argparse
import random
import tempfile
from pathlib import Path

from statecraft.cli.demo.compare import compare_checkpoints
from statecraft.cli.demo.disk import checkpoints_dir, committed_iterations
from statecraft.cli.demo.kill import _choose_trigger, run_kill_demo
from statecraft.cli.demo.records import SAVE_KILL_DELAY_S, DemoError, DemoReport, Launch
from statecraft.cli.demo.render import render
from statecraft.cli.envelope import emit

__all__ = [
    "SAVE_KILL_DELAY_S",
    "DemoError",
    "DemoReport",
    "Launch",
    "_choose_trigger",
    "checkpoints_dir",
    "committed_iterations",
    "compare_checkpoints",
    "render",
    "run_demo",
    "run_kill_demo",
]


def run_demo(args: argparse.Namespace) -> int:
    """The ``statecraft demo`` command: exit 0 when the resumed run is bit-exact, else 1."""
    bad = [
        f"--{name.replace('_', '-')} must be >= {low}, got {getattr(args, name)}"
        for name, low in (("steps", 1), ("save_every", 1), ("kills", 0))
        if getattr(args, name) < low
    ]
    if (
        args.out
        and Path(args.out).exists()
        and (not Path(args.out).is_dir() or any(Path(args.out).iterdir()))
    ):
        bad.append(
            f"--out {args.out} is not an empty directory; pass a new or empty one, or "
            "omit --out for a temporary directory"
        )
    if bad:
        return emit(
            "demo",
            as_json=args.json,
            exit_code=2,
            errors=[("invalid_argument", line) for line in bad],
        )
    if getattr(args, "store", "local") == "s3":  # the direct object-store primary (s3_store.py)
        from statecraft.cli.demo.s3_store import run_s3_demo

        return run_s3_demo(args)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    out = args.out or tempfile.mkdtemp(prefix="statecraft-demo-")
    dcp = getattr(args, "format", "consolidated") == "dcp"
    # validation checkpoints are written consolidated (the validation transaction has no DCP
    # form yet): a DCP demo validates only when asked to
    validate_every = getattr(args, "validate_every", None) or (0 if dcp else 2 * args.save_every)
    report = run_kill_demo(
        out,
        steps=args.steps,
        save_every=args.save_every,
        kills=args.kills,
        seed=seed,
        validate_every=validate_every,
        preempt=not getattr(args, "no_preempt", False),
        checkpoint_format=getattr(args, "format", "consolidated"),
    )
    errors = [("demo_failed", e) for e in report.errors]
    if not report.errors and not report.bit_exact:
        errors.append(
            (
                "not_bit_exact",
                f"{len(report.differences)} difference(s) between the "
                "killed run and the uninterrupted reference",
            )
        )
    return emit(
        "demo",
        as_json=args.json,
        data=report.to_dict(),
        errors=errors,
        exit_code=0 if report.bit_exact else 1,
        text=render(report),
    )
