"""One writer at a time: the writer lease of a local attempt (``lease``, ``lease_record``), the
fenced store every publication of a save passes through (``fenced_store``), and the lease of a
direct object-store root (``object_lease``, ``object_lease_record``). Builds on the kernel."""
