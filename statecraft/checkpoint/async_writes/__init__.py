"""Background writes: one in-flight write per trainer role (``write_slot``), the reused CPU
staging buffers of an async save (``staging``), the record of a staged copy (``snapshot``),
the proof that a snapshot shares nothing with live state (``isolation``), and the per-role
slots and their collective join (``role_slots``). Builds on the kernel."""
