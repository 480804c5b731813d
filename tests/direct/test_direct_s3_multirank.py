"""Two gloo ranks on CPU (FSDP2: every rank owns real shards) save straight into the real S3
server and resume from it in a new process group: every rank writes its own shards, the
manifest names both ranks', and the resumed training is bit-exact against the uninterrupted
one (model and next RNG draw of every rank). The same checkpoint then resumes resharded in one
process (a plain module): exactly the gathered full state that was saved."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from s3_server import BUCKET, S3Server

pytestmark = pytest.mark.slow

STEPS = 3


def _phase(rank: int, world_size: int, tmp: str, credentials: str, prefix: str, phase: str) -> None:
    os.environ["TMPDIR"] = tmp
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp}/store-{phase}", rank=rank, world_size=world_size
    )
    try:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        from statecraft.checkpoint.config.schema import CheckpointStoreConfig
        from statecraft.checkpoint.direct.resume import load_direct_checkpoint
        from statecraft.checkpoint.direct.root import open_direct_root
        from statecraft.checkpoint.direct.saving import save_direct_checkpoint
        from statecraft.checkpoint.fencing.object_lease import acquire_object_lease
        from statecraft.checkpoint.kernel.layout import RunAttempt
        from statecraft.checkpoint.resume.records import Tracked
        from statecraft.checkpoint.state import gather_rng_inventory
        from statecraft.checkpoint.state.capture import gather_into
        from statecraft.checkpoint.state.clocks import Outcome
        from statecraft.parallel.collectives import TorchDistributed

        collective = TorchDistributed()
        config = CheckpointStoreConfig(
            backend="object_store", bucket=BUCKET, credentials=credentials, prefix=prefix
        )
        attempt = RunAttempt(Path(tmp) / "out" / "p" / "g" / "n" / "ts", "ts", False, True, "t")
        root = open_direct_root(config, attempt)
        mesh = init_device_mesh("cpu", (world_size,))
        torch.manual_seed(0 if phase == "first" else 99)  # the resumed weights come from S3
        model = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.Dropout(0.3), torch.nn.Linear(16, 4)
        )
        fully_shard(model, mesh=mesh)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        tracked = Tracked(model=model, optimizer=optimizer)

        def train(steps: int) -> None:
            for _ in range(steps):
                model(torch.randn(3, 8)).pow(2).mean().backward()  # this rank's stream
                optimizer.step()
                optimizer.zero_grad()
                tracked.clocks.record(Outcome.APPLIED)

        out: dict[str, object] = {}
        if phase == "first":
            torch.manual_seed(1000 + rank)
            train(STEPS)
            lease = (
                acquire_object_lease(root.store, ttl_s=600, takeover=False) if rank == 0 else None
            )
            rng = gather_rng_inventory(
                rank=rank, world_size=world_size, all_gather_object=gather_into(collective)
            )
            report = save_direct_checkpoint(
                tracked, root, collective=collective, rng=rng, data=None, step=STEPS, lease=lease
            )
            out["location"] = report.location
            saved = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
            out["saved_model"] = {k: v.detach().clone() for k, v in saved.items()}
        else:
            result = load_direct_checkpoint(
                tracked, root.store, collective=collective, location=root.uri
            )
            out["start"] = result.step
            out["rng"] = result.rng
        train(STEPS)
        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
        out["model"] = {k: v.detach().clone() for k, v in full.items()}
        out["next_draw"] = torch.rand(3)
        torch.save(out, f"{tmp}/{phase}-rank{rank}.pt")
        dist.barrier()
    finally:
        dist.destroy_process_group()
    os._exit(0)  # a gloo process may abort at interpreter exit; the files are the verdict


def _first(rank: int, world_size: int, *args: str) -> None:
    _phase(rank, world_size, *args, "first")


def _resumed(rank: int, world_size: int, *args: str) -> None:
    _phase(rank, world_size, *args, "resumed")


def test_two_ranks_save_to_s3_and_resume_bit_exact(s3_server: S3Server, tmp_path: Path) -> None:
    prefix = f"multirank-{uuid.uuid4().hex[:8]}/checkpoints"
    args = (2, str(tmp_path), str(s3_server.credentials_file), prefix)
    torch.multiprocessing.spawn(_first, args=args, nprocs=2, join=True)
    client = s3_server.client()
    manifest_key = f"{prefix}/iter_{STEPS:09d}/.posttrain-manifest.json"
    manifest = json.loads(client.get_object(Bucket=BUCKET, Key=manifest_key)["Body"].read())
    shards = sorted(p for p in manifest["files"] if p.endswith(".distcp"))
    assert shards == ["model/__0_0.distcp", "model/__1_0.distcp", "optim/__0_0.distcp",
                      "optim/__1_0.distcp"]  # fmt: skip
    assert manifest["writer"]["world_size"] == "2"
    torch.multiprocessing.spawn(_resumed, args=args, nprocs=2, join=True)
    for rank in (0, 1):
        first = torch.load(tmp_path / f"first-rank{rank}.pt", weights_only=True)
        resumed = torch.load(tmp_path / f"resumed-rank{rank}.pt", weights_only=True)
        assert resumed["start"] == STEPS
        assert resumed["rng"] == "restored"
        assert torch.equal(resumed["next_draw"], first["next_draw"]), rank
        for key, value in first["model"].items():
            assert torch.equal(resumed["model"][key], value), (rank, key)
    assert not list(tmp_path.glob("**/iter_*"))  # nothing was written or cached locally

    # resharded: the 2-rank checkpoint resumes in one process (a plain module, no FSDP); the
    # model is exactly the gathered full state saved; RNG is skipped (another world size)
    from test_direct_save_resume import Root, make_tracked  # one process, no process group

    from statecraft.checkpoint.direct.resume import load_direct_checkpoint
    from statecraft.parallel.collectives import SingleProcess
    from statecraft.storage.objects import ObjectStore
    from statecraft.storage.s3 import S3Bucket
    from statecraft.storage.s3_credentials import load_credentials

    bucket = S3Bucket(load_credentials(s3_server.credentials_file), BUCKET)
    root = Root(ObjectStore(bucket, prefix=prefix, name=BUCKET), f"s3://{BUCKET}/{prefix}")
    single = make_tracked()
    single.model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.Dropout(0.3), torch.nn.Linear(16, 4)
    )
    single.optimizer = torch.optim.AdamW(single.model.parameters(), lr=1e-2)
    single.scheduler = None
    result = load_direct_checkpoint(
        single, root.store, collective=SingleProcess(), location=root.uri
    )
    assert result.step == STEPS
    assert result.rng == "topology_changed"
    saved = torch.load(tmp_path / "first-rank0.pt", weights_only=True)["saved_model"]
    for key, value in single.model.state_dict().items():
        assert torch.equal(value, saved[key]), key
