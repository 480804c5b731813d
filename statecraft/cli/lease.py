"""``statecraft lease show s3://bucket/prefix`` and ``statecraft lease takeover s3://bucket/prefix``:
the object-store writer lease of a direct checkpoints root (``.statecraft-lease.json``,
:mod:`statecraft.checkpoint.fencing.object_lease`).

- ``show`` prints the lease (owner, host, PID, generation, since, expiry, live / expired /
  released). Read-only.
- ``takeover`` is **deliberate**: run it only after making sure the owner is dead (its job
  ended, its node is gone: check the scheduler, ``ps`` on its host). It takes the lease over
  with ``If-Match`` on the version it read (generation + 1, logged) and releases it at once, so
  the next job acquires the root without waiting for the expiry; the old owner, should it still
  be running, is fenced from then on (its next commit check, renewal and ``latest`` write are
  refused naming the new owner). ``--expect-owner OWNER`` refuses unless that is the owner now
  (so a new job that took the root meanwhile is not taken over by mistake).

Credentials as for ``statecraft objects`` (``--credentials F``, else
``$STATECRAFT_S3_CREDENTIALS``). Exit codes: 0 done, 1 a refusal or an error.
"""

from __future__ import annotations

import argparse
from typing import Any

from statecraft.cli.archive import fail, open_s3_bucket
from statecraft.cli.envelope import emit
from statecraft.errors import StatecraftError, WriterLeaseError

__all__ = ["run_lease_show", "run_lease_takeover"]


def _root(args: argparse.Namespace) -> Any:
    from statecraft.checkpoint.direct.root import DirectRoot, parse_direct_uri

    bucket_name, prefix, iteration = parse_direct_uri(args.root)
    if iteration is not None:
        raise WriterLeaseError(
            f"{args.root}: names one iteration; the lease belongs to the checkpoints root: "
            "pass s3://<bucket>/<...>/checkpoints",
            path=args.root,
        )
    return DirectRoot.of(open_s3_bucket(args, bucket_name), prefix)


def run_lease_show(args: argparse.Namespace) -> int:
    """``statecraft lease show ROOT``."""
    import time

    from statecraft.checkpoint.fencing.object_lease import read_object_lease

    command = "lease show"
    try:
        root = _root(args)
        found = read_object_lease(root.store)
    except StatecraftError as exc:
        return fail(command, args, exc, data={"root": args.root})
    if found is None:
        data: dict[str, Any] = {"root": root.uri, "lease": None}
        return emit(command, as_json=args.json, data=data, text=f"{root.uri}: no lease")
    record, etag = found
    data = {"root": root.uri, "lease": record.report(etag, time.time())}
    text = f"{root.uri}: lease {data['lease']['status']}: {record.describe()}"
    return emit(command, as_json=args.json, data=data, text=text)


def run_lease_takeover(args: argparse.Namespace) -> int:
    """``statecraft lease takeover ROOT [--expect-owner OWNER]``; see the module doc."""
    from statecraft.checkpoint.fencing.object_lease import read_object_lease, take_over_seen_lease

    command = "lease takeover"
    try:
        root = _root(args)
        found = read_object_lease(root.store)
        if found is None:
            data: dict[str, Any] = {"root": root.uri, "previous": None, "taken": False}
            text = f"{root.uri}: no lease to take over; a new job acquires the root at once"
            return emit(command, as_json=args.json, data=data, text=text)
        previous, _ = found
        expected = getattr(args, "expect_owner", None)
        if expected and previous.owner != expected:
            raise WriterLeaseError(
                f"{root.uri}: the lease is held by {previous.describe()}, not by {expected}; "
                "nothing was changed. Check who owns the root now (statecraft lease show) "
                "before taking it over",
                path=root.uri,
                **previous.fields(),
            )
        if previous.released:
            data = {"root": root.uri, "previous": previous.owner, "taken": False}
            text = f"{root.uri}: the lease of {previous.owner} is released already; nothing to do"
            return emit(command, as_json=args.json, data=data, text=text)
        lease = take_over_seen_lease(root.store, found, ttl_s=60.0)
        lease.release()
    except StatecraftError as exc:
        return fail(command, args, exc, data={"root": args.root})
    # the takeover itself is logged once, by take_over_seen_lease; this is the result
    data = {
        "root": root.uri,
        "previous": previous.report("", 0.0) | {"status": "taken over"},
        "taken": True,
        "generation": lease.generation,
    }
    text = (
        f"{root.uri}: took over the lease of {previous.describe()} (now generation "
        f"{lease.generation}, released): the next job acquires the root at once, and the "
        "old owner can no longer commit"
    )
    return emit(command, as_json=args.json, data=data, text=text)
