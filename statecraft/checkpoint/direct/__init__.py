"""The direct object-store primary (``checkpoint_store.backend=object_store``): DCP shards,
control generations, the manifest and ``latest`` written straight to a bucket, fenced by the
object-store lease (:mod:`statecraft.checkpoint.fencing.object_lease`).

- :mod:`~statecraft.checkpoint.direct.root`: the root (``s3://bucket/prefix``) and its opener.
- :mod:`~statecraft.checkpoint.direct.manifest`: the commit record
  (``statecraft.direct-manifest.v1``) and the layout helpers.
- :mod:`~statecraft.checkpoint.direct.saving` / :mod:`~statecraft.checkpoint.direct.bindings`
  (with ``save_context``, ``latest``, ``found_manifest``): the direct save, the ``direct_save``
  machine's context and effects.
- :mod:`~statecraft.checkpoint.direct.resume`: the direct resume, the ``resume`` machine run
  over the root as a store plus a plan (``resume_source``; ``reading`` verifies an iteration
  and reads its shards in place; ``explicit_root``, ``root_lease``: the facade's pieces).

Submodules are imported by name (this package imports none of them, so importing one does not
pull in boto3 or torch).
"""
