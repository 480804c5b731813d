"""Rank coordination: collectives over torch.distributed or a single process."""
