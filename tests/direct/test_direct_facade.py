"""The facade under ``checkpoint_store.backend=object_store`` against the real S3 server: a
Checkpointer trains with ``step_end`` saves straight into the bucket (the run directory stays
local, no local iter_*), a second job on the same root is refused naming the owner, and a new
Checkpointer resumes bit-exact from the bucket (auto, then an explicit s3:// iteration)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import torch
from s3_server import BUCKET, S3Server

import statecraft as sc
from statecraft.errors import WriterLeaseError


def _config(
    server: S3Server, prefix: str, resume: str = "auto", **extra: object
) -> sc.CheckpointConfig:
    return sc.CheckpointConfig.from_dict(
        {
            **extra,
            "save_every": 2,
            "resume": resume,
            "quiet": True,
            "checkpoint_format": "dcp",
            "checkpoint_store": {
                "backend": "object_store",
                "bucket": BUCKET,
                "credentials": str(server.credentials_file),
                "prefix": prefix,
            },
        }
    )


def _job(
    server: S3Server, out: Path, prefix: str, until: int, resume: str = "auto", **extra: object
):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ckpt = sc.Checkpointer(
        _config(server, prefix, resume, **extra),
        run=sc.RunIdentity("p", "g", "direct"),
        output_root=out,
    )
    ckpt.track(model=model, optimizer=optimizer)
    start = ckpt.resume()
    for _ in range(start.step, until):
        model(torch.randn(3, 4)).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        ckpt.record(sc.Outcome.APPLIED)
        ckpt.step_end()
    return ckpt, start, [p.detach().clone() for p in model.parameters()]


def test_facade_saves_into_the_bucket_and_resumes_bit_exact(
    s3_server: S3Server, tmp_path: Path
) -> None:
    prefix = f"facade-{uuid.uuid4().hex[:8]}/checkpoints"
    reference, _, expected = _job(s3_server, tmp_path / "ref", f"ref-{prefix}", 6)
    reference.finalize()
    reference.close()

    first, start, _ = _job(s3_server, tmp_path / "out", prefix, 4)
    assert start.step == 0
    with pytest.raises(WriterLeaseError, match="being written by"):
        _job(s3_server, tmp_path / "other", prefix, 4)  # a second job on the same root
    first.close()  # the lease is released: the next job may start at once
    keys = [k[len(prefix) + 1 :] for k in first.run_state.direct_root.bucket.list(prefix + "/")]
    assert "latest_checkpoint.txt" in keys
    assert any(k.startswith("iter_000000004/model/__0_") for k in keys)
    assert not list((tmp_path / "out").rglob("iter_*"))  # no local checkpoint

    resumed, start, weights = _job(s3_server, tmp_path / "out", prefix, 6)
    resumed.finalize()
    resumed.close()
    assert start.step == 4
    assert start.source == f"s3://{BUCKET}/{prefix}/iter_000000004"
    for got, want in zip(weights, expected, strict=True):
        assert torch.equal(got, want)

    explicit, start, _ = _job(
        s3_server, tmp_path / "again", prefix, 2, resume=f"s3://{BUCKET}/{prefix}/iter_000000002"
    )
    explicit.close()
    assert start.step == 2


def test_step_end_renews_the_object_lease_past_half_its_ttl(
    s3_server: S3Server, tmp_path: Path
) -> None:
    """The root's lease is renewed at a step_end once more than half its ttl has passed (the
    lease's clock is moved forward instead of waiting), and released at close."""
    prefix = f"renew-{uuid.uuid4().hex[:8]}/checkpoints"
    ckpt, _, _ = _job(s3_server, tmp_path / "out", prefix, 1)
    lease = ckpt.run_state.direct_lease
    before = lease.record.renewed
    real = lease.clock
    lease.clock = lambda: real() + 0.6 * lease.record.ttl_s
    ckpt.record(sc.Outcome.APPLIED)
    ckpt.step_end()  # step 2: also a save; the renewal came first, the save's check passes
    assert lease.record.renewed != before
    assert lease.generation == 1
    ckpt.close()
    _job(s3_server, tmp_path / "next", prefix, 2)[0].close()  # released: the next job starts


@pytest.mark.parametrize(
    ("knobs", "knob"),
    [
        ({"validation": {"every": 2, "save_checkpoint": True}}, "validation.save_checkpoint"),
        ({"checkpoint_components": ["model"]}, "checkpoint_components"),
    ],
)
def test_local_only_writes_are_refused_before_anything_is_created(
    tmp_path: Path, knobs: dict, knob: str
) -> None:
    """Durable validation checkpoints and partial artifacts exist for a local primary only:
    under backend=object_store resume() refuses them, naming the knob, and creates nothing."""
    from statecraft.errors import NotSupportedYetError

    config = sc.CheckpointConfig.from_dict(
        {
            "quiet": True,
            "checkpoint_format": "dcp",
            "checkpoint_store": {"backend": "object_store", "bucket": BUCKET,
                                 "credentials": "absent.json"},
            **knobs,
        }
    )  # fmt: skip
    model = torch.nn.Linear(2, 2)
    with pytest.raises(NotSupportedYetError, match=knob.replace(".", r"\.")):  # noqa: PT012
        ckpt = sc.Checkpointer(
            config, run=sc.RunIdentity("p", "g", "n"), output_root=tmp_path / "o"
        )
        ckpt.track(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
        ckpt.resume()
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").rglob("*"))


def test_a_sentinel_stop_saves_the_emergency_checkpoint_into_the_bucket(
    s3_server: S3Server, tmp_path: Path
) -> None:
    """A preemption sentinel at step 3 (off the save_every=2 cadence): the emergency save is a
    direct save into the bucket (latest names iter 3, nothing local), and the next job resumes
    from it."""
    from statecraft.errors import RunStoppedError

    prefix = f"stop-{uuid.uuid4().hex[:8]}/checkpoints"
    sentinels = tmp_path / "slurm"
    sentinels.mkdir()
    termination = {"sentinel_dir": str(sentinels)}
    ckpt, _, _ = _job(s3_server, tmp_path / "out", prefix, 2, termination=termination)
    (sentinels / "SIGUSR1_RECEIVED").write_text("")
    ckpt.record(sc.Outcome.APPLIED)
    ckpt.step_end()  # step 3: the stop, then the emergency save
    with pytest.raises(RunStoppedError):
        ckpt.save()
    ckpt.finalize()
    ckpt.close()
    store = ckpt.run_state.direct_root.store
    assert store.read_bytes("latest_checkpoint.txt") == b"iter_000000003\n"
    assert not list((tmp_path / "out").rglob("iter_*"))
    resumed, start, _ = _job(s3_server, tmp_path / "out", prefix, 3, termination=termination)
    resumed.close()
    assert start.step == 3
