"""``statecraft bench dcp``: statecraft's DCP save and load against plain ``dcp.save`` /
``dcp.load`` of the same state, on the same ranks, in the same run.

``--ranks`` gloo processes on CPU (``torch.multiprocessing.spawn``, a ``file://`` rendezvous
under the scratch directory) each build their FSDP2 shard (``fully_shard``) of one model of
``--size-mib`` MiB (float32) with a stepped AdamW (state about 3x the parameters). Each rank
then, after one warm-up of each side:

- **peak RSS** first: its resident set before, and its peak (``VmHWM``, reset just before)
  after, one statecraft save; the increase is compared with the
  bytes of the shards THIS rank wrote (target: <= 1.2x on every rank: no gather to rank 0);
- ``--repeat`` rounds, each of: statecraft save (``save_dcp_state`` over a ``LocalStore``:
  durable shards, per-item digests, ``.metadata`` by atomic replace, records gathered) and
  plain ``dcp.save`` (``FileSystemWriter``, torch's defaults) of the same state dict into a
  fresh directory, the order alternating; then statecraft load (``load_dcp_state``: ranged
  reads, every item's digest verified) and plain ``dcp.load`` into the same target.

Each timing spans a barrier to a barrier (the slowest rank's time). Reported: the median
seconds of each, the ratios statecraft / plain (target: save <= 1.05x), and per rank its
shard bytes, RSS increase and their ratio. Then the training thread's blocking time of a
synchronous and an asynchronous DCP save through the ``Checkpointer`` against a bare
``copy_`` (:mod:`statecraft.cli.bench.dcp_blocking`, at least 5 interleaved rounds). The S3
part (direct save against plain boto3 uploads of the same shard files) is
:func:`statecraft.cli.bench.dcp_s3.bench_direct_s3` when that module is installed; otherwise
the report says ``skipped: ...``. Nothing here asserts a speed;
``tests/cli/test_bench_dcp.py`` checks the shape.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from statecraft.cli.bench.common import MIB, bench_root, check_positive
from statecraft.cli.bench.dcp_blocking import format_blocking, summarize_blocking
from statecraft.cli.bench.figures import Figure, FigureRun, Measured, paired, size_text

__all__ = [
    "DCP_RSS_TARGET",
    "DCP_SAVE_TARGET",
    "format_dcp",
    "measure_dcp",
    "run_bench_dcp",
]

DCP_SAVE_TARGET = 1.05  # statecraft DCP save seconds / plain dcp.save seconds (issue 13)
BLOCKING_ROUNDS = 5  # at least this many interleaved rounds of the blocking part
DCP_RSS_TARGET = 1.2  # per-rank peak RSS increase of a save / that rank's own shard bytes


def _rss_bytes() -> int:
    """This process's current resident set (``/proc/self/statm``)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _reset_peak_rss() -> None:
    """Reset this process's peak RSS (Linux ``clear_refs`` 5) where allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:  # not Linux, or not allowed: the lifetime peak is reported instead
        pass


def _peak_rss_bytes() -> int:
    """This process's peak resident set since the last reset (``VmHWM``)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _rank(
    rank: int, world_size: int, scratch: str, size_mib: int, repeat: int, rounds: int
) -> None:
    """One rank of the bench: writes ``<scratch>/rank<rank>.json``."""
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from statecraft.checkpoint.state import dcp_state
    from statecraft.cli.bench.dcp_blocking import measure_blocking
    from statecraft.parallel.collectives import default_collective
    from statecraft.storage.local import LocalStore
    from statecraft.writers.dcp import load_dcp_state, save_dcp_state

    os.environ["TMPDIR"] = scratch
    dist.init_process_group(
        "gloo", init_method=f"file://{scratch}/rendezvous", rank=rank, world_size=world_size
    )
    try:
        width = 1024
        layers = max(1, size_mib * MIB // (4 * width * width))
        torch.manual_seed(0)
        model = torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(layers)))
        fully_shard(model, mesh=init_device_mesh("cpu", (world_size,)))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model(torch.randn(2, width)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        state = {
            "model": dcp_state.model_state_for_save(model),
            "optim": dcp_state.optimizer_state_for_save(model, optimizer).state,
        }
        store = LocalStore(scratch)
        collective = default_collective()
        counter = iter(range(10**6))

        def fresh(kind: str) -> str:
            name = f"{kind}-{next(counter)}"
            if rank == 0:
                os.makedirs(f"{scratch}/{name}")
            return name

        def timed(action: Any) -> float:
            dist.barrier()
            began = time.perf_counter()
            action()
            dist.barrier()
            return time.perf_counter() - began

        def ours_save(name: str) -> dict[str, Any]:
            return save_dcp_state(store, name, state, collective=collective)

        def plain_save(name: str) -> None:
            dcp.save(state, storage_writer=dcp.FileSystemWriter(f"{scratch}/{name}"))

        first = fresh("ours")
        dist.barrier()
        _reset_peak_rss()
        rss_before = _rss_bytes()
        records = ours_save(first)
        rss_increase = max(0, _peak_rss_bytes() - rss_before)
        own = sum(
            r.size for path, r in records.items() if os.path.basename(path).startswith(f"__{rank}_")
        )
        plain_dir = fresh("plain")
        dist.barrier()
        plain_save(plain_dir)  # warm-up of the plain side
        optim_target = dcp_state.optimizer_load_target(model, optimizer, pristine=False, groups=())
        target = {"model": dcp_state.model_load_target(model), "optim": optim_target}
        times: dict[str, list[float]] = {
            k: [] for k in ("save", "plain_save", "load", "plain_load")
        }
        saves = {"save": ours_save, "plain_save": plain_save}
        for i in range(repeat):
            written: dict[str, str] = {}
            for kind in ("save", "plain_save") if i % 2 == 0 else ("plain_save", "save"):
                name = written[kind] = fresh(kind)
                dist.barrier()  # rank 0 made the directory
                times[kind].append(timed(lambda k=kind, n=name: saves[k](n)))
            loads = {
                "load": lambda w=written: load_dcp_state(store, w["save"], target),
                "plain_load": lambda w=written: dcp.load(
                    target,
                    storage_reader=dcp.FileSystemReader(f"{scratch}/{w['plain_save']}"),
                ),
            }
            for kind in ("load", "plain_load") if i % 2 == 0 else ("plain_load", "load"):
                times[kind].append(timed(loads[kind]))
            if rank == 0:
                for name in written.values():
                    shutil.rmtree(f"{scratch}/{name}", ignore_errors=True)
        blocking = measure_blocking(model, optimizer, f"{scratch}/blocking", rounds)
        if rank == 0:
            shutil.rmtree(f"{scratch}/blocking", ignore_errors=True)
        report = {
            "rank": rank,
            "blocking": blocking,
            "kept": first,  # one statecraft save, kept for the S3 part
            "shard_bytes": own,
            "rss_increase_bytes": rss_increase,
            "times": times,
        }
        Path(f"{scratch}/rank{rank}.json").write_text(json.dumps(report))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _s3_part(root: str, shard_dir: Path, *, ranks: int, repeat: int) -> dict[str, Any]:
    """The S3 comparison of ``statecraft.cli.bench.dcp_s3.bench_direct_s3`` over the files of
    one statecraft DCP save (``shard_dir``), against a local SeaweedFS
    (``dcp_s3.local_s3_bucket``), or why it was skipped."""
    try:
        module = importlib.import_module("statecraft.cli.bench.dcp_s3")
    except ImportError as exc:
        return {"skipped": f"statecraft.cli.bench.dcp_s3 is not installed ({exc})"}
    bench = getattr(module, "bench_direct_s3", None)
    service = getattr(module, "local_s3_bucket", None)
    if bench is None or service is None:
        return {"skipped": "statecraft.cli.bench.dcp_s3 lacks bench_direct_s3 / local_s3_bucket"}
    files = sorted(p for p in shard_dir.iterdir() if p.is_file())
    try:
        with service(root) as (bucket, how):
            result = bench(files, bucket, repeat=repeat + repeat % 2, workers=ranks)
    except Exception as exc:  # no S3 service here must not lose the local figures
        return {"skipped": f"the S3 part failed: {type(exc).__name__}: {exc}"}
    return {"service": how, **dict(result)}


def measure_dcp(
    *,
    size_mib: int = 64,
    ranks: int = 2,
    repeat: int = 3,
    directory: str | None = None,
    s3: bool = True,
) -> dict[str, Any]:
    """Run the bench (module docstring) and return its report.

    Raises:
        ConfigError: a non-positive ``size_mib``, ``ranks`` or ``repeat`` (named).
    """
    import torch

    check_positive("bench dcp", size_mib=size_mib, ranks=ranks, repeat=repeat)
    with bench_root(directory) as root:
        scratch = tempfile.mkdtemp(prefix="bench-dcp-", dir=root)
        torch.multiprocessing.spawn(
            _rank,
            args=(ranks, scratch, size_mib, repeat, max(BLOCKING_ROUNDS, repeat)),
            nprocs=ranks,
            join=True,
        )
        per_rank = [json.loads(Path(f"{scratch}/rank{r}.json").read_text()) for r in range(ranks)]
        s3_report = (
            _s3_part(root, Path(scratch) / per_rank[0]["kept"], ranks=ranks, repeat=repeat)
            if s3
            else {"skipped": "--no-s3"}
        )
    times = {k: statistics.median(per_rank[0]["times"][k]) for k in per_rank[0]["times"]}
    rss = [
        {
            "rank": r["rank"],
            "shard_bytes": r["shard_bytes"],
            "rss_increase_bytes": r["rss_increase_bytes"],
            "ratio": r["rss_increase_bytes"] / r["shard_bytes"] if r["shard_bytes"] else None,
        }
        for r in per_rank
    ]
    save_ratio = times["save"] / times["plain_save"] if times["plain_save"] > 0 else None
    load_ratio = times["load"] / times["plain_load"] if times["plain_load"] > 0 else None
    worst_rss = max((r["ratio"] for r in rss if r["ratio"] is not None), default=None)
    return {
        "size_mib": size_mib,
        "ranks": ranks,
        "repeat": repeat,
        "seconds": times,
        "samples": per_rank[0]["times"],
        "save_ratio": save_ratio,
        "load_ratio": load_ratio,
        "save_target": DCP_SAVE_TARGET,
        "save_meets_target": save_ratio is not None and save_ratio <= DCP_SAVE_TARGET,
        "rss": rss,
        "rss_target": DCP_RSS_TARGET,
        "rss_meets_target": worst_rss is not None and worst_rss <= DCP_RSS_TARGET,
        "blocking": summarize_blocking(per_rank[0]["blocking"]),
        "s3": s3_report,
    }


def format_dcp(data: dict[str, Any]) -> str:
    """The report as text."""
    s = data["seconds"]
    lines = [
        f"DCP bench: {data['size_mib']} MiB model (+ AdamW state), {data['ranks']} gloo ranks, "
        f"median of {data['repeat']}",
        f"  save  statecraft {s['save']:.3f} s  plain dcp.save {s['plain_save']:.3f} s  "
        f"ratio {data['save_ratio']:.3f}x (target <= {data['save_target']}x)",
        f"  load  statecraft {s['load']:.3f} s  plain dcp.load {s['plain_load']:.3f} s  "
        f"ratio {data['load_ratio']:.3f}x",
    ]
    lines.extend(format_blocking(data["blocking"]))
    for r in data["rss"]:
        ratio = "n/a" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        lines.append(
            f"  rank {r['rank']}: shards {r['shard_bytes'] / MIB:.1f} MiB, peak RSS increase "
            f"{r['rss_increase_bytes'] / MIB:.1f} MiB ({ratio}; target <= {data['rss_target']}x)"
        )
    s3 = data["s3"]
    if "skipped" in s3:
        lines.append(f"  s3: skipped: {s3['skipped']}")
    else:
        sec = s3.get("seconds", {})
        lines.append(
            f"  s3 ({s3.get('service')}): direct save {sec.get('statecraft', 0):.3f} s, boto3 "
            f"upload_file {sec.get('boto3', 0):.3f} s, ratio {s3.get('ratio', 0):.3f}x "
            f"(target >= {s3.get('target')}x)"
        )
    return "\n".join(lines)


def run_bench_dcp(args: argparse.Namespace) -> int:
    """``statecraft bench dcp``: print :func:`measure_dcp` as a table or JSON."""
    from statecraft.cli.envelope import emit

    data = measure_dcp(
        size_mib=args.size_mib,
        ranks=args.ranks,
        repeat=args.repeat,
        directory=args.dir,
        s3=not args.no_s3,
    )
    return emit("bench dcp", as_json=args.json, data=data, text=format_dcp(data))


def _dcp_save(ctx: FigureRun) -> Measured:
    """Per round (the order alternating, on 2 gloo ranks): statecraft / plain save seconds."""
    mib = ctx.size_mib(4, 64)
    data = measure_dcp(size_mib=mib, ranks=2, repeat=ctx.repeat, directory=ctx.root, s3=False)
    samples = data["samples"]
    return Measured(paired(samples["save"], samples["plain_save"]), size_text(mib))


FIGURES = [
    Figure("DCP save, 2 ranks", "plain dcp.save", DCP_SAVE_TARGET, "lower", _dcp_save, slow=True),
]
