"""Benchmarks behind ``statecraft bench`` (the one table), ``bench save``, ``bench
validation``, ``bench async``, ``bench emergency``, ``bench upload`` and ``bench engine``
(DESIGN.md §7).

Every number is measured in one process against in-process baselines, so the *ratios* are
meaningful on a noisy machine even when the absolute throughputs are not. One module per job:

- :mod:`~statecraft.cli.bench.common`: argument checks, the benchmark model, scratch space,
  page-cache eviction;
- :mod:`~statecraft.cli.bench.baselines`: raw write + fsync, ``torch.save`` + fsync + rename,
  ``torch.load`` (plain and ``mmap=True``);
- :mod:`~statecraft.cli.bench.checkpointer`: a real ``Checkpointer.save`` and a traced,
  verified ``Checkpointer.resume``, and the resume's peak RSS in a fresh subprocess;
- :mod:`~statecraft.cli.bench.save`: ``bench save`` (interleaved runs, ratios, their spread);
- :mod:`~statecraft.cli.bench.sweep`: ``bench save --sizes`` (a model + AdamW state per size
  against the fair baseline: the same files with ``torch.save`` + fsync + rename, one
  directory fsync; medians, ratios, the fixed per-save cost);
- :mod:`~statecraft.cli.bench.resume`: ``bench save --resume-sizes`` (a verified resume of a
  model + AdamW state per size against ``torch.load`` of the same files, warm and cold,
  interleaved pairs, medians and ranges);
- :mod:`~statecraft.cli.bench.validation`: ``bench validation`` (a durable validation and a
  model-only artifact at one step boundary, against a full save of the same step);
- :mod:`~statecraft.cli.bench.incremental`: ``bench incremental``
  (``checkpoint_format=incremental`` against consolidated: bytes per save, save and resume
  time, disk for every retained iteration, a frozen base + adapter and a full fine-tune);
- :mod:`~statecraft.cli.bench.dcp`: ``bench dcp`` (statecraft DCP save / load vs plain
  ``dcp.save`` / ``dcp.load`` on gloo ranks, per-rank peak RSS vs own shard bytes; the S3 part
  from ``cli/bench/dcp_s3.py`` when installed);
- :mod:`~statecraft.cli.bench.async_save`: ``bench async`` (an async save's training-thread
  blocking time against the ``copy_`` floor, ``clone()`` and ``dcp.async_save``; time to
  durable against a synchronous save; the step slowdown while a write is in flight);
- :mod:`~statecraft.cli.bench.emergency`: ``bench emergency`` (the time from a stop decision
  to the durable emergency checkpoint, and the whole ``step_end()``, against one plain
  synchronous save of the same state);
- :mod:`~statecraft.cli.bench.upload`: ``bench upload`` (archive upload and fetch of a real
  checkpoint against boto3 ``upload_file`` / ``download_file`` of the same files, against a
  given S3 service or a local SeaweedFS from :mod:`~statecraft.cli.bench.s3_local`);
- :mod:`~statecraft.cli.bench.engine`: ``bench engine`` (engine overhead per transition);
- :mod:`~statecraft.cli.bench.report`: the human tables;
- :mod:`~statecraft.cli.bench.figures` and :mod:`~statecraft.cli.bench.table`: ``statecraft
  bench`` alone: every figure the modules above declare (their ``FIGURES``), interleaved,
  at least 5 repetitions, in one table (figure, baseline, ratio, range, target, met).

Targets: save >= 0.95x raw write + fsync; verified resume >= 0.9x ``torch.load`` warm and
cold; resume peak RSS increase <= 1.2x the state size; with ``--sizes``, save <= 1.15x the
fair baseline at every size and >= 0.95x raw write at 1 GiB; async blocking <= 1.1x the
``copy_`` floor, step slowdown <= 10 %, time to durable <= 1.1x the synchronous save; the
emergency ``step_end()`` <= one synchronous save + 1 s. Nothing
here asserts a speed; tests only check the shape of the output.
"""

from statecraft.cli.bench.async_save import measure_async, run_bench_async
from statecraft.cli.bench.emergency import (
    EMERGENCY_OVERHEAD_TARGET_S,
    format_emergency,
    measure_emergency,
    run_bench_emergency,
)
from statecraft.cli.bench.engine import measure_engine, run_bench_engine
from statecraft.cli.bench.report import format_async, format_engine, format_save, format_sweep
from statecraft.cli.bench.save import (
    RESUME_LOAD_TARGET,
    RESUME_RSS_TARGET,
    SAVE_RAW_TARGET,
    measure_save,
    run_bench_save,
)
from statecraft.cli.bench.sweep import measure_save_sizes, parse_sizes

__all__ = [
    "EMERGENCY_OVERHEAD_TARGET_S",
    "RESUME_LOAD_TARGET",
    "RESUME_RSS_TARGET",
    "SAVE_RAW_TARGET",
    "format_async",
    "format_emergency",
    "format_engine",
    "format_save",
    "format_sweep",
    "measure_async",
    "measure_emergency",
    "measure_engine",
    "measure_save",
    "measure_save_sizes",
    "parse_sizes",
    "run_bench_async",
    "run_bench_emergency",
    "run_bench_engine",
    "run_bench_save",
]
