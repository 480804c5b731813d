"""The stop: the termination watch (``termination``, with flag-only ``termination_signals``),
the records of a stopped run (``records``), what an emergency save writes (``emergency_plan``),
the ``emergency`` machine's bindings (``bindings``) and ``DONE.json`` (``run_done``)."""
