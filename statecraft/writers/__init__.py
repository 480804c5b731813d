"""Writers: how component payloads become files (``torch.save``; DCP directories)."""

from statecraft.writers.base import Writer
from statecraft.writers.consolidated import ConsolidatedWriter
from statecraft.writers.dcp import DcpWriter

__all__ = ["ConsolidatedWriter", "DcpWriter", "Writer"]
