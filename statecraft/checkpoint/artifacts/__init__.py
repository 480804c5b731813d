"""Partial (non-resumable) artifacts: the ``artifact`` machine's bindings (``bindings``) and one
artifact save from the tracked objects (``saving``). The artifact manifest, verification and
catalog are kernel code, because resume and ``load_weights`` read them."""
