"""The ``statecraft bench ...`` subcommands' arguments (each handler imported on use)."""

from __future__ import annotations

from typing import Any

from statecraft.cli.lazy import lazy_command as _lazy

__all__ = ["add_bench_parsers"]


def add_bench_parsers(sub: Any) -> None:
    """Add ``bench`` and its subcommands to the top-level subparsers ``sub``."""
    bench = sub.add_parser(
        "bench",
        help="benchmarks (ratios against in-process baselines); alone: every figure in one table",
    )
    _add_table_options(bench)
    bsub = bench.add_subparsers(dest="bench_command")
    bsave = bsub.add_parser("save", help="save / resume throughput and resume peak RSS")
    bsave.add_argument("--size-mib", type=int, default=1024, help="state size (default 1024)")
    bsave.add_argument("--dir", help="directory to write in (default: a temporary one)")
    bsave.add_argument(
        "--sizes",
        help="sweep these state sizes against the fair baseline (e.g. 1MiB,16MiB,128MiB,1GiB)",
    )
    bsave.add_argument(
        "--resume-sizes",
        help="resume vs torch.load of the same files at these sizes, warm and cold (e.g. "
        "1MiB,16MiB,128MiB)",
    )
    bsave.add_argument(
        "--repeat",
        type=int,
        help="runs per measurement (default 2, best kept; --sizes, --resume-sizes: 5, median)",
    )
    bsave.add_argument("--json", action="store_true")
    bsave.set_defaults(func=_lazy("statecraft.cli.bench", "run_bench_save"))
    bval = bsub.add_parser(
        "validation", help="a durable validation and a model-only artifact vs a full save"
    )
    bval.add_argument("--size-mib", type=int, default=64, help="model size (default 64)")
    bval.add_argument("--repeat", type=int, default=5, help="runs of each (default 5, median)")
    bval.add_argument("--dir", help="directory to write in (default: a temporary one)")
    bval.add_argument("--json", action="store_true")
    bval.set_defaults(func=_lazy("statecraft.cli.bench.validation", "run_bench_validation"))
    binc = bsub.add_parser(
        "incremental",
        help="checkpoint_format=incremental vs consolidated: bytes, save, resume, disk",
    )
    binc.add_argument("--base-mib", type=int, default=256, help="frozen base (default 256)")
    binc.add_argument(
        "--adapter-mib", type=float, default=2.0, help="trainable adapter (default 2)"
    )
    binc.add_argument("--full-mib", type=int, default=64, help="full fine-tune model (default 64)")
    binc.add_argument("--saves", type=int, default=20, help="saves per run (default 20)")
    binc.add_argument("--repeat", type=int, default=3, help="runs of each (default 3, median)")
    binc.add_argument("--dir", help="directory to write in (default: a temporary one)")
    binc.add_argument("--json", action="store_true")
    binc.set_defaults(func=_lazy("statecraft.cli.bench.incremental", "run_bench_incremental"))
    basync = bsub.add_parser(
        "async", help="async save blocking time, time to durable, step slowdown"
    )
    basync.add_argument("--size-mib", type=int, default=64, help="state size (default 64)")
    basync.add_argument(
        "--repeat", "--repeats", type=int, default=5, help="runs of each (default 5, median)"
    )
    basync.add_argument("--dir", help="directory to write in (default: a temporary one)")
    basync.add_argument("--json", action="store_true")
    basync.set_defaults(func=_lazy("statecraft.cli.bench.async_save", "run_bench_async"))
    bemerg = bsub.add_parser(
        "emergency", help="stop decision to durable emergency checkpoint vs a plain save"
    )
    bemerg.add_argument("--size-mib", type=int, default=64, help="state size (default 64)")
    bemerg.add_argument(
        "--repeat", "--repeats", type=int, default=5, help="runs of each (default 5, median)"
    )
    bemerg.add_argument("--dir", help="directory to write in (default: a temporary one)")
    bemerg.add_argument("--json", action="store_true")
    bemerg.set_defaults(func=_lazy("statecraft.cli.bench.emergency", "run_bench_emergency"))
    bupload = bsub.add_parser(
        "upload", help="archive upload and fetch of a checkpoint vs boto3 upload/download_file"
    )
    bupload.add_argument("--size-mb", type=int, default=256, help="checkpoint size (default 256)")
    bupload.add_argument(
        "--repeat", type=int, default=4, help="rounds, order alternating (default 4, median)"
    )
    bupload.add_argument(
        "--credentials", help="credentials JSON of the S3 service (default: start a local one)"
    )
    bupload.add_argument(
        "--endpoint",
        help="S3 endpoint URL (credentials: --credentials or $STATECRAFT_S3_CREDENTIALS)",
    )
    bupload.add_argument(
        "--files",
        type=int,
        default=0,
        help="spread --size-mb over this many files (--files 200 --size-mb 200: 200 x 1 MiB)",
    )
    bupload.add_argument("--bucket", default="ckpt-bucket", help="bucket (default ckpt-bucket)")
    bupload.add_argument("--dir", help="directory to write in (default: a temporary one)")
    bupload.add_argument("--json", action="store_true")
    bupload.set_defaults(func=_lazy("statecraft.cli.bench.upload", "run_bench_upload"))
    bdcp = bsub.add_parser(
        "dcp", help="DCP save / load vs plain dcp.save / dcp.load on gloo ranks; peak RSS"
    )
    bdcp.add_argument("--size-mib", type=int, default=64, help="model size (default 64)")
    bdcp.add_argument("--ranks", type=int, default=2, help="gloo ranks (default 2)")
    bdcp.add_argument("--repeat", type=int, default=3, help="rounds (default 3, median)")
    bdcp.add_argument("--dir", help="directory to write in (default: a temporary one)")
    bdcp.add_argument("--no-s3", action="store_true", help="skip the direct S3 comparison")
    bdcp.add_argument("--json", action="store_true")
    bdcp.set_defaults(func=_lazy("statecraft.cli.bench.dcp", "run_bench_dcp"))
    blight = bsub.add_parser(
        "lightning",
        help="Lightning TorchCheckpointIO vs StatecraftCheckpointIO (sync, async) per save",
    )
    blight.add_argument(
        "--size-mib", type=int, default=16,
        help="model parameters in MiB (the AdamW checkpoint is ~3x; default 16)",
    )  # fmt: skip
    blight.add_argument(
        "--saves", type=int, default=6, help="saves of last.ckpt per plugin (default 6)"
    )
    blight.add_argument(
        "--every", type=int, default=20, help="training steps between saves (default 20)"
    )
    blight.add_argument(
        "--repeat", "--repeats", type=int, default=3,
        help="rounds, rotating order (default 3, median)",
    )  # fmt: skip
    blight.add_argument("--dir", help="directory to write in (default: a temporary one)")
    blight.add_argument("--json", action="store_true")
    blight.set_defaults(func=_lazy("statecraft.cli.bench.lightning", "run_bench_lightning"))
    bhf = bsub.add_parser("hf", help="HF Trainer save with and without StatecraftCallback")
    bhf.add_argument(
        "--size-mib", type=int, default=32, help="model parameters in MiB (default 32)"
    )
    bhf.add_argument(
        "--saves", type=int, default=3, help="saves per run, two steps apart (default 3)"
    )
    bhf.add_argument(
        "--repeat", "--repeats", type=int, default=2,
        help="runs of each variant (default 2, median)",
    )  # fmt: skip
    bhf.add_argument("--dir", help="directory to write in (default: a temporary one)")
    bhf.add_argument("--json", action="store_true")
    bhf.set_defaults(func=_lazy("statecraft.cli.bench.hf", "run_bench_hf"))
    bengine = bsub.add_parser("engine", help="engine overhead per transition")
    bengine.add_argument("--transitions", type=int, default=20000)
    bengine.add_argument("--json", action="store_true")
    bengine.set_defaults(func=_lazy("statecraft.cli.bench", "run_bench_engine"))


def _add_table_options(bench: Any) -> None:
    """``statecraft bench`` alone: the one table of :mod:`statecraft.cli.bench.table`."""
    size = bench.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="quick sizes (the default)")
    size.add_argument("--full", action="store_true", help="each figure at its target's size")
    bench.add_argument(
        "--all", action="store_true", help="the slow figures too (ranks, SeaweedFS, trainers)"
    )
    bench.add_argument("--repeat", type=int, help="interleaved repetitions per figure (>= 5)")
    bench.add_argument("--max-mib", type=int, help="cap every figure's size at this many MiB")
    bench.add_argument("--only", help="figures whose name holds one of these words (a,b,...)")
    bench.add_argument("--dir", help="directory to write in (default: a temporary one)")
    bench.add_argument("--json", action="store_true")
    bench.set_defaults(func=_lazy("statecraft.cli.bench.table", "run_bench_table"))
