"""What ``statecraft inspect`` says of an iteration's data cursor (``iter_N/data.pt``): the
``data.cursor_resume`` mode it was saved under, the source kind, the short fingerprint, the
world size and whether the cursor is exact-capable (docs/checkpointing.md, "Data"). A ``v1``
or legacy ``data.pt`` recorded no identity; a malformed one shows why."""

from __future__ import annotations

from typing import Any

from statecraft.storage.local import LocalStore

__all__ = ["data_field", "data_line"]

DATA_NAME = "data.pt"


def data_field(store: LocalStore, directory: str) -> dict[str, Any] | None:
    """``{"mode", "kind", "fingerprint", "world_size", "exact", "detail"}`` of
    ``directory``'s ``data.pt``, or ``None`` when it has none."""
    path = f"{directory}/{DATA_NAME}"
    if store.stat(path) is None:
        return None
    import torch

    from statecraft.checkpoint.data import saved_identity
    from statecraft.checkpoint.state import DataState

    empty = {"mode": None, "kind": None, "fingerprint": None, "world_size": None, "exact": None}
    try:
        with store.open_read(path) as stream:
            payload = torch.load(stream, weights_only=True)
        state = DataState.from_payload(payload, source=store.abspath(path))
        identity = saved_identity(state, where=store.abspath(path))
    except Exception as exc:
        return {**empty, "detail": f"unreadable: {exc}".splitlines()[0]}
    if identity is None:
        what = "legacy" if state.legacy else "v1"
        return {
            **empty,
            "world_size": state.world_size,
            "detail": f"{what} data.pt: no source identity recorded (world size "
            f"{state.world_size})",
        }
    fingerprint = None if identity.fingerprint is None else identity.fingerprint.short
    exact = "yes" if identity.exact else "no (the source had no cursor)"
    return {
        "mode": identity.mode,
        "kind": identity.kind,
        "fingerprint": fingerprint,
        "world_size": identity.world_size,
        "exact": identity.exact,
        "detail": f"cursor_resume={identity.mode}, {identity.kind}, fingerprint "
        f"{fingerprint or '(none declared)'}, world size {identity.world_size}, "
        f"exact-capable: {exact}",
    }


def data_line(it: dict[str, Any]) -> list[str]:
    """The report line of an iteration's data cursor (none when it has no ``data.pt``)."""
    data = it.get("data")
    return [] if not data else [f"      data: {data['detail']}"]
