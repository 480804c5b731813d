"""The effect bindings of each shipped transaction, one module per table in ``machines/``."""
