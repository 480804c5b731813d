"""The checkpoint domain: config, layout, manifests, trainer state, the machines' bindings,
resume selection and the ``Checkpointer`` facade."""
