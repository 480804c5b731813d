"""The crash harness proves specs/write_job.toml on the shipped write job (save, then retention),
one job and two back-to-back asynchronous ones, and catches the deliberately wrong variants:
retention before the new save is durable, and latest advanced before the write is complete."""

from __future__ import annotations

import attrs
import pytest

from statecraft.checkpoint.kernel.machines import machine_bindings
from statecraft.cli import main
from statecraft.cli.crashcheck import crashcheck
from statecraft.engine import load_spec
from statecraft.proofs import ExploreOptions, explore
from statecraft.proofs.pool import default_jobs
from statecraft.proofs.save.write_job_broken import latest_before_commit, prune_before_durable
from statecraft.proofs.save.write_job_broken import swapped as _swapped
from statecraft.proofs.save.write_job_scenarios import WriteJobScenario, write_job_scenarios
from statecraft.resources import spec_path
from statecraft.storage import CrashKind

SPEC = load_spec(spec_path("write_job"))
FAST = ExploreOptions(extra_subsets=0, faults=False)
KILL_AND_POWER = attrs.evolve(FAST, kinds=(CrashKind.PROCESS_KILL, CrashKind.POWER_LOSS))
KILL = attrs.evolve(FAST, kinds=(CrashKind.PROCESS_KILL,))


def scenario(name: str, **changes) -> WriteJobScenario:
    (found,) = [s for s in write_job_scenarios() if s.name == name]
    return attrs.evolve(found, **changes)


class TestShippedWriteJob:
    @pytest.mark.slow
    def test_crashcheck_proves_every_guarantee_substantively(self) -> None:
        """Every guarantee of the write job holds at every crash point of every scenario under
        process kill and power loss (node loss: the CLI run), each judged substantively."""
        reports, scenario_reports = crashcheck(["write_job"], KILL_AND_POWER, jobs=default_jobs())
        (report,) = reports
        assert report.violations == (), report.violations[0].reproducer()
        assert report.vacuous == ()
        assert {s.scenario for s in scenario_reports} == {s.name for s in write_job_scenarios()}
        substantive = {g.id: 0 for g in SPEC.guarantees}
        for s in scenario_reports:
            for g_id, n in s.substantive_by_guarantee.items():
                substantive[g_id] += n
        assert all(n > 0 for n in substantive.values()), substantive

    def test_crashcheck_lists_write_job(self, capsys) -> None:
        """``statecraft machines check`` lists the write job table with its contract clean."""
        assert main(["machines", "check"]) == 0
        assert "ok   write_job:" in capsys.readouterr().out

    def test_every_reference_run_retains(self) -> None:
        """Each scenario's uncrashed run ends retained with the expected layout (what the
        checks compare recovery with)."""
        layouts = {}
        for s in write_job_scenarios():
            view = s.expected()
            layouts[s.name] = sorted(
                n for n in view.files if n.startswith("iter_") and not n.endswith("/trainer.pt")
            )
        assert layouts["one-job-keep-model-1"] == [
            "iter_000000004/.posttrain-manifest.json",
            "iter_000000004/model.pt",
            "iter_000000004/optim.pt",
        ]
        assert (
            "iter_000000004/.retention-weights-only.json"
            in layouts["two-async-jobs-keep-optim-1-model-2"]
        )
        assert "iter_000000004/model.pt" in layouts["pending-validation-untouched"]


class TestBrokenVariantsAreCaught:
    def test_prune_before_the_new_save_is_durable(self) -> None:
        """Retention ordered before the save is caught: its operations precede the durable
        publication of latest, and its crash states lack the new checkpoint."""
        broken = scenario("one-job-keep-model-1", machine_factory=prune_before_durable)
        report = explore(broken, SPEC, KILL)
        caught = report.violated_guarantees()
        assert {"WRITE-JOB-ORDER", "WRITE-JOB-DURABLE-FIRST"} <= caught, caught
        first = next(v for v in report.violations if v.guarantee == "WRITE-JOB-ORDER")
        assert "before its save was durable" in first.message

    def test_latest_before_the_write_is_complete(self) -> None:
        """A save that advances latest before its commit is caught by WRITE-JOB-LATEST."""
        broken = scenario("one-job-keep-model-1", save_machine_factory=latest_before_commit)
        report = explore(broken, SPEC, KILL)
        assert "WRITE-JOB-LATEST" in report.violated_guarantees()
        first = next(v for v in report.violations if v.guarantee == "WRITE-JOB-LATEST")
        assert "names iter 4, but iter_000000004 has no manifest" in first.message


class TestUploadInTheWriteJob:
    def test_upload_after_retention_is_caught(self) -> None:
        """A table that runs retention before the upload of the new checkpoint is caught (the
        receipt retention with require_uploaded needs comes too late)."""
        machine = _swapped(
            "write_job", "upload_archive", "apply_retention", machine_bindings("write_job")
        )
        broken = scenario(
            "one-job-upload-then-keep-model-1-require-uploaded", machine_factory=lambda: machine
        )
        report = explore(broken, SPEC, KILL)
        assert "WRITE-JOB-UPLOAD-ORDER" in report.violated_guarantees()

    def test_a_failing_upload_is_best_effort(self) -> None:
        """An upload whose every request fails is logged and the job goes on: the save is
        durable, retention ran and kept the un-uploaded iteration, no receipt exists."""
        from statecraft.checkpoint.archive.destination import ArchiveDestination
        from statecraft.checkpoint.async_writes.staging import StagingBuffers
        from statecraft.engine.crash import FaultKind, IoGate
        from statecraft.proofs.archive.upload_scenarios import REMOTE_PREFIX
        from statecraft.proofs.oracle import CHECKPOINTS_ROOT
        from statecraft.proofs.save.scenarios import shipped_machine
        from statecraft.storage import SimWorld

        s = scenario("one-job-upload-then-keep-model-1-require-uploaded")
        world = SimWorld()
        s.setup(world)
        world.settle()
        ctx = s.context(
            s.store(world),
            4,
            salt=2,
            on_durable=lambda: None,
            staging=StagingBuffers(),
            bucket=world.bucket,
        )
        assert isinstance(ctx.destination, ArchiveDestination)
        assert ctx.destination.prefix == REMOTE_PREFIX
        world.bucket.gate = IoGate(faults={i: FaultKind.IO_ERROR for i in range(1000)})
        result = shipped_machine("write_job").run(ctx)
        assert result.final_state == "retained"
        assert ctx.upload_error is not None
        assert ctx.upload_report is None
        tree = world.fs.tree(CHECKPOINTS_ROOT)
        assert "iter_000000004/.uploaded" not in tree
        assert "iter_000000004/model.pt" in tree
