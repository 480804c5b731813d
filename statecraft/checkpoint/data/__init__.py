"""The data cursor's identity and rules (``data.cursor_resume``; docs/checkpointing.md, "Data").

Owns: what is stored with the cursor in ``data.pt`` besides the cursor itself -- the source
identity (:mod:`.identity`: kind, exact-capable, fingerprint, seed, sharding, world size,
batch size, gradient accumulation), the source fingerprint (:mod:`.fingerprint`) and the
shipped file sources that declare one (:mod:`.jsonl`: JSONL and tar-backed JSONL); a save's
capture of every rank's cursor with that identity (:mod:`.capture`, and the ``strict`` refusal
of a source without a cursor); and the resume rules over saved and live identity
(:mod:`.rules`). ``data.pt`` itself (its schema and per-rank layout) is the state layer's
(:mod:`statecraft.checkpoint.state.data_state`).

A service: the facade captures through it, resume judges through it, ``statecraft inspect``
reads it.
"""

from statecraft.checkpoint.data.capture import capture_data
from statecraft.checkpoint.data.fingerprint import Fingerprint
from statecraft.checkpoint.data.identity import (
    DataIdentity,
    SourceIdentity,
    describe_source,
    has_cursor,
)
from statecraft.checkpoint.data.jsonl import JsonlDataset, TarJsonlDataset
from statecraft.checkpoint.data.rules import Verdict, judge_resume, saved_identity

__all__ = [
    "DataIdentity",
    "Fingerprint",
    "JsonlDataset",
    "SourceIdentity",
    "TarJsonlDataset",
    "Verdict",
    "capture_data",
    "describe_source",
    "has_cursor",
    "judge_resume",
    "saved_identity",
]
