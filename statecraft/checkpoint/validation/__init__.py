"""Durable model validation: the ``validation`` machine's bindings (evaluation-pending ->
publication-pending -> published, ``bindings``) and one validation from the loop (``saving``).
The stage records are kernel records (``kernel.validation_records``)."""
