"""Resume rules with partial artifacts (machines/resume.toml, transactions/resume_rules.py):
the production resume machine over a real run's checkpoints and hand-written artifacts.

Every refusal is asserted with its message (the artifact directory, the checkpoint or "no
resumable checkpoint", the fixes), with nothing loaded and the tree's bytes unchanged."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from artifact_files import artifacts_dir, tree, write_artifact
from checkpoint_runs import RUN, Objects, committed_run, private_copy

from statecraft.checkpoint.kernel.artifact_catalog import (
    ArtifactState,
    open_artifacts,
    scan_artifacts,
)
from statecraft.checkpoint.kernel.catalog import scan
from statecraft.checkpoint.kernel.layout import ARTIFACT_MANIFEST_NAME, MANIFEST_NAME, iter_dirname
from statecraft.checkpoint.kernel.machines import load_machine
from statecraft.checkpoint.resume.bindings import ResumeContext, Tracked
from statecraft.checkpoint.resume.rules import auto_outcome
from statecraft.errors import ArtifactResumeError, ResumeError
from statecraft.storage.local import LocalStore

FIXES = ("resume=off", "statecraft.load_weights(model, ")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Committed iterations 2, 4, 6 and 8 of a run with a data source."""
    return committed_run(tmp_path_factory.mktemp("pristine"), data=True)


@pytest.fixture
def out(pristine: Path, tmp_path: Path) -> Path:
    return private_copy(pristine, tmp_path)


def attempt_of(out: Path) -> Path:
    return next(p for p in RUN.job_dir(out).iterdir() if p.is_dir())


def checkpoints_of(out: Path) -> Path:
    return attempt_of(out) / "checkpoints"


def add_artifact(out: Path, iteration: int, components: tuple[str, ...] = ("model",)) -> Path:
    return write_artifact(artifacts_dir(attempt_of(out)), iteration, components)


def params(objects: Objects) -> list[torch.Tensor]:
    return [p.detach().clone() for p in objects.model.parameters()]


def resume(
    out: Path, *, mode: str = "auto", explicit: str | None = None, **extra: Any
) -> tuple[ResumeContext, Any, Objects]:
    """Run the shipped resume machine on the run's attempt, its artifacts passed as the
    facade passes them."""
    objects = Objects()
    ckpts = checkpoints_of(out)
    ctx = ResumeContext(
        mode=mode,
        tracked=Tracked(
            model=objects.model,
            optimizer=objects.optimizer,
            scheduler=objects.scheduler,
            data=objects.cursor,
        ),
        store=LocalStore(str(ckpts)) if ckpts.is_dir() else None,
        explicit=explicit,
        artifacts=open_artifacts(attempt_of(out)),
        **extra,
    )
    run = load_machine("resume").run(ctx)
    return ctx, run, objects


def refused(out: Path, **kwargs: Any) -> ArtifactResumeError:
    """Resume, expecting an artifact refusal with nothing loaded and no byte changed."""
    before = tree(out)
    fresh = params(Objects())
    _, run, objects = resume(out, **kwargs)
    assert run.final_state == "refused"
    assert isinstance(run.error, ArtifactResumeError), run.error
    assert tree(out) == before
    assert all(torch.equal(a, b) for a, b in zip(params(objects), fresh, strict=True))
    assert objects.cursor.position == 0
    return run.error


def assert_fixes(message: str, beyond: int) -> None:
    for fix in FIXES:
        assert fix in message
    assert f"at or beyond {iter_dirname(beyond)}" in message


class TestAuto:
    def test_artifacts_only_refuses(self, out: Path) -> None:
        """An attempt holding a committed artifact and no checkpoints/ refuses to start
        fresh, naming the artifact, "no resumable checkpoint" and the fixes."""
        where = add_artifact(out, 10)
        shutil.rmtree(checkpoints_of(out))
        error = refused(out)
        message = str(error)
        assert message.startswith("resume=auto refused: the attempt holds the committed partial")
        assert f"artifact {where} (components ['model'])" in message
        assert "but no resumable checkpoint (checkpoint: none)" in message
        assert_fixes(message, 10)
        assert f"statecraft.load_weights(model, {str(where)!r})" in message
        assert (error.artifact, error.checkpoint, error.reason) == (
            str(where),
            None,
            "no_checkpoint",
        )

    def test_no_checkpoint_verifies_refuses(self, out: Path) -> None:
        """Every checkpoint corrupt and a committed artifact: refused, not a fresh start."""
        for iteration in (2, 4, 6, 8):
            (checkpoints_of(out) / iter_dirname(iteration) / MANIFEST_NAME).write_bytes(b"{")
        add_artifact(out, 3)
        error = refused(out)
        assert "no resumable checkpoint" in str(error)

    def test_checkpoint_older_than_newest_artifact_refuses(self, out: Path) -> None:
        """The newest checkpoint (8) is older than the newest artifact (10): refused, naming
        both."""
        add_artifact(out, 9)
        where = add_artifact(out, 10, ("model", "optimizer"))
        message = str(refused(out))
        assert f"checkpoint local:{checkpoints_of(out)}/{iter_dirname(8)} (iteration 8)" in message
        assert f"is older than the committed partial artifact {where}" in message
        assert "(components ['model', 'optimizer']) (iteration 10)" in message
        assert_fixes(message, 10)

    @pytest.mark.parametrize("artifact", [6, 8])
    def test_adopts_at_or_after_the_newest_artifact(self, out: Path, artifact: int) -> None:
        """A checkpoint at or after the newest artifact is adopted as before."""
        add_artifact(out, artifact)
        ctx, run, objects = resume(out)
        assert run.final_state == "resumed", run.error
        assert ctx.result is not None
        assert ctx.result.step == 8
        assert objects.cursor.position == 16

    def test_corrupt_artifact_with_manifest_counts(self, out: Path) -> None:
        """An artifact whose manifest does not parse still counts (fail closed)."""
        where = add_artifact(out, 10)
        (where / ARTIFACT_MANIFEST_NAME).write_bytes(b"{not json")
        message = str(refused(out))
        assert f"partial artifact {where}, whose manifest is there but which does not " in message
        assert "counted anyway" in message

    def test_full_manifest_in_an_artifact_dir_counts(self, out: Path) -> None:
        """An artifact directory holding a full-checkpoint manifest counts too (fail closed)."""
        where = artifacts_dir(attempt_of(out)) / iter_dirname(10)
        shutil.copytree(checkpoints_of(out) / iter_dirname(8), where)
        message = str(refused(out))
        assert "holding a full-checkpoint manifest" in message

    def test_partial_artifact_does_not_count(self, out: Path) -> None:
        """An artifact directory without a manifest (interrupted) does not count."""
        write_artifact(artifacts_dir(attempt_of(out)), 10, ("model",), manifest=False)
        ctx, run, _ = resume(out)
        assert run.final_state == "resumed", run.error
        assert ctx.result is not None
        assert ctx.result.step == 8

    def test_fresh_without_artifacts(self, out: Path) -> None:
        """No checkpoints and no artifacts: a fresh start, as before."""
        shutil.rmtree(checkpoints_of(out))
        ctx, run, _ = resume(out)
        assert run.final_state == "fresh"
        assert ctx.result is not None
        assert ctx.result.step == 0


class TestExplicit:
    def test_behind_the_newest_artifact_refuses(self, out: Path) -> None:
        """An explicit checkpoint behind the newest artifact is refused, naming both."""
        where = add_artifact(out, 6)
        source = str(checkpoints_of(out) / iter_dirname(4))
        message = str(refused(out, mode="explicit", explicit=source))
        assert message.startswith(f"resume={source} refused: checkpoint local:{source}")
        assert f"(iteration 4) is older than the committed partial artifact {where}" in message
        assert_fixes(message, 6)

    @pytest.mark.parametrize("artifact", [6, 8])
    def test_at_or_beyond_resumes(self, out: Path, artifact: int) -> None:
        """An explicit checkpoint at or beyond the newest artifact resumes."""
        add_artifact(out, artifact)
        source = str(checkpoints_of(out) / iter_dirname(8))
        ctx, run, _ = resume(out, mode="explicit", explicit=source)
        assert run.final_state == "resumed", run.error
        assert ctx.result is not None
        assert ctx.result.step == 8

    @pytest.mark.parametrize("inside", [None, "model.pt", "dir"])
    def test_an_artifact_source_refuses(self, out: Path, inside: str | None) -> None:
        """An artifact directory (or a file in one, or checkpoint_artifacts/ itself) is
        refused as a source, pointing at statecraft.load_weights."""
        where = add_artifact(out, 10)
        add_artifact(out, 4)
        source = {None: where, "model.pt": where / "model.pt", "dir": where.parent}[inside]
        error = refused(out, mode="explicit", explicit=str(source))
        message = str(error)
        directory = where if inside != "dir" else where.parent
        assert message.startswith(f"resume={source} refused: {directory} is a partial artifact")
        assert "an artifact is never a resume source" in message
        assert f"statecraft.load_weights(model, {str(directory)!r})" in message
        assert f"at or beyond {iter_dirname(10)} (the attempt's newest artifact)" in message
        assert error.reason == "artifact_source"

    def test_a_dir_holding_an_artifact_manifest_refuses(self, out: Path, tmp_path: Path) -> None:
        """A copied artifact elsewhere (its manifest inside) is still refused as a source."""
        where = add_artifact(out, 10)
        copy = tmp_path / "elsewhere" / iter_dirname(10)
        shutil.copytree(where, copy)
        message = str(refused(out, mode="explicit", explicit=str(copy)))
        assert f"{copy} is a partial artifact" in message

    def test_legacy_without_iteration_refuses(self, out: Path, tmp_path: Path) -> None:
        """A legacy .pt without trainer state has no derivable iteration: refused naming the
        artifact when the attempt holds one."""
        where = add_artifact(out, 6)
        legacy = tmp_path / "legacy.pt"
        torch.save({"model": Objects().model.state_dict()}, legacy)
        error = refused(out, mode="explicit", explicit=str(legacy))
        message = str(error)
        assert f"the iteration of checkpoint local:{legacy} cannot be derived" in message
        assert f"at or beyond the committed partial artifact {where}" in message
        assert_fixes(message, 6)
        assert error.reason == "no_iteration"

    def test_legacy_without_iteration_and_no_artifact(self, out: Path, tmp_path: Path) -> None:
        """Without artifacts the legacy refusal is the one it always was."""
        legacy = tmp_path / "legacy.pt"
        torch.save({"model": Objects().model.state_dict()}, legacy)
        _, run, _ = resume(out, mode="explicit", explicit=str(legacy))
        assert run.final_state == "refused"
        assert type(run.error) is ResumeError
        assert "the legacy file has no trainer state" in str(run.error)

    def test_legacy_behind_the_artifact_refuses(self, out: Path, tmp_path: Path) -> None:
        """A legacy .pt's iteration is its trainer state's optimizer_step (4 < 6: refused)."""
        add_artifact(out, 6)
        iter4 = checkpoints_of(out) / iter_dirname(4)
        legacy = tmp_path / "legacy.pt"
        torch.save(
            {
                "model": torch.load(iter4 / "model.pt", weights_only=True),
                "trainer": torch.load(iter4 / "trainer.pt", weights_only=True),
            },
            legacy,
        )
        message = str(refused(out, mode="explicit", explicit=str(legacy)))
        assert f"checkpoint local:{legacy} (iteration 4) is older than" in message


class TestCatalog:
    def test_states_and_newest_with_manifest(self, out: Path) -> None:
        """Committed, corrupt (with manifest) and partial artifacts, newest first; the newest
        with a manifest is the corrupt one (fail closed)."""
        root = artifacts_dir(attempt_of(out))
        add_artifact(out, 4, ("model", "optimizer"))
        bad = add_artifact(out, 6)
        (bad / "model.pt").write_bytes(b"truncated")
        write_artifact(root, 8, ("model",), manifest=False)
        catalog = scan_artifacts(open_artifacts(attempt_of(out)))
        assert [(e.iteration, e.state) for e in catalog.entries] == [
            (8, ArtifactState.PARTIAL),
            (6, ArtifactState.CORRUPT),
            (4, ArtifactState.COMMITTED),
        ]
        assert "has no artifact manifest" in catalog.entries[0].reason
        assert "model.pt" in catalog.entries[1].reason
        assert catalog.entries[2].components == ("model", "optimizer")
        assert {e.kind for e in catalog.entries} == {"artifact"}
        newest = catalog.newest_with_manifest()
        assert newest is not None
        assert newest.iteration == 6
        assert [e.iteration for e in catalog.committed()] == [4]

    def test_no_artifacts_dir_creates_nothing(self, out: Path) -> None:
        """Without checkpoint_artifacts/ the store is None, the catalog empty, and nothing is
        created."""
        assert open_artifacts(attempt_of(out)) is None
        catalog = scan_artifacts(None)
        assert catalog.entries == ()
        assert catalog.newest_with_manifest() is None
        assert not artifacts_dir(attempt_of(out)).exists()

    def test_auto_outcome_matches_the_machine(self, out: Path) -> None:
        """auto_outcome (inspect's line) says what the machine does: refuse, then adopt."""
        add_artifact(out, 10)
        catalog = scan(LocalStore(str(checkpoints_of(out))), keep_payloads=False)
        outcome = auto_outcome(catalog, scan_artifacts(open_artifacts(attempt_of(out))))
        assert outcome.action == "refuse"
        assert outcome.line == f"refuse: {refused(out)}"
        shutil.rmtree(artifacts_dir(attempt_of(out)))
        add_artifact(out, 8)
        catalog = scan(LocalStore(str(checkpoints_of(out))), keep_payloads=False)
        outcome = auto_outcome(catalog, scan_artifacts(open_artifacts(attempt_of(out))))
        assert (outcome.action, outcome.line) == ("adopt", "adopt iter_000000008 (committed)")
