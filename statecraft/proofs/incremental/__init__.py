"""Crash proofs of ``checkpoint_format=incremental``: the ``incremental_gc`` machine alone, and
a write job that saves with the incremental writer and then collects (scenarios, the checks
of ``specs/incremental_gc.toml`` and its deliberately broken variants)."""
