"""The toy `replace` machine of the crash-harness tests: right and deliberately wrong bindings,
the scenario the explorer crashes, and the checks its spec names."""

from __future__ import annotations

from pathlib import Path

import attrs

from statecraft.engine import Bindings, CrashPlan, Machine, RunResult, load_spec, load_table
from statecraft.proofs import CheckContext, GuaranteeViolation
from statecraft.storage import LocalStore, SimWorld

HERE = Path(__file__).parent / "toy"
TABLE = load_table(HERE / "replace.toml")
SPEC = load_spec(HERE / "replace.spec.toml")
ROOT = "/store"
OLD = b"version-1 " * 40
NEW = b"version-2 " * 50
VERSIONS = {"data.v1": OLD, "data.v2": NEW}


@attrs.define
class ReplaceContext:
    store: LocalStore
    unsynced: int | None = None


def write_data_right(ctx: ReplaceContext) -> None:
    ctx.store.write_atomic("data.v2", NEW)


def switch_pointer_right(ctx: ReplaceContext) -> None:
    ctx.store.write_atomic("current", b"data.v2")


def write_data_wrong(ctx: ReplaceContext) -> None:
    """Bug 1 (with switch_pointer_wrong): writes data.v2 and leaves its fsync for later."""
    fs = ctx.store.fs
    ctx.unsynced = fs.open_write(ctx.store.abspath("data.v2"), exclusive=False)
    fs.write(ctx.unsynced, NEW)


def switch_pointer_wrong(ctx: ReplaceContext) -> None:
    """Publishes the pointer before the data is fsynced (bug 1) and renames it without a
    directory fsync (bug 2)."""
    fs = ctx.store.fs
    temp = ctx.store.abspath(".current.tmp")
    handle = fs.open_write(temp, exclusive=False)
    fs.write(handle, b"data.v2")
    fs.fsync(handle)
    fs.close(handle)
    fs.rename(temp, ctx.store.abspath("current"))
    if ctx.unsynced is not None:
        fs.fsync(ctx.unsynced)
        fs.close(ctx.unsynced)


def observe_replace(ctx: ReplaceContext) -> str:
    if ctx.store.stat("current") is not None and ctx.store.read_bytes("current") == b"data.v2":
        return "committed"
    return "absent"


RIGHT = Bindings(
    effects={"write_data": write_data_right, "switch_pointer": switch_pointer_right},
    observers={"observe_replace": observe_replace},
)
WRONG = Bindings(
    effects={"write_data": write_data_wrong, "switch_pointer": switch_pointer_wrong},
    observers={"observe_replace": observe_replace},
)


@attrs.define
class ReplaceScenario:
    """v1 is durable; replace publishes v2."""

    bindings: Bindings
    name: str = "replace-v1-to-v2"
    machine: str = "replace"
    recovery_may_fail: bool = False

    def setup(self, world: SimWorld) -> None:
        store = world.local_store(ROOT)
        store.write_atomic("data.v1", OLD)
        store.write_atomic("current", b"data.v1")

    def _machine(self) -> Machine:
        return Machine(TABLE, self.bindings)

    def run(self, world: SimWorld, *, crash: CrashPlan | None) -> RunResult:
        ctx = ReplaceContext(world.local_store(ROOT))
        return self._machine().run(ctx, crash=crash, gate=world.gate)

    def recover(self, world: SimWorld) -> RunResult:
        ctx = ReplaceContext(world.local_store(ROOT))
        return self._machine().recover(ctx)


def _current(ctx: CheckContext) -> tuple[str | None, bytes | None]:
    tree = ctx.world.fs.tree(ROOT)
    name = tree.get("current")
    if name is None:
        return None, None
    return name.decode(errors="replace"), tree.get(name.decode(errors="replace"))


def current_names_complete_version(ctx: CheckContext) -> None:
    name, content = _current(ctx)
    if name is None:
        return
    ctx.exercised()
    if name not in VERSIONS:
        raise GuaranteeViolation(f"`current` holds {name!r}, not a version name")
    if content != VERSIONS[name]:
        got = (
            "missing"
            if content is None
            else f"{len(content)} bytes, not the {len(VERSIONS[name])} written"
        )
        raise GuaranteeViolation(f"`current` names {name} but that file is {got}")


def acknowledged_replace_survives(ctx: CheckContext) -> None:
    if not ctx.acknowledged:
        return
    ctx.exercised()
    name, content = _current(ctx)
    if name != "data.v2" or content != NEW:
        raise GuaranteeViolation(
            f"replace returned, yet after the crash `current` names {name!r}"
            f" ({'complete' if content == VERSIONS.get(name or '') else 'incomplete'})"
        )


def recovery_completes_replace(ctx: CheckContext) -> None:
    ctx.exercised()
    name, content = _current(ctx)
    if name != "data.v2" or content != NEW:
        raise GuaranteeViolation(f"after recovery `current` names {name!r}, not a complete data.v2")


def never_asserts(ctx: CheckContext) -> None:
    """A check whose premise never holds: it runs everywhere and proves nothing."""
    if ctx.phase == "no such phase":
        ctx.exercised()


def always_violates(ctx: CheckContext) -> None:
    """A check that raises without calling ``exercised()``: still substantive."""
    raise GuaranteeViolation("always")
