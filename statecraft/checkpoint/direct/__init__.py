"""The direct object-store primary (``checkpoint_store.backend=object_store``)."""
