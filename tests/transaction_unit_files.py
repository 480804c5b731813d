"""The files of a small transaction unit, written into a temporary directory by the tests of
``test_transaction_unit.py``: a table, its spec, its bindings module and its scenarios-and-checks
module. Nothing in the library lists it; ``machines check`` and ``crashcheck`` find it from the
directories alone.

The transaction ("swap") publishes ``data.v2`` and points ``current`` at it, like the toy
``replace`` machine of ``tests/toy/``. ``{mod}`` in the texts is replaced by a module-name prefix
unique to each test, so two tests never share an imported module.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import pytest

TABLE = """\
name = "swap"
doc = "Publish data.v2 and point `current` at it; readers follow `current`."
initial = "planned"
observe = "observe_swap"
bindings = "{mod}_bindings"

[states]
planned      = {{ doc = "current names the old version" }}
data_durable = {{ doc = "data.v2 is complete and durable; current still names the old one" }}
committed    = {{ doc = "current names data.v2, durably", terminal = true, observable = true }}

[[transitions]]
from = "planned"
do = "write_data"
to = "data_durable"

[[transitions]]
from = "data_durable"
do = "switch_pointer"
to = "committed"

[observations]
absent = "current does not name data.v2"

[recover]
absent = "planned"
committed = "data_durable"
"""

SPEC = """\
schema = "statecraft.spec.v1"
machine = "swap"
scenarios = "{mod}_scenarios:scenarios"
summary = "Readers following `current` see a complete version; an acknowledged swap survives."

[[guarantees]]
id = "SWAP-COMPLETE"
statement = "When `current` exists it names a file holding exactly one complete version."
check = "{mod}_scenarios:current_names_complete_version"

[[guarantees]]
id = "SWAP-RECOVERS"
statement = "After recovery, `current` names the new version."
check = "{mod}_scenarios:recovery_completes_swap"
at = ["recovered"]
kinds = ["process_kill", "power_loss"]

[[broken]]
variant = "{mod}_scenarios:unsynced_data"
catches = ["SWAP-COMPLETE"]
doc = "data.v2 renamed into place unsynced: a power loss leaves `current` naming a torn file"

[[broken]]
variant = "{mod}_scenarios:pointer_never_switched"
catches = ["SWAP-RECOVERS"]
doc = "switch_pointer forgets to write `current`: recovery ends with the old version named"

[[format.files]]
name = "data.v2"
written_by = "write_data"
doc = "The new version."

[[format.files]]
name = "current"
written_by = "switch_pointer"
doc = "The name of the current version."
"""

BINDINGS = '''\
"""Bindings of the swap transaction."""

from statecraft.engine.tagging import effect, observer

NEW = b"version-2 " * 50


@effect()
def write_data(ctx):
    {write_data}


@effect()
def switch_pointer(ctx):
    ctx.store.write_atomic("current", b"data.v2")


@observer()
def observe_swap(ctx):
    store = ctx.store
    if store.stat("current") is not None and store.read_bytes("current") == b"data.v2":
        return "committed"
    return "absent"
'''

#: the right ``write_data``: temporary, fsync, rename, directory fsync.
RIGHT_WRITE = 'ctx.store.write_atomic("data.v2", NEW)'

#: the broken ``write_data``: renames a temporary into place without fsyncing it, so a power
#: loss after the pointer switch may leave ``current`` naming an empty or torn file.
NO_FSYNC_WRITE = """fs = ctx.store.fs
    handle = fs.open_write(ctx.store.abspath(".data.tmp"), exclusive=False)
    fs.write(handle, NEW)
    fs.close(handle)
    fs.rename(ctx.store.abspath(".data.tmp"), ctx.store.abspath("data.v2"))
    fs.fsync_dir(ctx.store.root)"""

SCENARIOS = '''\
"""The scenario that crashes the swap transaction, and the checks of its spec."""

from pathlib import Path

import attrs

from statecraft.engine import Bindings, Machine
from statecraft.engine.registry import load_machine
from statecraft.engine.tagging import effect
from statecraft.proofs import GuaranteeViolation

ROOT = "/store"
OLD = b"version-1 " * 40
NEW = b"version-2 " * 50
VERSIONS = {{"data.v1": OLD, "data.v2": NEW}}
MACHINES = Path(__file__).parent / "machines"


@attrs.define
class SwapContext:
    store: object


@attrs.define
class SwapScenario:
    name: str = "swap-v1-to-v2"
    machine: str = "swap"
    recovery_may_fail: bool = False

    def setup(self, world):
        store = world.local_store(ROOT)
        store.write_atomic("data.v1", OLD)
        store.write_atomic("current", b"data.v1")

    effects: dict = attrs.field(factory=dict)  # a broken variant's replaced effects

    def build_machine(self):
        shipped = load_machine("swap", MACHINES)
        if not self.effects:
            return shipped
        return Machine(shipped.table, shipped.bindings.merged(Bindings(effects=self.effects)))

    def run(self, world, *, crash):
        machine = self.build_machine()
        return machine.run(SwapContext(world.local_store(ROOT)), crash=crash, gate=world.gate)

    def recover(self, world):
        return self.build_machine().recover(SwapContext(world.local_store(ROOT)))


def scenarios():
    return [SwapScenario()]


@effect()
def _write_unsynced(ctx):
    fs = ctx.store.fs
    handle = fs.open_write(ctx.store.abspath(".data.tmp"), exclusive=False)
    fs.write(handle, NEW)
    fs.close(handle)
    fs.rename(ctx.store.abspath(".data.tmp"), ctx.store.abspath("data.v2"))
    fs.fsync_dir(ctx.store.root)


@effect()
def _switch_nothing(ctx):
    pass


def unsynced_data():
    return [SwapScenario(name="broken-unsynced-data", effects={{"write_data": _write_unsynced}})]


def pointer_never_switched():
    return [
        SwapScenario(name="broken-no-switch", effects={{"switch_pointer": _switch_nothing}})
    ]


def _current(ctx):
    tree = ctx.world.fs.tree(ROOT)
    name = tree.get("current")
    if name is None:
        return None, None
    name = name.decode(errors="replace")
    return name, tree.get(name)


def current_names_complete_version(ctx):
    name, content = _current(ctx)
    if name is None:
        return
    if content != VERSIONS.get(name):
        size = "missing" if content is None else f"{{len(content)}} bytes"
        raise GuaranteeViolation(f"`current` names {{name}} but that file is {{size}}")


def recovery_completes_swap(ctx):
    name, content = _current(ctx)
    if name != "data.v2" or content != NEW:
        raise GuaranteeViolation(f"after recovery `current` names {{name!r}}")
'''


@attrs.frozen
class Unit:
    """A written unit: its directories and the module-name prefix of its Python files."""

    root: Path
    mod: str

    @property
    def machines_dir(self) -> Path:
        return self.root / "machines"

    @property
    def specs_dir(self) -> Path:
        return self.root / "specs"

    @property
    def dirs(self) -> list[str]:
        """The CLI options naming this unit's directories."""
        return ["--machines-dir", str(self.machines_dir), "--specs-dir", str(self.specs_dir)]

    def edit(self, relative: str, old: str, new: str) -> None:
        """Replace ``old`` (which must occur) by ``new`` in one of the unit's files."""
        path = self.root / relative.format(mod=self.mod)
        text = path.read_text()
        if old not in text:
            raise ValueError(f"{old!r} is not in {path}")
        path.write_text(text.replace(old, new))


def write_unit(root: Path, *, write_data: str = RIGHT_WRITE) -> Unit:
    """Write the swap unit under ``root`` with a fresh module prefix (``root`` must be on
    ``sys.path`` for its modules to import)."""
    mod = "unit" + uuid.uuid4().hex[:12]
    (root / "machines").mkdir(parents=True)
    (root / "specs").mkdir()
    (root / "machines" / "swap.toml").write_text(TABLE.format(mod=mod))
    (root / "specs" / "swap.toml").write_text(SPEC.format(mod=mod))
    (root / f"{mod}_bindings.py").write_text(BINDINGS.format(write_data=write_data))
    (root / f"{mod}_scenarios.py").write_text(SCENARIOS.format())
    return Unit(root, mod)


def unit_factory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Unit]]:
    """Body of a ``make_unit`` fixture: yields a factory writing swap units into ``tmp_path``
    (each on ``sys.path`` for the test); their modules are forgotten afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    made: list[Unit] = []

    def make(write_data: str = RIGHT_WRITE) -> Unit:
        unit = write_unit(tmp_path / f"u{len(made)}", write_data=write_data)
        monkeypatch.syspath_prepend(str(unit.root))
        made.append(unit)
        return unit

    yield make
    for unit in made:
        for name in [n for n in sys.modules if n.startswith(unit.mod)]:
            del sys.modules[name]
