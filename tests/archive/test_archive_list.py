"""``statecraft archive list s3://...`` and ``statecraft inspect s3://<archive>`` (issue 28
item 5) against the real S3 server: an archive's iterations are listed with their sizes and
states (complete / partial / corrupt), artifacts under ``checkpoint_artifacts/`` included;
inspect recognizes an archive (it used to call every healthy archived iteration corrupt);
exit 1 exactly when an iteration is corrupt; nothing is written."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from fetch_trees import archive, make_artifact, make_checkpoint
from s3_server import BUCKET, S3Server

from statecraft.checkpoint.kernel.layout import ARTIFACT_MANIFEST_NAME, MANIFEST_NAME
from statecraft.cli import main
from statecraft.storage.s3 import S3Bucket
from statecraft.storage.s3_credentials import load_credentials


def _run(capsys, *argv: str) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    envelope = json.loads(capsys.readouterr().out)
    assert envelope["exit_code"] == code
    return code, envelope


def _snapshot(server: S3Server, prefix: str) -> dict[str, str]:
    client = server.client()
    found: dict[str, str] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        found.update({o["Key"]: o["ETag"] for o in page.get("Contents", [])})
    return found


@pytest.fixture
def archived(s3_server: S3Server, tmp_path: Path) -> tuple[str, dict[str, int]]:
    """Checkpoints iter_2/4/6/8 and an artifact uploaded under a fresh prefix: iter_6 lost
    its manifest (an interrupted upload: partial), iter_8 lost model.pt (corrupt)."""
    bucket = S3Bucket(load_credentials(s3_server.credentials_file), BUCKET)
    prefix = f"listing/{uuid.uuid4().hex[:10]}/checkpoints"
    run = tmp_path / "run"
    sizes: dict[str, int] = {}
    for n in (2, 4, 6, 8):
        directory = make_checkpoint(run, n)
        entries = archive(bucket, directory, f"{prefix}/{directory.name}")
        sizes[directory.name] = sum(e.size for e in entries)
    artifact = make_artifact(run)
    entries = archive(bucket, artifact, f"{prefix}/checkpoint_artifacts/{artifact.name}")
    sizes[f"checkpoint_artifacts/{artifact.name}"] = sum(e.size for e in entries)
    client = s3_server.client()
    client.delete_object(Bucket=BUCKET, Key=f"{prefix}/iter_000000006/{MANIFEST_NAME}")
    client.delete_object(Bucket=BUCKET, Key=f"{prefix}/iter_000000008/model.pt")
    return prefix, sizes


def test_archive_list(capsys, s3_server: S3Server, archived) -> None:
    prefix, sizes = archived
    creds = str(s3_server.credentials_file)
    before = _snapshot(s3_server, prefix)
    code, env = _run(capsys, "archive", "list", f"s3://{BUCKET}/{prefix}", "--credentials", creds)
    assert code == 1  # iter_8 is corrupt
    data = env["data"]
    states = {it["name"]: (it["kind"], it["state"]) for it in data["iterations"]}
    artifact = next(n for n in states if n.startswith("checkpoint_artifacts/"))
    assert states == {
        "iter_000000002": ("checkpoint", "complete"),
        "iter_000000004": ("checkpoint", "complete"),
        "iter_000000006": ("checkpoint", "partial"),
        "iter_000000008": ("checkpoint", "corrupt"),
        artifact: ("artifact", "complete"),
    }
    by = {it["name"]: it for it in data["iterations"]}
    assert by["iter_000000002"]["bytes"] == sizes["iter_000000002"]
    declaration = s3_server.client().head_object(
        Bucket=BUCKET, Key=f"{prefix}/{artifact}/.posttrain-archive.json"
    )
    assert by[artifact]["bytes"] == sizes[artifact] + declaration["ContentLength"]
    assert by["iter_000000002"]["uri"] == f"s3://{BUCKET}/{prefix}/iter_000000002"
    assert "model.pt is missing" in by["iter_000000008"]["reason"]
    assert MANIFEST_NAME in by["iter_000000006"]["reason"]
    assert (data["complete"], data["partial"], data["corrupt"]) == (3, 1, 1)
    assert [e["code"] for e in env["errors"]] == ["archive_corrupt"]
    assert "iter_000000008" in env["errors"][0]["message"]
    assert _snapshot(s3_server, prefix) == before  # read-only

    s3_server.client().delete_object(
        Bucket=BUCKET, Key=f"{prefix}/iter_000000008/{MANIFEST_NAME}"
    )  # iter_8 is now merely partial
    code, env = _run(capsys, "archive", "list", f"s3://{BUCKET}/{prefix}", "--credentials", creds)
    assert code == 0
    assert env["errors"] == []


def test_archive_list_text_and_empty(capsys, s3_server: S3Server, archived) -> None:
    prefix, _ = archived
    creds = str(s3_server.credentials_file)
    code = main(["archive", "list", f"s3://{BUCKET}/{prefix}", "--credentials", creds])
    text = capsys.readouterr().out
    assert code == 1
    assert "3 complete, 1 partial, 1 corrupt" in text
    assert "iter_000000002: complete checkpoint" in text
    code, env = _run(
        capsys, "archive", "list", f"s3://{BUCKET}/nothing-{uuid.uuid4().hex[:8]}",
        "--credentials", creds,
    )  # fmt: skip
    assert code == 0
    assert env["data"]["iterations"] == []
    code, env = _run(capsys, "archive", "list", "not-a-uri", "--credentials", creds)
    assert code == 1
    assert "s3://" in env["errors"][0]["message"]


def test_inspect_recognizes_an_archive(capsys, s3_server: S3Server, archived) -> None:
    prefix, _ = archived
    creds = str(s3_server.credentials_file)
    before = _snapshot(s3_server, prefix)
    code, env = _run(capsys, "inspect", f"s3://{BUCKET}/{prefix}", "--credentials", creds)
    assert code == 1  # iter_8 is corrupt
    data = env["data"]
    assert data["kind"] == "remote_archive"
    states = {it["name"]: it["state"] for it in data["iterations"]}
    assert states["iter_000000002"] == "complete"
    assert states["iter_000000004"] == "complete"
    assert states["iter_000000006"] == "partial"
    assert states["iter_000000008"] == "corrupt"
    assert data["newest_complete"] == "iter_000000004"

    code, env = _run(
        capsys, "inspect", f"s3://{BUCKET}/{prefix}/iter_000000002", "--credentials", creds
    )
    assert code == 0
    assert env["data"]["kind"] == "remote_archive"
    assert [(it["name"], it["state"]) for it in env["data"]["iterations"]] == [
        ("iter_000000002", "complete")
    ]
    code, env = _run(
        capsys, "inspect", f"s3://{BUCKET}/{prefix}/checkpoint_artifacts", "--credentials", creds
    )
    assert code == 0
    (only,) = env["data"]["iterations"]
    assert (only["kind"], only["state"]) == ("artifact", "complete")
    assert _snapshot(s3_server, prefix) == before


def test_inspect_a_tampered_artifact_manifest(capsys, s3_server: S3Server, archived) -> None:
    """An artifact whose commit record is garbage is corrupt, named."""
    prefix, _ = archived
    client = s3_server.client()
    listing = _snapshot(s3_server, f"{prefix}/checkpoint_artifacts/")
    key = next(k for k in listing if k.endswith(ARTIFACT_MANIFEST_NAME))
    client.put_object(Bucket=BUCKET, Key=key, Body=b"{not json")
    code, env = _run(
        capsys, "inspect", f"s3://{BUCKET}/{prefix}/checkpoint_artifacts",
        "--credentials", str(s3_server.credentials_file),
    )  # fmt: skip
    assert code == 1
    (only,) = env["data"]["iterations"]
    assert only["state"] == "corrupt"
    assert ARTIFACT_MANIFEST_NAME in only["reason"]
