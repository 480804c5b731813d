"""The crash harness proves specs/publish.toml on the shipped publish machine under every crash
kind, and catches each deliberately broken variant (a harness that cannot fail proves nothing)."""

from __future__ import annotations

import attrs
import pytest

from statecraft.checkpoint.archive import publish_bindings as publish
from statecraft.checkpoint.archive.declaration import DECLARATION_NAME
from statecraft.checkpoint.kernel.layout import ARTIFACT_MANIFEST_NAME
from statecraft.checkpoint.kernel.machines import load_machine, machine_bindings
from statecraft.cli.crashcheck import crashcheck
from statecraft.engine import Bindings, Machine, load_spec
from statecraft.errors import ArchiveError, PreconditionFailed
from statecraft.proofs import ExploreOptions, explore
from statecraft.proofs.archive.publish_scenarios import (
    PublishScenario,
    publish_context,
    publish_scenarios,
    remote_prefix,
)
from statecraft.resources import spec_path
from statecraft.storage import SimWorld
from statecraft.storage.objects import SimBucket

SPEC = load_spec(spec_path("publish"))
FAST = ExploreOptions(extra_subsets=0, faults=False)


def _with(**bindings) -> Machine:
    effects = {k: v for k, v in bindings.items() if not k.startswith("observe")}
    observers = {k: v for k, v in bindings.items() if k.startswith("observe")}
    merged = machine_bindings("publish").merged(Bindings(effects=effects, observers=observers))
    return Machine(load_machine("publish").table, merged)


def _scenario(name: str, machine: Machine) -> PublishScenario:
    base = next(s for s in publish_scenarios() if s.name == name)
    return attrs.evolve(base, name=f"broken-{name}", machine_factory=lambda: machine)


def _nothing(ctx) -> None:
    """An effect moved elsewhere by the broken variant."""


class TestShippedMachine:
    def test_crashcheck_proves_the_publish_spec_under_all_crash_kinds(self) -> None:
        """Every publish guarantee holds at every crash point of every scenario, under process
        kill, power loss and node loss, with injected I/O faults (lost responses included), and
        every guarantee is judged substantively somewhere."""
        (report,), scenario_reports = crashcheck(["publish"], ExploreOptions())
        assert report.violations == (), report.violations[0].reproducer()
        assert report.vacuous == ()
        assert report.crash_states >= 400
        substantive = {g.id: 0 for g in SPEC.guarantees}
        for s in scenario_reports:
            assert s.crash_points > 0
            for g_id, n in s.substantive_by_guarantee.items():
                substantive[g_id] += n
        assert all(n > 0 for n in substantive.values()), substantive

    def test_reference_runs_end_as_each_scenario_intends(self) -> None:
        """Each scenario's uncrashed run publishes, or refuses with the error it names."""
        for scenario in publish_scenarios():
            world = SimWorld()
            scenario.setup(world)
            result = scenario.run(world, crash=None)
            if scenario.expect_error is None:
                assert result.final_state == "published", (scenario.name, result.error)
            else:
                assert type(result.error).__name__ == scenario.expect_error, scenario.name


class TestBrokenVariantsAreCaught:
    def test_receipt_written_before_the_payloads(self) -> None:
        """A publish that writes .uploaded before uploading (and verifying) the payloads is
        caught: a crash in between leaves a receipt of an incomplete archive."""

        def receipt_first(ctx) -> None:
            publish.write_receipt(ctx)
            publish.upload_payloads(ctx)

        machine = _with(upload_payloads=receipt_first, write_receipt=_nothing)
        report = explore(_scenario("publish-model-artifact", machine), SPEC, FAST)
        assert "PUB-MARKER-VERIFIED" in report.violated_guarantees()

    def test_manifest_committed_before_the_payloads(self) -> None:
        """A publish that commits the remote artifact manifest before the payloads is caught."""

        def manifest_first(ctx) -> None:
            ctx.destination.bucket.put(ctx.key(ARTIFACT_MANIFEST_NAME), ctx.manifest_bytes)
            publish.upload_payloads(ctx)

        machine = _with(upload_payloads=manifest_first)
        report = explore(_scenario("publish-model-artifact", machine), SPEC, FAST)
        assert "PUB-MANIFEST-LAST" in report.violated_guarantees()

    def test_declaration_overwritten(self) -> None:
        """A declare that PUTs its inventory unconditionally (over a different declaration) is
        caught."""

        def overwrite(ctx) -> None:
            ctx.destination.bucket.put(ctx.key(DECLARATION_NAME), ctx.declared.encode())

        machine = _with(declare=overwrite)
        report = explore(_scenario("different-inventory-declared", machine), SPEC, FAST)
        assert "PUB-DECLARATION-IMMUTABLE" in report.violated_guarantees()

    def test_local_payload_removed_after_upload(self) -> None:
        """A publish that "moves" the artifact (removes a local payload once it is archived)
        is caught."""

        def receipt_and_prune(ctx) -> None:
            publish.write_receipt(ctx)
            ctx.artifacts.delete(f"{ctx.iter_dir}/model.pt")

        machine = _with(write_receipt=receipt_and_prune)
        report = explore(_scenario("publish-model-artifact", machine), SPEC, FAST)
        assert "PUB-LOCAL-UNTOUCHED" in report.violated_guarantees()

    def test_declared_archive_taken_for_uncommitted(self) -> None:
        """An observation that takes a declared (crashed) publish for an uncommitted artifact,
        so the retry refuses instead of resuming, is caught."""

        def observe(ctx) -> str:
            label = publish.observe_publish(ctx)
            return "uncommitted" if label == "declared" else label

        machine = _with(observe_publish=observe)
        report = explore(_scenario("publish-model-artifact", machine), SPEC, FAST)
        assert "PUB-RETRY-FINISHES" in report.violated_guarantees()


class _IgnoresIfNoneMatch(SimBucket):
    """A bucket that accepts If-None-Match: * over an existing object (the header ignored)."""

    def put(self, key, data, *, if_none_match=False, if_match=None):
        return super().put(key, data, if_match=if_match)


class TestConditionalWritesFailClosed:
    def test_a_server_ignoring_if_none_match_is_refused_before_any_payload(self) -> None:
        """The second conditional create of the declaration is accepted: the publish refuses
        with a clear ArchiveError, no payload or manifest is uploaded, no receipt written."""
        world = SimWorld()
        scenario = next(s for s in publish_scenarios() if s.name == "publish-model-artifact")
        scenario.setup(world)
        world.bucket = _IgnoresIfNoneMatch()
        ctx = publish_context(world, 4)
        with pytest.raises(ArchiveError, match="does not honour conditional writes"):
            publish.publish_artifact(ctx.artifacts, 4, ctx.destination)
        assert world.bucket.list("") == [f"{remote_prefix(4)}/{DECLARATION_NAME}"]
        assert ctx.artifacts.stat("iter_000000004/.uploaded") is None

    def test_an_honouring_server_refuses_the_probe(self) -> None:
        """The shipped SimBucket refuses a second conditional create (the probe's premise)."""
        bucket = SimBucket()
        bucket.put("k", b"x", if_none_match=True)
        with pytest.raises(PreconditionFailed):
            bucket.put("k", b"x", if_none_match=True)


def _declared_world() -> SimWorld:
    """A world whose publish of artifact 4 crashed after the declaration and one payload."""
    world = SimWorld()
    scenario = next(s for s in publish_scenarios() if s.name == "resume-crashed-publish")
    scenario.setup(world)
    return world


class TestRemoteStateOnResume:
    def test_an_altered_remote_payload_is_uploaded_again(self) -> None:
        """A payload object replaced by a foreign writer (no sha256 metadata) is not skipped:
        the resumed publish uploads it again and completes."""
        world = _declared_world()
        key = f"{remote_prefix(4)}/optim.pt"
        world.bucket.tamper(key, b"foreign bytes")
        ctx = publish_context(world, 4)
        report = publish.publish_artifact(ctx.artifacts, 4, ctx.destination)
        assert world.bucket.get(key) == ctx.artifacts.read_bytes("iter_000000004/optim.pt")
        assert report.uploaded == 3  # optim.pt again, trainer.pt, the manifest

    def test_another_remote_manifest_is_refused_without_a_receipt(self) -> None:
        """A remote artifact manifest of other bytes is an ArchiveMismatchError; no receipt."""
        world = _declared_world()
        world.bucket.put(f"{remote_prefix(4)}/{ARTIFACT_MANIFEST_NAME}", b"{}")
        ctx = publish_context(world, 4)
        with pytest.raises(publish.ArchiveMismatchError, match="other bytes"):
            publish.publish_artifact(ctx.artifacts, 4, ctx.destination)
        assert ctx.artifacts.stat("iter_000000004/.uploaded") is None

    def test_a_local_file_changed_after_hashing_is_never_committed(self) -> None:
        """A payload rewritten between the hash and its upload is uploaded with the sha256 of
        its new bytes: verification refuses it, no remote manifest, no receipt."""
        world = SimWorld()
        next(s for s in publish_scenarios() if s.name == "publish-model-artifact").setup(world)

        def hash_then_change(ctx) -> None:
            publish.hash_local(ctx)
            ctx.artifacts.write_atomic(f"{ctx.iter_dir}/model.pt", b"rewritten meanwhile")

        result = _with(hash_local=hash_then_change).recover(publish_context(world, 4))
        assert isinstance(result.error, ArchiveError)
        assert "local file changed during the upload" in str(result.error)
        assert world.bucket.stat(f"{remote_prefix(4)}/{ARTIFACT_MANIFEST_NAME}") is None
        assert publish_context(world, 4).artifacts.stat("iter_000000004/.uploaded") is None
