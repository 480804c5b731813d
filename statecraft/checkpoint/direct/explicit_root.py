"""Opening the root of an explicit ``resume=s3://bucket/prefix/iter_N`` (a copied tree included):
the configured root's bucket client when the bucket is the same, else that bucket opened with
the configured credentials (:func:`~statecraft.checkpoint.direct.root.open_direct_root`)."""

from __future__ import annotations

from typing import Any

from statecraft.errors import ResumeError
from statecraft.storage.base import Store

__all__ = ["open_explicit_root"]


def open_explicit_root(root: Any, uri: str, *, config: Any, attempt: Any) -> tuple[Store, str, int]:
    """The store, root URI and iteration of an explicit ``resume=s3://bucket/prefix/iter_N``
    (a copied tree included): the configured root's bucket client when the bucket is the
    same, else that bucket opened with the configured credentials.

    Raises:
        ConfigError: not an ``s3://.../iter_<9 digits>`` URI (from ``parse_direct_uri``).
        ResumeError: the URI names no iteration.
        ObjectRequestError: the other bucket cannot be used with these credentials.
    """
    import attrs

    from statecraft.checkpoint.direct.root import open_direct_root, parse_direct_uri
    from statecraft.storage.objects import ObjectStore

    bucket, prefix, iteration = parse_direct_uri(uri)
    if iteration is None:
        raise ResumeError(
            f"resume={uri!r} names no iteration; give s3://<bucket>/<prefix>/iter_<9 digits> "
            "(or resume=auto to take the latest of the configured root)",
            path=uri,
        )
    if bucket == getattr(root.store, "name", None):
        return (
            ObjectStore(root.store.client, prefix=prefix, name=bucket),
            f"s3://{bucket}/{prefix}",
            iteration,
        )
    other = open_direct_root(attrs.evolve(config, bucket=bucket, prefix=prefix), attempt)
    return other.store, other.uri, iteration
