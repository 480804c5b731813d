"""Readable one-line explanations of why ``torch.load(weights_only=True)`` refused a file.

torch's own message for a refused global is several paragraphs with terminal colour codes
(``\\x1b[1m``) that recommend ``weights_only=False``; cut to a fixed length it ends
mid-sentence. :func:`explain_load_failure` turns it into one sentence that names what the file
holds (``numpy.float64``, found by reading the pickle's opcodes, never by running them), that
``torch.load(weights_only=True)`` refuses it, and what the saving code must convert it to. Any
other failure (a torn zip, garbage bytes) keeps torch's first line, with no colour codes and
cut only at a sentence or word boundary.

::

    explain_load_failure(exc, archive)
    # 'holds numpy.float64 (numpy._core.multiarray.scalar), which torch.load(weights_only=True)
    #  refuses; the saving code must convert it (float(x) / torch.tensor(x))'
"""

from __future__ import annotations

import io
import os
import pickletools
import re
import zipfile

__all__ = ["Archive", "explain_load_failure", "plain_text"]

#: a ``torch.save`` file as :func:`explain_load_failure` may read it: a local path, its bytes,
#: or ``None`` (not available)
Archive = str | os.PathLike[str] | bytes | bytearray | None

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_GLOBAL = re.compile(r"Unsupported global: GLOBAL ([\w.]+)")
_WEIGHTS_ONLY = re.compile(r"WeightsUnpickler error:\s*([^\n]+)")
_LIMIT = 240  # characters of an unrecognised torch message kept (cut at a sentence or word)

_NUMPY_SCALAR = {"numpy._core.multiarray.scalar", "numpy.core.multiarray.scalar"}
_NUMPY_ARRAY = {
    "numpy._core.multiarray._reconstruct",
    "numpy.core.multiarray._reconstruct",
    "numpy.ndarray",
}
_STRINGS = {"BINUNICODE", "SHORT_BINUNICODE", "UNICODE", "BINUNICODE8", "STRING", "BINSTRING"}


def plain_text(text: str, *, limit: int = _LIMIT) -> str:
    """``text`` without terminal colour codes, whitespace collapsed, at most ``limit``
    characters, cut at the last sentence end (or word) before the limit, never mid-word."""
    flat = " ".join(_ANSI.sub("", text).split())
    if len(flat) <= limit:
        return flat
    head = flat[:limit]
    stop = max(head.rfind(". "), head.rfind("; "))
    if stop > limit // 3:
        return head[: stop + 1].rstrip(";") + " ..."
    return head.rsplit(" ", 1)[0] + " ..."


def _pickle_bytes(archive: Archive) -> bytes | None:
    """The ``data.pkl`` record of a ``torch.save`` zip (a path or the file's bytes)."""
    if archive is None:
        return None
    try:
        source = io.BytesIO(archive) if isinstance(archive, bytes | bytearray) else archive
        with zipfile.ZipFile(source) as z:
            name = next((n for n in z.namelist() if n.endswith("/data.pkl")), None)
            return z.read(name) if name else None
    except Exception:  # an unreadable archive: no detail, the generic message stays
        return None


def _numpy_scalar_type(archive: Archive) -> str | None:
    """``numpy.<dtype>`` of the first NumPy scalar in the pickle, read from its opcodes (the
    dtype code is the first short string after the scalar's global), or ``None``."""
    data = _pickle_bytes(archive)
    if data is None:
        return None
    try:
        import numpy
    except ImportError:  # pragma: no cover - a numpy scalar cannot be written without numpy
        return None
    seen_scalar = False
    strings: list[str] = []  # the strings pushed so far (protocol 4's STACK_GLOBAL uses two)
    try:
        for op, arg, _ in pickletools.genops(data):
            if op.name in ("GLOBAL", "INST") and isinstance(arg, str):
                seen_scalar = seen_scalar or arg.replace(" ", ".") in _NUMPY_SCALAR
            elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                seen_scalar = seen_scalar or ".".join(strings[-2:]) in _NUMPY_SCALAR
            elif op.name in _STRINGS and isinstance(arg, str):
                strings.append(arg)
                if seen_scalar and len(arg) <= 4:
                    try:
                        return f"numpy.{numpy.dtype(arg).name}"
                    except TypeError:
                        continue
    except Exception:  # a malformed pickle: no detail
        return None
    return None


def _conversion(type_name: str) -> str:
    if type_name.startswith(("numpy.int", "numpy.uint")):
        return "int(x) / torch.tensor(x)"
    if type_name == "numpy.bool":
        return "bool(x) / torch.tensor(x)"
    return "float(x) / torch.tensor(x)"


def _refused_global(name: str, archive: Archive) -> str:
    """The sentence for a global the weights-only unpickler refused."""
    if name in _NUMPY_SCALAR:
        found = _numpy_scalar_type(archive)
        what = f"{found} ({name})" if found else f"a NumPy scalar ({name})"
        fix = _conversion(found or "")
    elif name in _NUMPY_ARRAY:
        what, fix = f"a numpy.ndarray ({name})", "torch.from_numpy(x) / x.tolist()"
    elif name == "numpy.dtype":
        what, fix = "a numpy.dtype (numpy.dtype)", "str(x)"
    else:
        what = f"an object built by {name}"
        fix = "to tensors, numbers, strings, lists or dicts, e.g. the object's state_dict()"
        return (
            f"holds {what}, which torch.load(weights_only=True) refuses (unpickling it could "
            f"run code); the saving code must convert it {fix}"
        )
    return (
        f"holds {what}, which torch.load(weights_only=True) refuses; the saving code must "
        f"convert it ({fix})"
    )


def explain_load_failure(exc: BaseException, archive: Archive = None) -> str:
    """One readable line saying why loading a ``torch.save`` file failed.

    Args:
        exc: what ``torch.load(weights_only=True)`` raised.
        archive: the file (a local path or its bytes), read only to name a NumPy scalar's
            type; ``None`` leaves the type generic.

    Returns:
        ``"holds <type> (<global>), which torch.load(weights_only=True) refuses; the saving
        code must convert it (<conversion>)"`` for a refused global, otherwise
        ``"not a loadable torch.save file (<why>)"``. Never holds
        a colour code or a newline.
    """
    text = str(exc)
    refused = _GLOBAL.search(_ANSI.sub("", text))
    if refused:
        return _refused_global(refused.group(1).rstrip("."), archive)
    weights_only = _WEIGHTS_ONLY.search(_ANSI.sub("", text))
    if weights_only:
        return (
            "not a loadable torch.save file (torch.load(weights_only=True) refused it: "
            f"{plain_text(weights_only.group(1))})"
        )
    return f"not a loadable torch.save file ({type(exc).__name__}: {plain_text(text)})"
