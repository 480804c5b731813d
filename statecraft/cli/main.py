"""The ``statecraft`` command.

Subcommands:
    machines check              static checks of every table and its contract (exit 1 on problems)
    machines draw NAME          mermaid diagram of one table on stdout
    machines table              markdown table of the tables (docs/machines.md holds it)
    crashcheck [--machine M]    crash every transaction at every I/O boundary
                                (machines and crashcheck take --machines-dir/--specs-dir)
    demo                        train, SIGKILL, preempt, resume, compare bit-for-bit with a
                                clean run
    inspect PATH [--verify]     attempts and checkpoints under PATH and what resume=auto would pick
                                (PATH may be s3://bucket/prefix: a direct root or an archive,
                                read-only)
    lease show | takeover URI   the object-store writer lease of a direct root (takeover:
                                deliberate, only once the owner is known dead)
    bench [--quick | --full] [--all]
                                every figure in one table (ratio, range, target, met)
    bench save | validation | async | emergency | upload | dcp | lightning | hf | engine
                                ratios against in-process baselines
    archive publish | fetch | prune-verified | list | prune
                                archived checkpoints and artifacts (S3)
    objects download | copy     move object-store prefixes (idempotent, streamed)

``--json`` prints one versioned envelope: ``{"result_version", "command", "status",
"exit_code", "data", "errors": [{"code", "message"}]}``; failures use the same shape.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any

from statecraft.cli.bench_parsers import add_bench_parsers
from statecraft.cli.envelope import emit
from statecraft.cli.lazy import lazy_command as _lazy
from statecraft.errors import StatecraftError

__all__ = ["build_parser", "main"]


def _transaction_dirs(parser: argparse.ArgumentParser, *, specs: bool = True) -> None:
    parser.add_argument(
        "--machines-dir", help="directory of the transaction tables (default: the shipped one)"
    )
    if specs:
        parser.add_argument(
            "--specs-dir", help="directory of the transaction specs (default: the shipped one)"
        )


def _seconds(text: str) -> float:
    """A ``--retry-wait-s`` value: seconds > 0 (argparse reports anything else as bad usage)."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= 604800:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds in (0, 604800]")
    return value


def _transfer_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--credentials",
        help="object-store credentials JSON (default: $STATECRAFT_S3_CREDENTIALS)",
    )
    parser.add_argument(
        "--retry-wait-s",
        type=_seconds,
        default=90.0,
        help="seconds each request retries a failing endpoint before the command fails "
        "(default 90; opening the bucket waits at most 10)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--json", action="store_true")


def _archive_parsers(sub: Any) -> None:
    archive = sub.add_parser(
        "archive", help="publish, fetch, prune-verified, list and prune archived checkpoints"
    )
    asub = archive.add_subparsers(dest="archive_command", required=True)
    publish = asub.add_parser("publish", help="archive an artifact directory to S3")
    publish.add_argument("--artifact-dir", required=True, help=".../checkpoint_artifacts/iter_N")
    publish.add_argument(
        "--upload-prefix",
        required=True,
        help=(
            "s3://<bucket>/<prefix>, or a bare <prefix> with --bucket; the artifact is "
            "written to <prefix>/checkpoint_artifacts/iter_N/, under the prefix exactly as "
            "given (never a sibling of it)"
        ),
    )
    publish.add_argument("--bucket", help="bucket of a bare --upload-prefix")
    _transfer_flags(publish)
    publish.set_defaults(func=_lazy("statecraft.cli.archive", "run_archive_publish"))
    fetch = asub.add_parser("fetch", help="fetch an archived iteration, every payload proven")
    fetch.add_argument(
        "--artifact-uri", required=True, help="s3://<bucket>/<...>/iter_N (artifact or checkpoint)"
    )
    fetch.add_argument("--dst", required=True, help="directory that receives iter_N")
    _transfer_flags(fetch)
    fetch.set_defaults(func=_lazy("statecraft.cli.archive", "run_archive_fetch"))
    prune = asub.add_parser(
        "prune-verified", help="release artifact payloads whose archive is proven"
    )
    prune.add_argument("--paths", required=True, help="comma-separated artifact directories")
    _transfer_flags(prune)
    prune.set_defaults(func=_lazy("statecraft.cli.archive", "run_archive_prune"))
    listing = asub.add_parser(
        "list", help="archived iterations under s3://bucket/prefix: size, complete/partial/corrupt"
    )
    listing.add_argument("prefix", help="s3://<bucket>/<prefix> (an upload or publish prefix)")
    _transfer_flags(listing)
    listing.set_defaults(func=_lazy("statecraft.cli.archive", "run_archive_list"))
    remote = asub.add_parser(
        "prune",
        help="remote retention: keep the newest N published iterations of s3://bucket/prefix "
        "(a dry run unless --apply)",
    )
    remote.add_argument("prefix", help="s3://<bucket>/<prefix> (an archive prefix or direct root)")
    remote.add_argument("--keep-last", type=int, required=True, help="published iterations kept")
    mode = remote.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="say what would go (the default)")
    mode.add_argument("--apply", action="store_true", help="delete (commit record first)")
    _transfer_flags(remote)
    remote.set_defaults(func=_lazy("statecraft.cli.archive_prune", "run_archive_prune_remote"))

    objects = sub.add_parser("objects", help="download or copy object-store prefixes")
    osub = objects.add_subparsers(dest="objects_command", required=True)
    download = osub.add_parser("download", help="download s3://bucket/prefix into DIR")
    download.add_argument("source", help="s3://<bucket>/<prefix>")
    download.add_argument("dir")
    _transfer_flags(download)
    download.set_defaults(func=_lazy("statecraft.cli.objects", "run_objects_download"))
    copy = osub.add_parser("copy", help="copy s3://A/... to s3://B/... by streaming")
    copy.add_argument("source", help="s3://<bucket>/<prefix>")
    copy.add_argument("destination", help="s3://<bucket>/<prefix>")
    _transfer_flags(copy)
    copy.set_defaults(func=_lazy("statecraft.cli.objects", "run_objects_copy"))


def _lease_parsers(sub: Any) -> None:
    lease = sub.add_parser("lease", help="the object-store writer lease of a direct root")
    lsub = lease.add_subparsers(dest="lease_command", required=True)
    show = lsub.add_parser("show", help="who holds the lease of s3://bucket/prefix (read-only)")
    show.add_argument("root", help="s3://<bucket>/<...>/checkpoints")
    _transfer_flags(show)
    show.set_defaults(func=_lazy("statecraft.cli.lease", "run_lease_show"))
    take = lsub.add_parser(
        "takeover",
        help="take over and release the lease of a DEAD writer (only once it is known dead)",
    )
    take.add_argument("root", help="s3://<bucket>/<...>/checkpoints")
    take.add_argument(
        "--expect-owner", help="refuse unless this owner id holds the lease now (lease show)"
    )
    _transfer_flags(take)
    take.set_defaults(func=_lazy("statecraft.cli.lease", "run_lease_takeover"))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="statecraft",
        description="Crash-consistent checkpoints for PyTorch training: check the transaction "
        "tables, crash-test them, inspect checkpoints, run the demo and the benchmarks.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)

    machines = sub.add_parser("machines", help="check or draw the transaction tables")
    msub = machines.add_subparsers(dest="machines_command", required=True)
    check = msub.add_parser("check", help="static checks of every table and its contract")
    _transaction_dirs(check)
    check.add_argument("--json", action="store_true")
    check.set_defaults(func=_lazy("statecraft.cli.machines", "run_machines_check"))
    draw = msub.add_parser("draw", help="mermaid diagram of one table")
    draw.add_argument("name")
    _transaction_dirs(draw, specs=False)
    draw.add_argument("--json", action="store_true")
    draw.set_defaults(func=_lazy("statecraft.cli.machines", "run_machines_draw"))
    table = msub.add_parser("table", help="markdown table of the tables (docs/machines.md)")
    _transaction_dirs(table)
    table.add_argument("--json", action="store_true")
    table.set_defaults(func=_lazy("statecraft.cli.machines", "run_machines_table"))

    crash = sub.add_parser("crashcheck", help="crash every transaction at every I/O boundary")
    crash.add_argument("--machine", help="only this machine (default: every table)")
    _transaction_dirs(crash)
    crash.add_argument(
        "--extra-subsets",
        type=int,
        default=2,
        help="random loss subsets per power-loss point (default 2)",
    )
    crash.add_argument("--seed", type=int, default=0)
    crash.add_argument(
        "--exhaustive",
        action="store_true",
        help="every subset of the unsynced operations at each power-loss point, not a sample",
    )
    crash.add_argument(
        "--broken",
        action="store_true",
        help="explore the broken variants the specs declare; fail unless each is caught",
    )
    crash.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="worker processes exploring scenarios side by side (default: one per CPU)",
    )
    crash.add_argument("--json", action="store_true")
    crash.set_defaults(func=_lazy("statecraft.cli.crashcheck", "run_crashcheck"))

    demo = sub.add_parser(
        "demo", help="train, SIGKILL, preempt, resume, and prove bit-exact resume"
    )
    demo.add_argument("--out", help="output root (default: a new temporary directory)")
    demo.add_argument("--steps", type=int, default=60, help="training steps (default 60)")
    demo.add_argument("--save-every", type=int, default=10, help="checkpoint cadence (default 10)")
    demo.add_argument("--seed", type=int, default=None, help="seed for the kill point")
    demo.add_argument("--kills", type=int, default=2, help="SIGKILLs before completion (default 2)")
    demo.add_argument(
        "--no-preempt",
        action="store_true",
        help="skip the preemption through the sentinel file (SIGKILLs only)",
    )
    demo.add_argument(
        "--store",
        choices=("local", "s3"),
        default="local",
        help="s3: the direct object-store primary against a local SeaweedFS it starts and stops",
    )
    demo.add_argument(
        "--format",
        choices=("consolidated", "dcp"),
        default="consolidated",
        help="checkpoint_format of both runs (dcp: 2 gloo ranks under torch.distributed.run)",
    )
    demo.add_argument("--json", action="store_true")
    demo.set_defaults(func=_lazy("statecraft.cli.demo", "run_demo"))

    inspect = sub.add_parser(
        "inspect",
        help="list attempts and checkpoints under PATH",
        description="What is on disk under PATH, what state each checkpoint is in, and what "
        "a resume would pick. Read-only.",
    )
    inspect.add_argument(
        "path",
        metavar="PATH",
        help="an output root (or a directory of them, as the demo prints), a job dir "
        "<root>/<project>/<group>/<name>, an attempt, a checkpoints/ dir, an iter_* dir, a "
        "Lightning ModelCheckpoint dirpath or *.ckpt, a Hugging Face output_dir or "
        "checkpoint-N, a committed unit, or s3://bucket/prefix[/iter_N]",
    )
    inspect.add_argument("--verify", action="store_true", help="verify every file's digest")
    view = inspect.add_mutually_exclusive_group()
    view.add_argument(
        "--brief",
        dest="files",
        action="store_false",
        help="one line per iteration, files only where something is wrong (the default)",
    )
    view.add_argument(
        "--files", dest="files", action="store_true", help="every file of each iteration"
    )
    inspect.set_defaults(files=False)
    inspect.add_argument(
        "--credentials",
        help="credentials JSON for an s3:// PATH (default: $STATECRAFT_S3_CREDENTIALS)",
    )
    inspect.add_argument("--json", action="store_true")
    inspect.set_defaults(func=_lazy("statecraft.cli.inspect", "run_inspect"))

    _archive_parsers(sub)
    _lease_parsers(sub)

    add_bench_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``statecraft`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args))
    except BrokenPipeError:  # `statecraft ... | head`: the reader left; not an error of ours
        sys.stderr.close()
        return 0
    except StatecraftError as exc:
        command = " ".join(
            a
            for a in (
                args.command,
                getattr(args, "machines_command", None),
                getattr(args, "archive_command", None),
                getattr(args, "objects_command", None),
                getattr(args, "lease_command", None),
                getattr(args, "bench_command", None),
            )
            if a
        )
        return emit(
            command,
            as_json=getattr(args, "json", False),
            exit_code=1,
            errors=[(exc.code, str(exc))],
        )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
