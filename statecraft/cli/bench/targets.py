"""The bars the save benchmarks are held to, in one place: the measuring modules (``save``,
``sweep``, ``async_save``) put them in their results and the tables of ``report`` print them.
Each is a ratio; where it comes from is on its line."""

from __future__ import annotations

__all__ = [
    "ASYNC_BLOCKING_TARGET",
    "ASYNC_DURABLE_TARGET",
    "ASYNC_STEP_TARGET",
    "RESUME_LOAD_TARGET",
    "RESUME_RSS_TARGET",
    "SAVE_RAW_TARGET",
    "SMALL_TENSORS_TARGET",
    "SWEEP_BASELINE_TARGET",
    "SWEEP_RAW_TARGET",
]


# bench save
SAVE_RAW_TARGET = 0.95  # statecraft save throughput / raw write + fsync (issue 6)
RESUME_LOAD_TARGET = 0.9  # verified resume / torch.load, warm and cold (issue 6)
RESUME_RSS_TARGET = 1.2  # resume peak RSS increase / state size (DESIGN.md §7)

# bench save --sizes
SWEEP_BASELINE_TARGET = 1.15  # statecraft save seconds / fair baseline seconds, every size
SWEEP_RAW_TARGET = 0.95  # raw write seconds / statecraft save seconds, at 1 GiB
SMALL_TENSORS_TARGET = 1.3  # statecraft save / torch.save of 10,000 tensors of 4 KiB (issue 27)

# bench async
ASYNC_BLOCKING_TARGET = 1.1  # statecraft async blocking / copy_ floor, from the 2nd save on
ASYNC_STEP_TARGET = 0.10  # training-step slowdown while a background write is in flight
ASYNC_DURABLE_TARGET = 1.1  # async time to durable / synchronous save
