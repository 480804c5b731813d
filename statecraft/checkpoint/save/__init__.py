"""The full save: the ``save``, ``dcp_save`` and ``write_job`` machines' bindings
(``bindings``, ``dcp_bindings``, ``write_job_bindings``; the first two bind the commit kernel,
:mod:`statecraft.checkpoint.kernel.commit` and ``commit_rules``), and one full save from the
tracked objects, synchronous or staged for the background (``saving``, ``dcp_saving``,
``async_saving``). The write job runs retention and the archive upload after the save (the
named exceptions of the import contract)."""
