"""The direct object-store primary (``checkpoint_store.backend=object_store``): DCP shards,
control generations, the manifest and ``latest`` written straight to a bucket, fenced by the
object-store lease (:mod:`statecraft.checkpoint.fencing.object_lease`).

- :mod:`~statecraft.checkpoint.direct.root`: the root (``s3://bucket/prefix``) and its opener.
- :mod:`~statecraft.checkpoint.direct.manifest`: the commit record
  (``statecraft.direct-manifest.v1``) and the layout helpers.
- ``saving`` / ``resume``: the direct save and resume transactions.

Submodules are imported by name (this package imports none of them, so importing one does not
pull in boto3 or torch).
"""
