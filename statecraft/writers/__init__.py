"""Writers: how component payloads become files (``torch.save``; DCP comes later)."""

from statecraft.writers.base import Writer
from statecraft.writers.consolidated import ConsolidatedWriter

__all__ = ["ConsolidatedWriter", "Writer"]
