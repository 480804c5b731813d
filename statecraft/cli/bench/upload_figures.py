"""The archive upload and fetch rows of the one benchmark table (``statecraft bench``):
statecraft's transfer against boto3's ``upload_file`` / ``download_file`` on a local SeaweedFS,
measured by :func:`statecraft.cli.bench.upload.measure_upload`."""

from __future__ import annotations

from collections.abc import Callable

from statecraft.cli.bench.figures import (
    Figure,
    FigureRun,
    FigureUnavailable,
    Measured,
    paired,
    size_text,
)
from statecraft.cli.bench.upload import TRANSFER_TARGET, measure_upload

__all__ = ["FIGURES"]


def _transfer(op: str) -> Callable[[FigureRun], Measured]:
    """Per round (the order alternating, a local SeaweedFS): boto3 / statecraft seconds of the
    ``op`` (``upload`` or ``fetch``); one run serves both figures."""

    def run(ctx: FigureRun) -> Measured:
        from statecraft.cli.bench.s3_local import weed_binary

        try:
            weed_binary()
        except RuntimeError as error:
            raise FigureUnavailable(f"no local S3 service: {error}") from None
        mib = ctx.size_mib(16, 256)
        data = ctx.once(
            f"upload:{mib}",
            lambda: measure_upload(size_mib=mib, repeat=ctx.repeat, directory=ctx.root),
        )
        s = data["samples"]
        return Measured(paired(s[f"{op}_statecraft"], s[f"{op}_boto3"], invert=True),
                        size_text(mib))  # fmt: skip

    return run


FIGURES = [
    Figure("archive upload", "boto3 upload_file", TRANSFER_TARGET, "higher", _transfer("upload"),
           slow=True),
    Figure("archive fetch", "boto3 download_file", TRANSFER_TARGET, "higher", _transfer("fetch"),
           slow=True),
]  # fmt: skip
