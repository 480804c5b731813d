"""Resume: the ``resume`` machine's bindings (``bindings``), its selection rules
(``rules``, ``explicit``), the records of its choice (``records``), the data cursor it restores
(``data``), and loading a checkpoint's weights for evaluation or sampling (``eval_load``)."""
