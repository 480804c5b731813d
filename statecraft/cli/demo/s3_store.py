"""``statecraft demo --store s3``: the direct object-store primary, SIGKILLed and resumed.

The demo starts a local SeaweedFS (:mod:`statecraft.cli.bench.s3_local`, stopped at the end
whatever happens) and runs the same small training twice as child processes
(``python -m statecraft.cli.demo.s3_store --child ...``), each a ``Checkpointer`` with
``checkpoint_format=dcp`` and ``checkpoint_store.backend=object_store``: DCP shards, control
generations, manifests and ``latest_checkpoint.txt`` go straight to the bucket; only the run
directory stays local.

- ``reference``: one uninterrupted run;
- ``killed``: SIGKILLed ``kills`` times on a ``step <n>`` line drawn with
  ``random.Random(seed)`` (after the first save), relaunched with
  ``checkpoint_store.lease_takeover=true`` (the demo made sure the owner is dead: it killed
  it) until it completes.

Exit 0 when the killed run's final model and optimizer state are bit-identical to the
reference's and every kill left ``latest`` naming a committed iteration.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["run_s3_demo"]

_PREFIX = {"reference": "demo/reference/checkpoints", "killed": "demo/killed/checkpoints"}


def _child(args: argparse.Namespace) -> int:
    """One training process: resume from the bucket, train to ``--steps``, save every
    ``--save-every`` into it, print ``step <n>`` lines, write the final state."""
    import torch

    import statecraft as sc

    config = sc.CheckpointConfig.from_dict(
        {
            "save_every": args.save_every,
            "quiet": True,
            "checkpoint_format": "dcp",
            "checkpoint_store": {
                "backend": "object_store",
                "bucket": args.bucket,
                "credentials": args.credentials,
                "prefix": args.prefix,
                "lease_takeover": args.takeover,
            },
        }
    )
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(32, 4)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ckpt = sc.Checkpointer(config, run=sc.RunIdentity("demo", "s3", "train"), output_root=args.out)
    ckpt.track(model=model, optimizer=optimizer)
    start = ckpt.resume()
    print(f"resumed {start.step}", flush=True)
    for step in range(start.step, args.steps):
        model(torch.randn(8, 16)).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        ckpt.record(sc.Outcome.APPLIED)
        ckpt.step_end()
        print(f"step {step + 1}", flush=True)
    ckpt.finalize()
    ckpt.close()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, args.result)
    print("done", flush=True)
    return 0


def _launch(
    server: Any, out: Path, name: str, *, steps: int, save_every: int, kill_at: int | None,
    takeover: bool,
) -> tuple[bool, list[str]]:  # fmt: skip
    """Run one child; SIGKILL it on ``step <kill_at>``. Returns (completed, its lines)."""
    command = [
        sys.executable, "-m", "statecraft.cli.demo.s3_store", "--child",
        "--out", str(out / name), "--bucket", "ckpt-bucket",
        "--credentials", str(server.credentials_file), "--prefix", _PREFIX[name],
        "--steps", str(steps), "--save-every", str(save_every),
        "--result", str(out / f"{name}.pt"),
    ] + (["--takeover"] if takeover else [])  # fmt: skip
    env = {**os.environ, "TMPDIR": str(out / "tmp")}
    (out / "tmp").mkdir(exist_ok=True)
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    lines: list[str] = []
    assert process.stdout is not None
    for line in process.stdout:
        lines.append(line.strip())
        if kill_at is not None and line.strip() == f"step {kill_at}":
            process.send_signal(signal.SIGKILL)
            process.wait()
            return False, lines
    _, err = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"the {name} run failed ({process.returncode}): {err[-2000:]}")
    return True, lines


def _latest(server: Any, name: str) -> str | None:
    client = server.client()
    try:
        body = client.get_object(Bucket="ckpt-bucket", Key=f"{_PREFIX[name]}/latest_checkpoint.txt")
    except client.exceptions.NoSuchKey:
        return None
    latest = body["Body"].read().decode().strip()
    client.head_object(
        Bucket="ckpt-bucket", Key=f"{_PREFIX[name]}/{latest}/.posttrain-manifest.json"
    )
    return str(latest)


def _same(a: Any, b: Any) -> list[str]:
    import torch

    if isinstance(a, torch.Tensor):
        return [] if isinstance(b, torch.Tensor) and torch.equal(a, b) else ["tensor"]
    if isinstance(a, dict):
        if not isinstance(b, dict) or a.keys() != b.keys():
            return ["keys"]
        return [f"{k}: {d}" for k in a for d in _same(a[k], b[k])]
    if isinstance(a, list | tuple):
        if not isinstance(b, list | tuple) or len(a) != len(b):
            return ["length"]
        return [
            f"[{i}]: {d}" for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _same(x, y)
        ]
    return [] if a == b else [f"{a!r} != {b!r}"]


def run_s3_demo(args: argparse.Namespace) -> int:
    """The ``statecraft demo --store s3`` command: exit 0 when bit-exact, else 1."""
    import torch

    from statecraft.cli.bench.s3_local import S3Server
    from statecraft.cli.envelope import emit

    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    out = Path(args.out or tempfile.mkdtemp(prefix="statecraft-demo-s3-"))
    out.mkdir(parents=True, exist_ok=True)
    steps, save_every, kills = args.steps, args.save_every, args.kills
    errors: list[tuple[str, str]] = []
    report: dict[str, Any] = {"out": str(out), "seed": seed, "kills": []}
    server = S3Server(out / "s3-server")
    server.start()
    try:
        _launch(server, out, "reference", steps=steps, save_every=save_every, kill_at=None,
                takeover=False)  # fmt: skip
        rng = random.Random(seed)
        done, launches = False, 0
        while not done:
            kill_at = None
            if len(report["kills"]) < kills:
                low = min(save_every + 1, steps)
                kill_at = rng.randint(low, steps)
            done, lines = _launch(
                server, out, "killed", steps=steps, save_every=save_every, kill_at=kill_at,
                takeover=launches > 0,
            )  # fmt: skip
            launches += 1
            resumed = next((ln for ln in lines if ln.startswith("resumed")), "resumed ?")
            if not done:
                report["kills"].append({"at_step": kill_at, "latest": _latest(server, "killed"),
                                        "launch": resumed})  # fmt: skip
            if launches > kills + 2:
                errors.append(("demo_failed", "the killed run did not complete"))
                break
        reference = torch.load(out / "reference.pt", weights_only=True)
        killed = torch.load(out / "killed.pt", weights_only=True)
        differences = _same(reference, killed)
        report["launches"] = launches
        report["bit_exact"] = not differences and not errors
        report["differences"] = differences[:10]
    except Exception as exc:  # the server is stopped; the error is the demo's outcome
        errors.append(("demo_failed", f"{type(exc).__name__}: {exc}"))
        report["bit_exact"] = False
    finally:
        server.stop()
    lines = [f"demo --store s3 (SeaweedFS under {out / 's3-server'}, seed {seed})"]
    for kill in report["kills"]:
        lines.append(f"  SIGKILL at step {kill['at_step']}: latest names {kill['latest']}")
    lines.append("bit-exact: " + ("yes" if report["bit_exact"] else "NO"))
    if not report["bit_exact"] and not errors:
        errors.append(("not_bit_exact", f"{len(report.get('differences', []))} difference(s)"))
    return emit(
        "demo",
        as_json=args.json,
        data=report,
        errors=errors,
        exit_code=0 if report["bit_exact"] else 1,
        text="\n".join(lines),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m statecraft.cli.demo.s3_store")
    parser.add_argument("--child", action="store_true", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--bucket", required=True)
    parser.add_argument("--credentials", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--save-every", type=int, required=True)
    parser.add_argument("--result", required=True)
    parser.add_argument("--takeover", action="store_true")
    return _child(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
