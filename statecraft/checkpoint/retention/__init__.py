"""Commit-aware retention: the policies (``policies``: latest-N, every-N, best-N, composite),
the pure decision (``rules``), retention's cheap reading of a checkpoints root (``scan``), the
``retention`` machine's bindings (``bindings``) and one pass over a root (``run``). The marks it
leaves are kernel records, because every reader must understand them."""
