"""``statecraft inspect PATH``: what is on disk, what state each checkpoint is in, and what
``resume=auto`` would pick. Read-only: it never writes, renames or deletes anything.

PATH may be an output root (it lists the runs ``<project>/<group>/<name>`` under it, each with
its attempts, the newest committed iteration and the latest pointer of the attempt
``resume=auto`` adopts), a job dir (``<root>/<project>/<group>/<name>``), one attempt dir
(``.../<RUN_TS>``), a ``checkpoints/`` dir, or one ``iter_*`` dir. For every checkpoints dir it
reports each ``iter_*`` as

- ``committed``: the manifest is valid and the checkpoint verifies (files present with their
  recorded sizes, ``trainer.pt`` well-formed; with ``--verify`` also every content digest);
- ``partial``: no manifest — an interrupted save, never adopted;
- ``corrupt``: anything else that fails verification (malformed manifest, missing or resized
  file, a file that does not deserialize with ``torch.load(weights_only=True)`` the way resume
  loads it, malformed ``trainer.pt``; with ``--verify`` also a digest mismatch);
- ``evaluation_pending`` / ``publication_pending`` / ``published``: committed by a durable
  validation, at that stage (with the evaluated metrics, and notes on ignored records);
- ``weights-only`` (``weights_only`` in ``--json``): retention removed its optimizer state
  (the policy is named); it loads with ``statecraft.load_weights``, never as a resume source;
- ``invalidated``: retention is deleting it (whatever is left); never adopted,

with its files and sizes, the policies that keep it in the last retention pass ("kept by",
from ``.retention-decision.json``; blank without one), what ``latest_checkpoint.txt`` names
(or that it is missing, garbage or dangling), and which iteration ``resume=auto`` would adopt,
listing every newer one it passes over with the reason. Each attempt's partial artifacts
(``checkpoint_artifacts/iter_*``) are listed too (kind ``artifact``, components,
``committed`` / ``partial`` / ``corrupt``), and "resume=auto would: adopt iter_N (stage) /
start fresh / refuse: <reason>" is decided by the resume machine's own artifact rules
(:func:`~statecraft.checkpoint.resume.rules.auto_outcome`). PATH may also be a
``checkpoint_artifacts/`` dir or one artifact (then it says why ``resume=PATH`` is refused).

Classification is exactly resume's: both read the checkpoint catalog
(:func:`~statecraft.checkpoint.kernel.catalog.scan`, level ``"digest"`` with ``--verify``,
``"size"``
without) and the layout's RUN_TS rule, so a checkpoint shown ``committed`` is one resume (at
that verification level) would accept.

Modules: :mod:`.report` builds the data (:mod:`.artifacts` the artifact part, :mod:`.disk`
the file listings), :mod:`.render` the text, :mod:`.readonly` the filesystem it reads through;
this module is the command.

PATH may also be ``s3://bucket/prefix`` (a direct object-store checkpoints root) or
``s3://bucket/prefix/iter_N`` (:mod:`.remote`: each iteration's manifest, DCP components,
``latest``, the object-store lease), or an archive the upload or ``archive publish`` wrote
(:mod:`.remote_archive`: each iteration complete / partial / corrupt), read-only, with the
credentials of ``statecraft objects``
(``--credentials FILE``, else ``$STATECRAFT_S3_CREDENTIALS``). DCP iterations (local or remote)
list per component the shard count, sizes and world size at save (:mod:`.dcp`).

Exit status: 0 when PATH holds a checkpoints layout (whatever state the checkpoints are in);
1 when PATH does not exist or holds no checkpoints layout, or is an archive with a corrupt
iteration. ``--json`` prints the same data in
the CLI's versioned envelope (see :func:`statecraft.cli.envelope.emit`).
"""

from __future__ import annotations

import argparse

from statecraft.cli.envelope import emit
from statecraft.cli.inspect.readonly import ReadOnlyFilesystem
from statecraft.cli.inspect.render import render_text
from statecraft.cli.inspect.report import COMMAND, InspectError, inspect_path

__all__ = ["InspectError", "ReadOnlyFilesystem", "inspect_path", "render_text", "run_inspect"]

_ReadOnlyFilesystem = ReadOnlyFilesystem  # the name earlier tests and callers import


def _run_remote(args: argparse.Namespace, as_json: bool) -> int:
    from statecraft.checkpoint.archive.destination import parse_s3_uri
    from statecraft.cli.archive import fail, open_s3_bucket
    from statecraft.cli.inspect.remote import inspect_remote, render_remote_text
    from statecraft.errors import StatecraftError

    try:
        name, _ = parse_s3_uri(args.path, what="PATH")
        bucket = open_s3_bucket(args, name)
        data = inspect_remote(args.path, bucket)
    except StatecraftError as exc:
        return fail(COMMAND, args, exc, data={"path": str(args.path)})
    corrupt = [it for it in data["iterations"] if it["state"] == "corrupt"]
    if data["kind"] != "remote_archive" or not corrupt:
        return emit(COMMAND, as_json=as_json, data=data, text=render_remote_text(data))
    errors = [("archive_corrupt", f"{it['uri']}: {it['reason']}") for it in corrupt]
    text = render_remote_text(data)
    return emit(COMMAND, as_json=as_json, data=data, errors=errors, exit_code=1, text=text)


def run_inspect(args: argparse.Namespace) -> int:
    """The ``statecraft inspect PATH [--verify] [--json] [--credentials F]`` command; see the
    module doc."""
    as_json = bool(getattr(args, "json", False))
    if str(args.path).startswith("s3://"):
        return _run_remote(args, as_json)
    try:
        data = inspect_path(args.path, verify=bool(getattr(args, "verify", False)))
    except InspectError as exc:
        return emit(
            COMMAND,
            as_json=as_json,
            data={"path": str(args.path)},
            exit_code=1,
            errors=[(exc.code, str(exc))],
        )
    except OSError as exc:
        return emit(
            COMMAND,
            as_json=as_json,
            data={"path": str(args.path)},
            exit_code=1,
            errors=[("unreadable", f"{args.path}: cannot be read ({exc})")],
        )
    files = bool(getattr(args, "files", False))
    return emit(COMMAND, as_json=as_json, data=data, text=render_text(data, files=files))
